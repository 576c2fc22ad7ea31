"""What a CDI-aware runtime does to a container for a list of device IDs.

Used to predict and test what a pod will see without a runtime. The order follows the reference
implementation: devices are applied in the order given (a repeated ID only once); the first time a
device of a spec is met, that spec's top-level edits are applied just before it, and never again.
Later edits win: a later environment value replaces an earlier one of the same name, a later
device node replaces one at the same container path, a later mount one at the same container
path (each keeping the position where the name first appeared); hooks accumulate.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import CdiDevice, CdiSpec, ContainerEdits, DeviceNode, Hook, Mount
from dra_driver.cdi.names import parse_qualified_name


def container_edits(specs: Iterable[CdiSpec], device_ids: Iterable[str]) -> ContainerEdits:
    env: dict[str, str] = {}
    nodes: dict[str, DeviceNode] = {}
    mounts: dict[str, Mount] = {}
    hooks: list[Hook] = []
    for edits in _edits_in_order(specs, device_ids):
        for entry in edits.env:
            name, _, value = entry.partition("=")
            env[name] = value
        for node in edits.device_nodes:
            nodes[node.path] = node
        for mount in edits.mounts:
            mounts[mount.container_path] = mount
        hooks.extend(edits.hooks)
    return ContainerEdits(
        env=tuple(f"{name}={value}" for name, value in env.items()),
        device_nodes=tuple(nodes.values()),
        mounts=tuple(mounts.values()),
        hooks=tuple(hooks),
    )


def container_environment(specs: Iterable[CdiSpec], device_ids: Iterable[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for edits in _edits_in_order(specs, device_ids):
        for entry in edits.env:
            name, _, value = entry.partition("=")
            env[name] = value
    return env


def _edits_in_order(specs: Iterable[CdiSpec], device_ids: Iterable[str]) -> list[ContainerEdits]:
    index = _index(specs)
    applied_specs: set[int] = set()
    applied_ids: set[str] = set()
    ordered: list[ContainerEdits] = []
    for device_id in device_ids:
        if device_id in applied_ids:
            continue
        found = index.get(device_id)
        if found is None:
            parse_qualified_name(device_id)  # a malformed ID gets the more precise message
            raise CdiError(f"CDI device {device_id!r} is not defined by any of the given specs")
        spec_number, spec, device = found
        applied_ids.add(device_id)
        if spec_number not in applied_specs:
            applied_specs.add(spec_number)
            ordered.append(spec.edits)
        ordered.append(device.edits)
    return ordered


def _index(specs: Iterable[CdiSpec]) -> dict[str, tuple[int, CdiSpec, CdiDevice]]:
    index: dict[str, tuple[int, CdiSpec, CdiDevice]] = {}
    for number, spec in enumerate(specs):
        for device in spec.devices:
            device_id = f"{spec.kind}={device.name}"
            previous = index.get(device_id)
            if previous is not None and (previous[1].edits, previous[2]) != (spec.edits, device):
                raise CdiError(f"CDI device {device_id!r} is defined differently by two specs")
            if previous is None:
                index[device_id] = (number, spec, device)
    return index
