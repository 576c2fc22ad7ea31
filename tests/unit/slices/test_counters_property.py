"""Counters are exact: a set of devices of one GPU fits under the published counters if and only
if the hardware (the fake backend) accepts that combination.

The hardware side: every MIG device must be creatable on the GPU (placement valid and free,
instance count, SMs and engines — the fake backend's rules, checked by really creating them);
a whole GPU, a time-slice share or the fractional share needs a GPU with no GPU instances; the
whole GPU is used alone; time-slice shares are used together (up to the configured count) and
never with the fractional share, whose many claims are one device here.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.quantity import parse_quantity
from dra_driver.backends.errors import BackendError
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.mig import create_mig_device
from dra_driver.inventory.model import MigPlacement
from dra_driver.inventory.products import known_products
from dra_driver.slices import SliceSettings, build_resource_slices

PRODUCTS = sorted(known_products())


def fits_counters(slices: list[dict[str, Any]], chosen: list[dict[str, Any]]) -> bool:
    available: dict[tuple[str, str], Fraction] = {}
    for s in slices:
        for cs in s["spec"].get("sharedCounters") or []:
            for name, value in cs["counters"].items():
                available[(cs["name"], name)] = parse_quantity(value["value"]).value
    used: Counter[tuple[str, str]] = Counter()
    for device in chosen:
        for entry in device.get("consumesCounters") or []:
            for name, value in entry["counters"].items():
                used[(entry["counterSet"], name)] += parse_quantity(value["value"]).value
    return all(amount <= available.get(key, 0) for key, amount in used.items())


def hardware_accepts(backend: FakeBackend, chosen: list[dict[str, Any]], shares: int) -> bool:
    kinds = Counter(d["attributes"]["type"]["string"] for d in chosen)
    non_mig = kinds["gpu"] + kinds["timeslice"] + kinds["shared"]
    if non_mig and (kinds["mig"] or backend.gpu_instances(0)):
        return False
    if kinds["gpu"] and len(chosen) > 1:
        return False
    if kinds["shared"] and kinds["timeslice"]:
        return False
    if kinds["timeslice"] > shares:
        return False
    for device in chosen:
        if device["attributes"]["type"]["string"] != "mig":
            continue
        attrs = device["attributes"]
        placement = MigPlacement(attrs["placementStart"]["int"], attrs["placementSize"]["int"])
        try:
            create_mig_device(backend, 0, attrs["profile"]["string"], placement)
        except BackendError:
            return False
    return True


def published(backend: FakeBackend, shares: int) -> tuple[list[dict], list[dict]]:
    slices = build_resource_slices(backend.inventory(), SliceSettings(timeslice_shares=shares))
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    # Devices of a pre-created instance consume no counters and are not the subject here.
    return slices, [d for d in devices if d.get("consumesCounters")]


@st.composite
def scenario(draw: st.DrawFn) -> tuple[str, int, list[tuple[str, int]], list[int], bool]:
    key = draw(st.sampled_from(PRODUCTS))
    product = known_products()[key]
    shares = draw(st.integers(min_value=1, max_value=4))
    # Pre-created (static) instances the node already has, created in this order.
    static = draw(
        st.lists(
            st.sampled_from(
                [(p.name, pl.start) for p in product.mig_profiles for pl in p.placements]
            ),
            max_size=3,
        )
    )
    order = draw(st.permutations(range(64)))
    greedy = draw(st.booleans())
    return key, shares, static, list(order), greedy


def choose(devices: list[dict], order: list[int], greedy: bool, slices: list[dict]) -> list[dict]:
    """Either an arbitrary small subset, or a greedy packing (which mostly fits), so both the
    'fits' and the 'does not fit' sides are exercised."""
    picks = [devices[i] for i in order if i < len(devices)]
    if not greedy:
        return picks[: 1 + order[0] % 4]
    chosen: list[dict] = []
    for device in picks:
        if fits_counters(slices, [*chosen, device]):
            chosen.append(device)
    if order[1] % 3 == 0:
        # One more device that was left out, so greedy packings also probe 'does not fit'.
        chosen += [d for d in picks if d not in chosen][:1]
    return chosen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_counters_fit_iff_hardware_accepts(case):
    key, shares, static, order, greedy = case
    backend = FakeBackend.from_spec(f"{key}:1", "node-a")
    gpu = backend.inventory().gpus[0]
    for profile, start in static:
        size = gpu.profile(profile).placement_size  # type: ignore[union-attr]
        # One that collides with an earlier static instance: the node simply does not have it.
        with contextlib.suppress(BackendError):
            create_mig_device(backend, 0, profile, MigPlacement(start, size))
    slices, devices = published(backend, shares)
    chosen = choose(devices, order, greedy, slices)
    expected = fits_counters(slices, chosen)
    assert hardware_accepts(backend, chosen, shares) == expected, [d["name"] for d in chosen]


def test_every_published_device_fits_alone():
    for key in PRODUCTS:
        backend = FakeBackend.from_spec(f"{key}:1", "node-a")
        slices, devices = published(backend, 2)
        for device in devices:
            assert fits_counters(slices, [device]), (key, device["name"])


def test_two_media_extension_profiles_exclude_each_other():
    backend = FakeBackend.from_spec("A30-24GB:1", "node-a")
    slices, devices = published(backend, 1)
    by_name = {d["name"]: d for d in devices}
    pair = [by_name["gpu-0-mig-1g6gbme-0"], by_name["gpu-0-mig-2g12gbme-2"]]
    assert not fits_counters(slices, pair)
    assert not hardware_accepts(backend, pair, 1)
