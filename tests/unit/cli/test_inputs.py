"""Reading the offline tools' input: JSON and YAML read alike, errors worded as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dra_driver.allocator import AllocationMode
from dra_driver.cli.inputs import InputFileError, _documents, load_objects
from dra_driver.cli.simulate import simulate_all
from tests.bench.openb_input import objects

# Numbers JSON and YAML 1.1 read differently if taken at face value: YAML reads `1e3` (no dot)
# and `1.5e3` (no sign on the exponent) as strings, `NaN` too.
TRICKY = (
    '{"kind": "List", "items": [], "a": 1e3, "b": 1.5e+3, "c": 1.5e3, "d": -0, "e": 2.50,'
    ' "f": NaN, "g": [true, null, 1E+2, 1.0E-2, "\\u00e9\\/x"], "h": {"a": 1, "a": 2}}'
)


@pytest.mark.parametrize(
    "text",
    [
        TRICKY,
        '[{"kind": "Pod"}]',
        '{"surrogates": "\\ud83d\\ude00"}',
        "kind: List\nitems: []\n",
        "--- {a: 1}\n--- [2]\n",
        "\t{}\n",
    ],
)
def test_json_and_yaml_read_the_same(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input"
    try:
        expected = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        expected = None
    if expected is None:
        # JSON (which is YAML 1.2) accepts a tab before a document; YAML 1.1 does not.
        assert _documents(path, text) == [json.loads(text)]
    else:
        assert _documents(path, text) == expected


def test_malformed_input_is_worded_by_the_yaml_reader(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"kind": "Pod", "metadata": {"name": "x"}\n')
    with pytest.raises(InputFileError) as caught:
        load_objects(path)
    try:
        yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        assert str(caught.value) == f"{path}: not valid YAML: {err}"


def test_an_openb_trace_as_simulate_input(tmp_path: Path) -> None:
    """The openb input writer on a two-node, three-pod trace: simulate reads and places it."""
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,2,V100\nn1,4000,8192,0,\n"
    )
    (tmp_path / "openb_pod_list_tiny.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,1024,1,500,V100\nb,1000,1024,0,0,\nc,1000,1024,2,1000,\n"
    )
    path = tmp_path / "openb.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": objects(tmp_path, "tiny")})
    )
    loaded = load_objects(path)
    assert (len(loaded.nodes), len(loaded.slices), len(loaded.classes)) == (2, 1, 2)
    assert [p["metadata"]["name"] for p in loaded.pods] == ["a-0", "b-1", "c-2"]
    outcomes = simulate_all(loaded, AllocationMode.SCORED)
    # The CPU-only pod keeps off the GPU node; two whole GPUs do not fit beside a shared one.
    assert [p.node for p in outcomes.pods] == ["n0", "n1", None]
