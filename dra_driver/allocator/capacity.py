"""How much of a device's capacity one allocation takes (consumable capacity).

For a device with `allowMultipleAllocations`, each allocation consumes every capacity: the amount
the request names, else the policy's default, else the whole value, rounded up to what the policy
allows. A device without multiple allocations only has to be large enough.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.allocator.devices import CapacityRule, Device
from dra_driver.allocator.quantities import Number, format_amount


def qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def rounded(rule: CapacityRule, amount: Number) -> Number | None:
    """`amount` rounded up to a value the policy allows, or None when no such value exists."""
    if rule.valid_values is not None:
        for allowed in rule.valid_values:
            if allowed >= amount:
                return allowed
        return None
    if rule.minimum is not None:
        if amount <= rule.minimum:
            amount = rule.minimum
        elif rule.step:
            steps = -(-(amount - rule.minimum) // rule.step)
            amount = rule.minimum + steps * rule.step
        if rule.maximum is not None and amount > rule.maximum:
            return None
    return amount


def share_demand(device: Device, requests: Mapping[str, Number]) -> dict[str, Number] | None:
    """What one share of `device` consumes for these requests; None when the device cannot serve.

    A request naming a capacity the device does not have rejects the device.
    """
    wanted = {qualified(name, device.driver): amount for name, amount in requests.items()}
    if any(name not in device.capacity for name in wanted):
        return None
    demand: dict[str, Number] = {}
    for name, rule in device.capacity.items():
        amount = wanted.get(name)
        if amount is None:
            amount = rule.default if rule.default is not None else rule.value
        amount_rounded = rounded(rule, amount)
        if amount_rounded is None:
            return None
        demand[name] = amount_rounded
    return demand


def unservable(device: Device, requests: Mapping[str, Number]) -> str | None:
    """Why no share of `device` could ever serve these requests, naming the capacity (a request
    beyond its policy, or for a capacity it lacks); None when one could, room aside. It tells a
    user to ask for less, where "no capacity left" would tell them to wait."""
    for name, amount in requests.items():
        full = qualified(name, device.driver)
        short = full.rsplit("/", 1)[-1]
        rule = device.capacity.get(full)
        if rule is None:
            return f"without {short} capacity"
        if rounded(rule, amount) is None:
            top = max(rule.valid_values) if rule.valid_values else rule.maximum
            if top is None:
                top = rule.value
            return (
                f"giving one claim at most {format_amount(top)} of {short} "
                f"(asked {format_amount(amount)})"
            )
    return None


def large_enough(device: Device, requests: Mapping[str, Number]) -> bool:
    for name, amount in requests.items():
        rule = device.capacity.get(qualified(name, device.driver))
        if rule is None or rule.value < amount:
            return False
    return True
