from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

DAEMON = """
import asyncio, sys
from pathlib import Path
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from kubeletplugin.server import PluginServers, install_signal_handlers
from tests.integration.grpcserver.fakes import FakeNodeDriver

async def main() -> None:
    base = Path(sys.argv[1])
    servers = PluginServers("drv.example", base / "p", base / "r", FakeNodeDriver())
    stop = asyncio.Event()
    install_signal_handlers(asyncio.get_running_loop(), stop)
    await servers.start()
    print("ready", servers.dra_socket, servers.registration_socket, flush=True)
    await stop.wait()
    await servers.stop(grace=1)

asyncio.run(main())
"""


async def test_sigterm_removes_sockets_and_exits_cleanly(sockdir: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        DAEMON,
        str(sockdir),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split()
        assert line and line[0] == "ready", (await proc.stderr.read()).decode()
        dra, reg = Path(line[1]), Path(line[2])
        assert dra.is_socket()
        assert reg.is_socket()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, err.decode()
        assert "stop signal received" in err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not dra.exists()
    assert not reg.exists()
