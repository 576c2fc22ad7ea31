"""The README's first command: every example in deploy/examples through the whole local cluster."""

from __future__ import annotations

import io
import re
from pathlib import Path

import yaml

from localcluster.defaults import DEMO_GPUS
from localcluster.demo import run_demo

EXAMPLES = Path(__file__).resolve().parents[3] / "deploy" / "examples"


async def test_every_example_pod_gets_what_it_asked_for() -> None:
    out = io.StringIO()
    # The demo's own GPUs: eight H100 per node, two with MIG mode off for the busy and idle pods.
    code = await run_demo([EXAMPLES], nodes=2, gpus=DEMO_GPUS, timeout_s=60, out=out)
    text = out.getvalue()
    assert code == 0, text
    ran = len(list(EXAMPLES.glob("*.yaml")))
    assert f"all 13 example pods got what they asked for and released it ({ran} example" in text
    # Both allocation paths: the gated pod and the two gang members through the controller.
    assert text.count("allocated by: controller (gated pod)") == 3
    assert text.count("allocated by: scheduler") == 10
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in text
    assert "_SHARING=TimeSlicing:Short" in text
    assert "_MIG_1G10GB_" in text and "_MIG_1G20GB_" in text  # by profile, by capacity
    # Both pods of the shared claim were prepared with the one device of that claim.
    assert text.count("claim shared-gpu: gpu -> gpu-") == 2
    # The queues on the same 16 GPUs: a borrows all, b reclaims its 8 by evicting exactly 8
    # of a's pods within 30 s (the scenario itself fails the demo otherwise), then with
    # reclaim: Never nothing is evicted and b's pods say why they wait.
    assert "queue a runs 16 pods: 8 within its guarantee, 8 borrowed" in text
    assert "8 pods of queue a were evicted, 8 still run" in text
    assert "8 of b's pods wait ('reclaim policy is Never'), 0 more evictions" in text
    assert "the queues behaved" in text
    # The idle pod's GPU is reported idle in its claim's status, the busy one's not, and the
    # plugins' metrics show their load.
    assert re.search(r"usage/idle .* Idle=True \(NoActivity", text), text
    assert re.search(r"usage/busy .* Idle: not reported", text), text
    assert re.search(r"node-\d +usage/busy .* 80% ", text), text
    assert "the idle GPU was reported idle, the busy one not" in text


async def test_the_demo_survives_a_watch_history_too_short_to_resume_from() -> None:
    # One event of history: any two writes between a daemon's reads put its watch behind it
    # (the controller's informers get 410 Gone dozens of times in a run), so the daemons must
    # list again and carry on; every pod must still get what it asked for.
    out = io.StringIO()
    code = await run_demo(
        [EXAMPLES],
        nodes=2,
        gpus="H100-SXM5-80GB:8",
        timeout_s=90,
        out=out,
        watch_history=1,
        queues=False,
    )
    assert code == 0, out.getvalue()


async def test_a_pod_that_cannot_fit_fails_the_demo(tmp_path: Path) -> None:
    greedy = tmp_path / "greedy.yaml"
    greedy.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "nine-gpus"},
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "gpus",
                                        "exactly": {
                                            "deviceClassName": "gpu.dra-driver.dev",
                                            "count": 9,
                                        },
                                    }
                                ]
                            }
                        }
                    },
                },
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "greedy"},
                    "spec": {
                        "containers": [{"name": "c", "image": "x"}],
                        "resourceClaims": [
                            {"name": "gpus", "resourceClaimTemplateName": "nine-gpus"}
                        ],
                    },
                },
            ]
        )
    )
    out = io.StringIO()
    code = await run_demo(
        [greedy],
        nodes=1,
        gpus="H100-SXM5-80GB:8",
        timeout_s=3,
        out=out,
        queues=False,
    )
    assert code == 1
    assert "FAILED default/greedy" in out.getvalue()
    assert "not scheduled" in out.getvalue()
