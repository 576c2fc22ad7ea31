"""Identities and topology of fake GPUs: deterministic per node, distinct across nodes."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.spec import FakeGpuSpec
from dra_driver.inventory.products import known_products

MakeBackend = Callable[..., FakeBackend]
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_same_node_gives_same_identities(make_backend: MakeBackend) -> None:
    first = make_backend("H100-SXM5-80GB:4,A30-24GB:2")
    second = make_backend("H100-SXM5-80GB:4,A30-24GB:2")
    assert first.gpus == second.gpus


def test_identity_depends_on_node_and_minor_only(make_backend: MakeBackend) -> None:
    h100 = make_backend("H100-SXM5-80GB:2")
    a30 = make_backend("A30-24GB:2")
    other_node = make_backend("H100-SXM5-80GB:2", node_name="node-b")
    assert [g.uuid for g in h100.gpus] == [g.uuid for g in a30.gpus]
    assert not {g.uuid for g in h100.gpus} & {g.uuid for g in other_node.gpus}


def test_uuids_are_canonical_distinct_uuid5(make_backend: MakeBackend) -> None:
    gpus = make_backend("B200:8").gpus
    for gpu in gpus:
        assert UUID_RE.match(gpu.uuid), gpu.uuid
        assert str(uuid.UUID(gpu.uuid.removeprefix("GPU-"))) == gpu.uuid.removeprefix("GPU-")
    assert len({g.uuid for g in gpus}) == 8


def test_pci_addresses_distinct_and_two_gpus_per_root(make_backend: MakeBackend) -> None:
    gpus = make_backend("A100-SXM4-40GB:20").gpus
    bus_ids = [g.pci_bus_id for g in gpus]
    assert len(set(bus_ids)) == 20
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:00\.0", b) for b in bus_ids)
    assert gpus[0].pci_bus_id.startswith("0000:")
    roots = [g.pcie_root for g in gpus]
    assert all(re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", r) for r in roots)
    assert set(Counter(roots).values()) == {2}
    assert [roots[i] == roots[i + 1] for i in range(0, 20, 2)] == [True] * 10
    assert roots[1] != roots[2]


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, [0]), (2, [0, 1]), (3, [0, 0, 1]), (8, [0, 0, 0, 0, 1, 1, 1, 1])],
)
def test_numa_halves(make_backend: MakeBackend, count: int, expected: list[int]) -> None:
    assert [g.numa_node for g in make_backend(f"A30-24GB:{count}").gpus] == expected


def test_nvlink_domains_by_form_factor(make_backend: MakeBackend) -> None:
    gpus = make_backend(
        "H100-SXM5-80GB:2,H100-NVL-94GB:3,A30-24GB:2,H100-SXM5-80GB:1,B200:2,A100-SXM4-40GB:1"
    ).gpus
    domains = [g.nvlink_domain for g in gpus]
    sxm = domains[0]
    # All H100 SXM GPUs, even listed apart, share one NVSwitch domain.
    assert sxm and domains[1] == sxm and domains[7] == sxm
    # NVL: a bridged pair, then a lone card without a peer.
    assert domains[2] and domains[2] == domains[3] and domains[4] == ""
    # A30: one pair.
    assert domains[5] and domains[5] == domains[6]
    # B200 and A100 SXM each their own domain.
    assert domains[8] and domains[8] == domains[9] and domains[10]
    distinct = {sxm, domains[2], domains[5], domains[8], domains[10]}
    assert len(distinct) == 5
    assert all(len(d) <= 64 for d in domains)


def test_nvlink_domain_prefix_depends_on_node(make_backend: MakeBackend) -> None:
    a = make_backend("H100-SXM5-80GB:1").gpus[0].nvlink_domain
    b = make_backend("H100-SXM5-80GB:1", node_name="x" * 253).gpus[0].nvlink_domain
    assert a != b
    assert len(b) <= 64
    assert re.fullmatch(r"fake-[0-9a-f]{8}-0", b)


def test_non_nvlink_products_have_no_domain() -> None:
    spec = FakeGpuSpec.of("A30-24GB", 1)
    backend = FakeBackend("n", [spec], boot_id="b")
    assert backend.gpus[0].nvlink_domain == ""


def test_override_domain_used_verbatim_and_excluded_from_pairing() -> None:
    backend = FakeBackend(
        "n",
        [
            FakeGpuSpec.of("H100-NVL-94GB", 1, nvlink_domain="bridge-x"),
            FakeGpuSpec.of("H100-NVL-94GB", 2),
        ],
        boot_id="b",
    )
    domains = [g.nvlink_domain for g in backend.gpus]
    assert domains[0] == "bridge-x"
    assert domains[1] and domains[1] == domains[2] and domains[1] != "bridge-x"


@pytest.mark.parametrize("key", sorted(known_products()))
def test_gpu_facts_come_from_the_product(key: str) -> None:
    facts = known_products()[key]
    backend = FakeBackend("n", [FakeGpuSpec.of(key, 1)], boot_id="b", driver_version="1.2.3")
    gpu = backend.gpus[0]
    assert gpu.brand == "Nvidia"
    assert gpu.product_name == facts.product_name
    assert gpu.architecture == facts.architecture
    assert gpu.cuda_compute_capability == facts.cuda_compute_capability
    assert gpu.memory_bytes == facts.memory_mib * 1024 * 1024
    assert gpu.multiprocessors == facts.multiprocessors
    assert gpu.memory_slices == facts.memory_slices
    assert gpu.mig_profiles == facts.mig_profiles
    assert gpu.mig_capable is True
    assert gpu.mig_enabled is True
    assert gpu.driver_version == "1.2.3"
    assert gpu.cuda_driver_version == "13.0"
