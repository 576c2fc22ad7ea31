"""The packaged GPU facts: in step with their source, and honest about estimates."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from dra_driver.inventory.products import known_products, product

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT.parent / "shared" / "data" / "mig_profiles.json"
PACKAGED = ROOT / "dra_driver" / "data" / "gpu_profiles.json"


def _importer():
    spec = importlib.util.spec_from_file_location(
        "import_gpu_facts", ROOT / "hack/import-gpu-facts.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not SOURCE.exists(), reason="the shared facts file is not beside this checkout")
def test_packaged_facts_are_regenerated_from_the_source():
    converted = _importer().convert(json.loads(SOURCE.read_text()))
    assert json.loads(PACKAGED.read_text()) == converted, "run hack/import-gpu-facts.py"


def test_estimated_values_are_marked_unconfirmed():
    b200 = {p.name: p for p in product("B200").mig_profiles}
    assert {"memory_mib", "multiprocessors"} <= set(b200["7g.180gb"].unconfirmed)
    assert "memory_mib" not in b200["1g.45gb"].unconfirmed


def test_every_product_has_consistent_mig_tables():
    for key, item in known_products().items():
        slices = max(p.placement_size for p in item.mig_profiles)
        assert slices == item.memory_slices, key
        for profile in item.mig_profiles:
            assert len({pl.size for pl in profile.placements}) == 1, (key, profile.name)
            assert all(pl.start >= 0 and pl.end <= slices for pl in profile.placements)
            assert profile.memory_mib * 1024 * 1024 <= item.memory_bytes
        assert len({p.gi_profile_id for p in item.mig_profiles}) == len(item.mig_profiles), key


def test_unknown_product_names_the_known_ones():
    with pytest.raises(KeyError, match="known profiles: A100-SXM4-40GB"):
        product("V100")
