"""Decode ``opaque.parameters`` into a v1alpha1 configuration object.

Decoding is strict on purpose: a misspelt field or a quoted number in a
claim would otherwise be ignored silently and the workload would run with
settings the user never asked for. Mappings and JSON text take the same
path (through compact JSON) so they are judged by exactly the same rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from api.errors import ConfigError, Problem, describe_json_value
from api.v1alpha1.messages import ROOT_FIELD, translate_errors
from api.v1alpha1.meta import API_VERSION, KNOWN_KINDS, MAX_PARAMETERS_BYTES
from api.v1alpha1.types import CONFIG_KINDS, DeviceConfig

Parameters = Mapping[str, Any] | bytes | bytearray | str
"""What ``decode_config`` accepts: the parameters object as the Kubernetes
client returns it, or its JSON text."""

_ENVELOPE_FIELDS = ("apiVersion", "kind")


class _JsonRejectedError(Exception):
    """Raised from json hooks; carries the reason for the user."""


def decode_config(parameters: Parameters) -> DeviceConfig:
    """Decode one parameters object, raising ConfigError listing every problem."""
    document, text = _load(parameters)
    problems = _check_envelope(document)
    kind = document.get("kind")
    model = CONFIG_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ConfigError(problems)
    try:
        config = model.model_validate_json(text, by_alias=True, by_name=False)
    except ValidationError as err:
        found = translate_errors(model, err.errors(include_url=False))
        problems.extend(p for p in found if p.field not in _ENVELOPE_FIELDS)
    if problems:
        raise ConfigError(problems)
    return config


def encode_config(config: DeviceConfig) -> dict[str, Any]:
    """The wire form of a configuration: camelCase, unset fields left out."""
    return config.model_dump(mode="json", by_alias=True, exclude_none=True)


def _load(parameters: Parameters) -> tuple[dict[str, Any], str]:
    """Return the document and its compact JSON text, after the size check."""
    if isinstance(parameters, bytes | bytearray | str):
        raw = parameters.encode() if isinstance(parameters, str) else bytes(parameters)
        _check_size(len(raw))
        document = _parse(raw)
    elif isinstance(parameters, Mapping):
        document = _plain(parameters, ROOT_FIELD)
    else:
        raise ConfigError.at(
            ROOT_FIELD, f"must be a JSON object, got {describe_json_value(parameters)}"
        )
    if not isinstance(document, dict):
        raise ConfigError.at(
            ROOT_FIELD, f"must be a JSON object, got {describe_json_value(document)}"
        )
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    if isinstance(parameters, Mapping):
        _check_size(len(text.encode()))
    return document, text


def _check_size(size: int) -> None:
    if size > MAX_PARAMETERS_BYTES:
        raise ConfigError.at(
            ROOT_FIELD,
            f"is {size} bytes of JSON, more than the limit of {MAX_PARAMETERS_BYTES} bytes",
        )


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_reject_constant,
        )
    except UnicodeDecodeError as err:
        raise ConfigError.at(ROOT_FIELD, f"is not UTF-8 text: {err.reason}") from None
    except _JsonRejectedError as err:
        raise ConfigError.at(ROOT_FIELD, str(err)) from None
    except json.JSONDecodeError as err:
        raise ConfigError.at(
            ROOT_FIELD, f"is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None
    except RecursionError:
        raise ConfigError.at(ROOT_FIELD, "is nested too deeply") from None


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse repeated keys: which one "wins" differs between JSON decoders,
    so the driver and the user's tooling could disagree on the setting."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _JsonRejectedError(f"has the key {json.dumps(key)} twice in one object")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise _JsonRejectedError(f"contains {name}, which is not valid JSON")


def _plain(value: Any, path: str) -> Any:
    """Copy a Python value into plain JSON types, refusing what JSON cannot hold.

    ``json.dumps`` would quietly turn a key 1 into "1" or write NaN; a caller
    handing us such values has a bug we should report, not paper over.
    """
    if isinstance(value, Mapping):
        copied: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError.at(path, f"has a non-string key {key!r}; JSON keys are strings")
            copied[key] = _plain(item, f"{path}.{key}")
        return copied
    if isinstance(value, list | tuple):
        return [_plain(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError.at(path, f"is {value}, which JSON cannot represent")
    if value is None or isinstance(value, str | int | float):
        return value
    raise ConfigError.at(path, f"holds {describe_json_value(value)}, which is not JSON")


def _check_envelope(document: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    known_kinds = ", ".join(json.dumps(k) for k in KNOWN_KINDS)
    version = document.get("apiVersion")
    if "apiVersion" not in document:
        problems.append(
            Problem("apiVersion", f"required field is missing; use {json.dumps(API_VERSION)}")
        )
    elif version != API_VERSION:
        reason = (
            f"unsupported version {_shown(version)}; the known version is {json.dumps(API_VERSION)}"
        )
        if isinstance(version, str) and version.startswith("resource.nvidia.com/"):
            reason += " (configuration written for NVIDIA's driver only needs this line changed)"
        problems.append(Problem("apiVersion", reason))
    kind = document.get("kind")
    if "kind" not in document:
        problems.append(
            Problem("kind", f"required field is missing; known kinds are {known_kinds}")
        )
    elif kind not in KNOWN_KINDS:
        problems.append(
            Problem("kind", f"unknown kind {_shown(kind)}; known kinds are {known_kinds}")
        )
    return problems


def _shown(value: Any) -> str:
    """Quote strings as written; name the type of anything else."""
    return json.dumps(value) if isinstance(value, str) else describe_json_value(value)
