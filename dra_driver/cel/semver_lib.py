"""Kubernetes' CEL semver library, and the parser for ``version`` device attributes.

Selectors compare driver and CUDA versions ("580.95.5" against "550.0.0"),
which string comparison gets wrong, so version attributes become semver values
in CEL. Parsing is strict semver 2.0.0, as the API server enforces for slices.
Build metadata is accepted but not stored: it does not take part in
precedence, and leaving it out makes the runtime's ``==`` agree with
``compareTo(...) == 0``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.cel.library import CelFunctionError, Function, Library, Overload
from dra_driver.cel.value_types import SEMVER_TYPE, SemverMessage

_S: Final = SEMVER_TYPE
_UINT64_MAX: Final = 2**64 - 1
_INT64_MAX: Final = 2**63 - 1

_NUMBER = r"(?:0|[1-9][0-9]*)"
_IDENTIFIER = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_IDENTIFIER}(?:\.{_IDENTIFIER})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
# What normalisation accepts before it rewrites the text into strict form.
_LOOSE = re.compile(r"v?(?P<core>[0-9]+(?:\.[0-9]+){0,2})(?P<rest>(?:[-+][0-9A-Za-z.+-]*)?)")


@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]


def parse_semver(text: str) -> Version:
    """Strict semver 2.0.0; raises ValueError saying what is wrong."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a semantic version (semver 2.0.0), e.g. 1.2.3")
    numbers = [int(match[part]) for part in ("major", "minor", "patch")]
    if any(n > _UINT64_MAX for n in numbers):
        raise ValueError(f"{text!r} has a version number above 2^64-1")
    prerelease = tuple(match["pre"].split(".")) if match["pre"] else ()
    return Version(numbers[0], numbers[1], numbers[2], prerelease)


def _normalize(text: str) -> str:
    """Kubernetes' lenient form: drop a leading v, pad to three numbers, drop leading zeros."""
    match = _LOOSE.fullmatch(text)
    if match is None:
        return text
    numbers = [str(int(n)) for n in match["core"].split(".")]
    numbers += ["0"] * (3 - len(numbers))
    return ".".join(numbers) + match["rest"]


def order_key(version: Version) -> str:
    """A string whose byte order is semver precedence.

    The numbers are zero-padded to the width of 2^64. A release ends in "~",
    which sorts above the digits that start every pre-release identifier, so
    1.0.0 > 1.0.0-rc.1. Each identifier is closed by "!", which sorts below
    every character an identifier may contain, so a shorter list of equal
    identifiers sorts first. Numeric identifiers ("1") carry their length
    and sort below alphanumeric ones ("2"), as semver 2.0.0 requires.
    """
    core = f"{version.major:020d}.{version.minor:020d}.{version.patch:020d}"
    if not version.prerelease:
        return core + "~"
    parts = []
    for identifier in version.prerelease:
        if identifier.isdigit():
            parts.append(f"1{len(identifier):08d}{identifier}!")
        else:
            parts.append(f"2{identifier}!")
    return core + "".join(parts)


def semver_message(version: Version) -> Any:
    return SemverMessage(
        major=version.major,
        minor=version.minor,
        patch=version.patch,
        prerelease=list(version.prerelease),
        key=order_key(version),
    )


def compare(a: Any, b: Any) -> int:
    left: str = a.key
    right: str = b.key
    return (left > right) - (left < right)


def _semver(text: str, normalize: bool = False) -> Any:
    try:
        return semver_message(parse_semver(_normalize(text) if normalize else text))
    except ValueError as failure:
        raise CelFunctionError(f"semver: {failure}") from None


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(_normalize(text) if normalize else text)
    except ValueError:
        return False
    return True


def _as_int(number: int) -> int:
    if number > _INT64_MAX:
        raise CelFunctionError("version number does not fit in an int")
    return number


def _member(name: str, result: str, impl: Any, *params: str) -> Function:
    overload_id = f"semver_{name}" + ("_semver" if params else "")
    return Function(name, (Overload(overload_id, (_S, *params), result, impl, member=True),))


SEMVER_LIBRARY: Final = Library(
    name="semver",
    functions=(
        Function(
            "semver",
            (
                Overload("string_to_semver", ("string",), _S, _semver),
                Overload("string_bool_to_semver", ("string", "bool"), _S, _semver),
            ),
        ),
        Function(
            "isSemver",
            (
                Overload("is_semver_string", ("string",), "bool", _is_semver),
                Overload("is_semver_string_bool", ("string", "bool"), "bool", _is_semver),
            ),
        ),
        _member("major", "int", lambda v: _as_int(v.major)),
        _member("minor", "int", lambda v: _as_int(v.minor)),
        _member("patch", "int", lambda v: _as_int(v.patch)),
        _member("compareTo", "int", compare, _S),
        _member("isGreaterThan", "bool", lambda a, b: compare(a, b) > 0, _S),
        _member("isLessThan", "bool", lambda a, b: compare(a, b) < 0, _S),
    ),
)
