"""Lending the GPUs whose owners sit idle to best-effort borrowers (docs/overcommit.md)."""
