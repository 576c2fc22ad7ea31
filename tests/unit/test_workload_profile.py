"""Workload profiles: what a cluster admin writes, what the controller keeps, read back exactly."""

from __future__ import annotations

import pytest
import yaml

from dra_driver.noderesources import CPU, MEMORY
from dra_driver.workload_profile import (
    PROFILE_KEY,
    ProfileEntry,
    dump_profile,
    entry_of,
    profile_text,
)
from tests.support import objects

SPEC = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.x"}}]}}


def _pod(cpu: str, memory: str) -> dict[str, object]:
    container = {
        "name": "c",
        "image": "i",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    return objects.pod("p", containers=[container])


def test_a_written_profile_reads_back_as_it_was() -> None:
    claim = {"spec": SPEC}
    entries = [
        ProfileEntry(entry_of(_pod("1500m", "3.5Gi"), [claim]).requests, (SPEC,), 7),
        ProfileEntry(entry_of(_pod("4", "16Gi"), [claim, claim]).requests, (SPEC, SPEC), 2.5),
    ]
    again = profile_text(dump_profile(entries), "test")
    assert again == entries
    assert again[0].requests[CPU] == 1500
    assert again[0].requests[MEMORY] == int(3.5 * 2**30)
    assert "count: 7" in dump_profile(entries)  # whole counts stay whole


def test_equal_pods_make_equal_entries_whatever_their_names() -> None:
    one = entry_of(_pod("2", "4Gi"), [{"metadata": {"name": "a"}, "spec": SPEC}])
    two = entry_of(_pod("2000m", "4096Mi"), [{"metadata": {"name": "b"}, "spec": SPEC}])
    assert one.key == two.key
    assert entry_of(_pod("3", "4Gi"), [{"spec": SPEC}]).key != one.key


def test_a_configmap_as_kubectl_prints_it_is_read_for_its_profile() -> None:
    inner = dump_profile([ProfileEntry(entry_of(_pod("1", "1Gi"), []).requests, (), 3)])
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "data": {PROFILE_KEY: inner}}
    assert [e.weight for e in profile_text(yaml.safe_dump(configmap), "cm.yaml")] == [3.0]
    with pytest.raises(ValueError, match=r"cm.yaml: the ConfigMap has no data.profile.yaml"):
        profile_text(yaml.safe_dump({"kind": "ConfigMap", "data": {}}), "cm.yaml")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[]", "expected a mapping with a `shapes` list"),
        ("shapes: [3]", r"shapes\[0\] must be a mapping"),
        (
            "shapes: [{count: 1, weight: 2}]",
            r"shapes\[0\]: give exactly one of `count` and `weight`",
        ),
        ("shapes: [{}]", r"shapes\[0\]: give exactly one"),
        ("shapes: [{count: 1.5}]", r"shapes\[0\].count must be a whole number"),
        ("shapes: [{count: 0}]", r"shapes\[0\].count must be above 0"),
        ("shapes: [{weight: -1}]", r"shapes\[0\].weight must be above 0"),
        ("shapes: [{weight: .nan}]", r"shapes\[0\].weight must be above 0"),
        ("shapes: [{count: 1, requests: {cpu: lots}}]", r"shapes\[0\].requests.cpu: 'lots' is no"),
        ("shapes: [{count: 1, requests: [cpu]}]", r"shapes\[0\].requests must be a mapping"),
        ("shapes: [{count: 1, claims: {a: 1}}]", r"shapes\[0\].claims must be a list"),
        ("shapes: [{count: 1, gpus: 2}]", r"shapes\[0\]: unknown field\(s\) gpus"),
        ("shapes: [", "not YAML or JSON"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file_and_field(document: str, message: str) -> None:
    with pytest.raises(ValueError, match=rf"workload profile p.yaml.*{message}"):
        profile_text(document, "p.yaml")
