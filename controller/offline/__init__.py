"""Offline tools that run the allocator on objects from a file: `simulate` and `explain`."""
