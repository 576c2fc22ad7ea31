"""A pid's pod from real `/proc/<pid>/cgroup` files laid out under a proc root."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeletplugin.telemetry.cgroups import NoPod, pod_uid, pod_uid_from_cgroup, process_pod

UID = "0b6a2c1e-3f4d-4e5f-8a9b-0c1d2e3f4a5b"
SD = UID.replace("-", "_")
CID = "5f1e9a" * 10 + "abcd"

SYSTEMD_PATH = (
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SD}.slice/"
    f"cri-containerd-{CID}.scope"
)
V1_SYSTEMD = (
    "".join(
        f"{line}:{SYSTEMD_PATH}\n" for line in ("12:memory", "11:cpu,cpuacct", "1:name=systemd")
    )
    + "0::/\n"
)
V1_CGROUPFS = f"""11:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}
4:memory:/kubepods/besteffort/pod{UID}/{CID}
"""
V2_SYSTEMD = (
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SD}.slice/"
    f"cri-containerd-{CID}.scope\n"
)
V2_CGROUPFS = f"0::/kubepods/burstable/pod{UID}/{CID}\n"
GUARANTEED_SYSTEMD = f"0::/kubepods.slice/kubepods-pod{SD}.slice/cri-containerd-{CID}.scope\n"
GUARANTEED_CGROUPFS = f"0::/kubepods/pod{UID}/{CID}\n"
# Read from inside the plugin's own cgroup namespace: the path is relative to it.
V2_OTHER_NAMESPACE = (
    f"0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod{SD}.slice/"
    f"cri-containerd-{CID}.scope\n"
)


def _write(root: Path, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(text)


@pytest.mark.parametrize(
    "text",
    [
        V1_SYSTEMD,
        V1_CGROUPFS,
        V2_SYSTEMD,
        V2_CGROUPFS,
        GUARANTEED_SYSTEMD,
        GUARANTEED_CGROUPFS,
        V2_OTHER_NAMESPACE,
    ],
    ids=[
        "v1-systemd",
        "v1-cgroupfs",
        "v2-systemd",
        "v2-cgroupfs",
        "guaranteed-systemd",
        "guaranteed-cgroupfs",
        "v2-other-cgroup-namespace",
    ],
)
def test_every_layout_gives_the_pod_uid(tmp_path: Path, text: str) -> None:
    _write(tmp_path, 4242, text)
    assert pod_uid(tmp_path, 4242) == UID
    assert process_pod(tmp_path, 4242) == UID


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "12:memory:/docker/" + CID + "\n0::/\n",
        # Looks like a pod element, but outside kubelet's hierarchy.
        f"0::/system.slice/pod{UID}.service\n",
        "",
    ],
    ids=["service", "user-session", "docker", "pod-lookalike", "empty"],
)
def test_a_process_outside_pods_has_none(tmp_path: Path, text: str) -> None:
    _write(tmp_path, 7, text)
    assert pod_uid(tmp_path, 7) is None
    assert process_pod(tmp_path, 7) is NoPod.NOT_IN_POD


def test_a_process_that_exited_has_none(tmp_path: Path) -> None:
    assert pod_uid(tmp_path, 99) is None
    assert process_pod(tmp_path, 99) is NoPod.EXITED


def test_the_uid_is_read_from_the_first_line_naming_a_pod() -> None:
    text = f"2:cpu:/\n1:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert pod_uid_from_cgroup(text) == UID


def test_an_upper_case_uid_is_normalised() -> None:
    assert pod_uid_from_cgroup(f"0::/kubepods/pod{UID.upper()}/{CID}\n") == UID
