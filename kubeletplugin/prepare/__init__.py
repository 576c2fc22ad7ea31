"""Prepare and unprepare: turning an allocation into devices a container can use, and back."""
