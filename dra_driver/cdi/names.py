"""CDI names: kinds (`vendor/class`), device names and fully qualified device IDs.

Runtimes refuse a whole spec file when one name breaks the rules, and a pod then fails with an
error far from its cause, so names are checked here, where the driver makes them. Only ASCII
letters count as letters, as in the reference parser.
"""

from __future__ import annotations

import re

from dra_driver.cdi.errors import CdiError

_VENDOR_OR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?", re.ASCII)
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?", re.ASCII)
# Claim UIDs become part of file names; no "_" so the kind prefix of a file name stays unambiguous.
_CLAIM_UID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?", re.ASCII)

_VENDOR_RULE = "letters, digits, '_', '-' and '.', starting with a letter and ending alphanumeric"
_NAME_RULE = "letters, digits, '_', '-', '.' and ':', starting and ending alphanumeric"


def validate_vendor(vendor: str) -> None:
    if not _VENDOR_OR_CLASS.fullmatch(vendor):
        raise CdiError(f"CDI vendor {vendor!r} is invalid: use {_VENDOR_RULE}")


def validate_class(device_class: str) -> None:
    if not _VENDOR_OR_CLASS.fullmatch(device_class):
        raise CdiError(f"CDI class {device_class!r} is invalid: use {_VENDOR_RULE}")


def split_kind(kind: str) -> tuple[str, str]:
    """Split and check a kind; the parts are needed apart for file names and version rules."""
    vendor, slash, device_class = kind.partition("/")
    if not slash:
        raise CdiError(f"CDI kind {kind!r} is invalid: expected '<vendor>/<class>'")
    try:
        validate_vendor(vendor)
        validate_class(device_class)
    except CdiError as error:
        raise CdiError(f"CDI kind {kind!r}: {error}") from None
    return vendor, device_class


def validate_kind(kind: str) -> None:
    split_kind(kind)


def validate_device_name(name: str) -> None:
    if not _DEVICE_NAME.fullmatch(name):
        raise CdiError(f"CDI device name {name!r} is invalid: use {_NAME_RULE}")


def validate_claim_uid(claim_uid: str) -> None:
    """Claim UIDs end up in file names, so anything that could escape the directory is refused."""
    if not _CLAIM_UID.fullmatch(claim_uid):
        raise CdiError(
            f"claim UID {claim_uid!r} is invalid: use letters, digits, '-' and '.', "
            "starting and ending alphanumeric"
        )


def qualified_name(kind: str, device: str) -> str:
    """The ID a runtime is given (`vendor/class=name`); checked so a bad ID never leaves here."""
    validate_kind(kind)
    validate_device_name(device)
    return f"{kind}={device}"


def parse_qualified_name(qualified: str) -> tuple[str, str]:
    """Return `(kind, device name)` of a fully qualified device ID."""
    kind, equals, device = qualified.partition("=")
    if not equals:
        raise CdiError(
            f"CDI device ID {qualified!r} is invalid: expected '<vendor>/<class>=<name>'"
        )
    try:
        validate_kind(kind)
        validate_device_name(device)
    except CdiError as error:
        raise CdiError(f"CDI device ID {qualified!r}: {error}") from None
    return kind, device
