"""Whether a process, known by its pid, is still running.

Both the plugin's MPS daemon manager and the fake MPS control tool's helpers ask this of control
daemons they did not necessarily start in this process, so the answer may come from a pid
alone. A zombie (a process that has exited but whose parent has not reaped it yet) still has
its pid and still accepts signal 0, so it is told apart through `/proc`; without `/proc` the
signal's answer is all there is.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def process_alive(pid: int, *, reap: bool = False) -> bool:
    """Alive and not a zombie. With `reap`, a child of this process that has exited is reaped
    here (the plugin is PID 1 of its container, so daemons that detached are re-parented to it,
    and nothing else would ever reap them)."""
    if reap:
        with contextlib.suppress(ChildProcessError, OSError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state follows the command name, which is in parentheses and may itself hold ")".
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
