"""Making a rename or an unlink survive a power cut.

A rename is durable only once the directory holding it has been flushed; the checkpoint and the
CDI specs both rely on that, so the one way to do it lives here.
"""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
