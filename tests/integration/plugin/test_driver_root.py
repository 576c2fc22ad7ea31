"""The kubelet plugin, as a real process, with a (fake) driver root: every claim's spec gives
its containers the driver's files; a driver root that is not there stops it at start-up."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.cdi import CdiSpecDir
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    create_claim,
    create_node,
    registered,
    result,
    short_dir,
)
from tests.support import fake_driver_root
from tests.support.fake_driver_root import VERSION

NODE = "driver-root-node"
HOST_ROOT = "/run/nvidia/driver"


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


@pytest.fixture
def root() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def _argv(server: Server, root: Path, *extra: str) -> list[str]:
    kubeconfig = root / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    return [
        sys.executable,
        "-m",
        "kubeletplugin.cli",
        f"--node-name={NODE}",
        f"--kubeconfig={kubeconfig}",
        f"--plugin-dir={root / 'plugin'}",
        f"--registry-dir={root / 'registry'}",
        f"--cdi-root={root / 'cdi'}",
        f"--state-dir={root / 'state'}",
        "--fake-gpus=H100-SXM5-80GB:2",
        "--log-format=json",
        *extra,
    ]


async def test_claim_specs_carry_the_driver_files(
    server: Server, api: client.ApiClient, root: Path
) -> None:
    fake = fake_driver_root.build(root / "driver", layout="ubuntu")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_")}
    env["DRA_CONTAINER_DRIVER_ROOT"] = HOST_ROOT  # the environment reaches the flag too
    argv = _argv(server, root, f"--driver-root={fake.root}", f"--dev-root={fake.dev}")
    log = root / "plugin.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    try:
        await registered(proc, root / "registry" / f"{DRIVER}-reg.sock", log.read_text)
        name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], reserved=True)
        async with DraClient(root / "plugin" / "dra.sock") as dra:
            answer = (await dra.prepare([ClaimRef("default", uid, name)]))[uid]
        assert answer.error == "", answer.error
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
    specs = CdiSpecDir(root / "cdi")
    (path,) = specs.claim_specs(f"{DRIVER}/gpu").values()
    spec = specs.read(path)
    mounts = {m.container_path: m.host_path for m in spec.edits.mounts}
    lib = fake.lib_dir
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        assert mounts[f"{lib}/{name}.{VERSION}"] == f"{HOST_ROOT}{lib}/{name}.{VERSION}"
    assert mounts["/usr/bin/nvidia-smi"] == f"{HOST_ROOT}/usr/bin/nvidia-smi"
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in mounts
    assert [h.args[1] for h in spec.edits.hooks] == ["create-symlinks", "update-ldcache"]
    assert "/dev/nvidiactl" in {n.path for n in spec.edits.device_nodes}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.edits.env


async def test_a_missing_driver_root_stops_the_plugin_naming_it(server: Server, root: Path) -> None:
    missing = root / "no-driver"
    argv = _argv(server, root, f"--driver-root={missing}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_")}
    done = await asyncio.to_thread(
        subprocess.run, argv, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert f"driver root {missing} does not exist" in done.stderr
    assert not (root / "registry").exists()  # it never got as far as registering
