"""The committed version-1 file must keep loading to the same records.

`tests/data/checkpoint/v1.json` was written once by the version-1 encoder and must never be
regenerated: it stands for files on nodes today. If this test fails, the decoder has stopped
reading what older plugins wrote; fix the decoder (or add an upgrader), not the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from api.device_type import DeviceType
from dra_driver.checkpoint import (
    UPGRADERS,
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    MigInstanceRecord,
    decode_checkpoint,
)

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "checkpoint" / "v1.json"
BOOT_ID = "0f6c4a52-5d0e-4c8e-9a57-1b6f3f1f2e3d"

EXPECTED = Checkpoint(
    boot_id=BOOT_ID,
    claims={
        "11111111-1111-4111-8111-111111111111": ClaimRecord(
            uid="11111111-1111-4111-8111-111111111111",
            namespace="team-a",
            name="training-gpus",
            state=ClaimState.PREPARE_COMPLETED,
            devices=(
                DeviceRecord(
                    request_names=("gpus", "gpus/big"),
                    pool_name="node-1",
                    device_name="gpu-0",
                    cdi_device_ids=(
                        "k8s.gpu.dra-driver.dev/claim=11111111-1111-4111-8111-111111111111-gpu-0",
                    ),
                    device_type=DeviceType.GPU,
                    minor=0,
                ),
                DeviceRecord(
                    request_names=("mig",),
                    pool_name="node-1",
                    device_name="gpu-1-mig-1g.10gb-6",
                    cdi_device_ids=(
                        "k8s.gpu.dra-driver.dev/claim=11111111-1111-4111-8111-111111111111-mig-0",
                        "nvidia.com/gpu=all",
                    ),
                    device_type=DeviceType.MIG,
                    minor=1,
                ),
            ),
            mig_instances=(
                MigInstanceRecord(
                    minor=1,
                    profile="1g.10gb",
                    gi_id=9,
                    ci_id=0,
                    uuid="MIG-5c3bd1f2-8a4e-5f0a-9b7c-2d1e0f9a8b7c",
                    placement_start=6,
                    placement_size=1,
                ),
            ),
            cdi_spec="/var/run/cdi/k8s.gpu.dra-driver.dev-claim_11111111-1111-4111-8111-111111111111.yaml",
        ),
        "22222222-2222-4222-8222-222222222222": ClaimRecord(
            uid="22222222-2222-4222-8222-222222222222",
            namespace="team-b",
            name="inference",
            state=ClaimState.PREPARE_STARTED,
            devices=(
                DeviceRecord(
                    request_names=("share",),
                    pool_name="node-1",
                    device_name="gpu-2-shared",
                    cdi_device_ids=(),
                    share_id="share-7",
                    device_type=DeviceType.SHARED,
                    minor=2,
                    mps_thread_percentage=25,
                    mps_pinned_memory_bytes=4294967296,
                ),
                DeviceRecord(
                    request_names=("ts",),
                    pool_name="node-1",
                    device_name="gpu-3-ts-1",
                    cdi_device_ids=(),
                    device_type=DeviceType.TIMESLICE,
                    minor=3,
                    timeslice_interval="Short",
                ),
            ),
            # Created, then the plugin died before the compute instance existed.
            mig_instances=(
                MigInstanceRecord(
                    minor=4,
                    profile="3g.40gb",
                    gi_id=2,
                    ci_id=None,
                    uuid=None,
                    placement_start=4,
                    placement_size=4,
                ),
            ),
        ),
        "33333333-3333-4333-8333-333333333333": ClaimRecord(
            uid="33333333-3333-4333-8333-333333333333",
            namespace="default",
            name="static",
            state=ClaimState.PREPARE_COMPLETED,
            devices=(
                DeviceRecord(
                    request_names=("gpu",),
                    pool_name="node-1",
                    device_name="gpu-5-mig-3-0",
                    cdi_device_ids=("k8s.gpu.dra-driver.dev/claim=33333333-static",),
                    device_type=DeviceType.MIG,
                    pre_created=True,
                    minor=5,
                ),
            ),
        ),
    },
)


def test_golden_v1_file_loads_to_the_expected_records() -> None:
    assert decode_checkpoint(GOLDEN.read_bytes(), str(GOLDEN)) == EXPECTED


def test_golden_v1_file_is_version_1_and_loads_through_the_store(tmp_path: Path) -> None:
    document = json.loads(GOLDEN.read_text())
    assert document["version"] == 1
    copy = tmp_path / "checkpoint.json"
    copy.write_bytes(GOLDEN.read_bytes())
    result = CheckpointStore(copy).load(BOOT_ID)
    assert result.problem is None
    assert result.checkpoint == EXPECTED
    assert 1 in UPGRADERS
