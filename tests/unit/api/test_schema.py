"""The exported JSON Schema: committed copy is current, and it means what we decode."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from api import API_VERSION, ConfigError, config_json_schema, decode_config
from api.schema import COMMITTED_SCHEMA_PATH, main, render_schema


def test_committed_schema_matches_the_models() -> None:
    committed = COMMITTED_SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == render_schema(), "stale schema: run python -m api.schema --write"


def test_cli_prints_the_schema_and_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert json.loads(capsys.readouterr().out) == config_json_schema()
    assert main(["--check"]) == 0


def test_schema_shape() -> None:
    schema = config_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    branches = [_resolve(schema, branch) for branch in schema["oneOf"]]
    assert [branch["properties"]["kind"]["const"] for branch in branches] == [
        "GpuConfig",
        "MigDeviceConfig",
    ]
    for branch in branches:
        assert branch["properties"]["apiVersion"]["const"] == API_VERSION
        assert branch["required"][:2] == ["apiVersion", "kind"]
    for name, definition in schema["$defs"].items():
        if definition.get("type") == "object":
            assert definition["additionalProperties"] is False, name


# A validator for just the JSON Schema keywords our schema uses; enough to
# check the schema's meaning without another dependency.
def _resolve(root: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        schema = {**root["$defs"][name], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}

_HANDLED = {
    "$ref", "$defs", "$schema", "title", "description", "default", "discriminator",
    "type", "const", "enum", "oneOf", "anyOf", "properties", "required",
    "additionalProperties", "propertyNames", "pattern", "minimum", "maximum",
}  # fmt: skip


def _valid(root: dict[str, Any], schema: dict[str, Any], value: Any) -> bool:
    schema = _resolve(root, schema)
    unknown = set(schema) - _HANDLED
    assert not unknown, f"test validator does not understand {unknown}"
    if "type" in schema and not _JSON_TYPES[schema["type"]](value):
        return False
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "oneOf" in schema and sum(_valid(root, s, value) for s in schema["oneOf"]) != 1:
        return False
    if "anyOf" in schema and not any(_valid(root, s, value) for s in schema["anyOf"]):
        return False
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return False
    if _JSON_TYPES["number"](value) and not (
        schema.get("minimum", value) <= value <= schema.get("maximum", value)
    ):
        return False
    if isinstance(value, dict):
        return _valid_object(root, schema, value)
    return True


def _valid_object(root: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]) -> bool:
    if any(name not in value for name in schema.get("required", [])):
        return False
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        if names is not None and not _valid(root, names, key):
            return False
        if key in properties:
            if not _valid(root, properties[key], item):
                return False
        elif extra is False or (isinstance(extra, dict) and not _valid(root, extra, item)):
            return False
    return True


def _gpu(sharing: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": sharing}


GOOD = [
    {"apiVersion": API_VERSION, "kind": "GpuConfig"},
    {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}},
    _gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
    _gpu(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 100,
                "defaultPinnedDeviceMemoryLimit": 1024,
                "defaultPerDevicePinnedMemoryLimit": {"0": "1.5Gi", "GPU-abc-123": "2e9"},
            },
        }
    ),
]

# Documents both the schema and the decoder refuse.
BAD = [
    {"kind": "GpuConfig"},
    {"apiVersion": API_VERSION},
    {"apiVersion": API_VERSION, "kind": "TpuConfig"},
    {"apiVersion": "resource.dra-driver.dev/v1", "kind": "GpuConfig"},
    {"apiVersion": API_VERSION, "kind": "GpuConfig", "extra": 1},
    _gpu({"strategy": "Exclusive"}),
    _gpu({}),
    _gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Fast"}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": "5"}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": True}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "12XB"}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": -1}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": 1.5}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"x": "1"}}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "1X"}}}),
    {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "TimeSlicing"}},
    {
        "apiVersion": API_VERSION,
        "kind": "MigDeviceConfig",
        "sharing": {"strategy": "MPS", "timeSlicingConfig": {}},
    },
]

# Refused by the decoder only: the schema cannot say these (see its description).
DRIVER_ONLY = [
    _gpu({"strategy": "TimeSlicing", "mpsConfig": {}}),
    _gpu({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "0.5"}}),
]


@pytest.mark.parametrize("document", GOOD)
def test_good_documents_pass_schema_and_decoder(document: dict[str, Any]) -> None:
    assert _valid(config_json_schema(), config_json_schema(), document)
    decode_config(document)


@pytest.mark.parametrize("document", BAD)
def test_bad_documents_fail_schema_and_decoder(document: dict[str, Any]) -> None:
    assert not _valid(config_json_schema(), config_json_schema(), document)
    with pytest.raises(ConfigError):
        decode_config(document)


@pytest.mark.parametrize("document", DRIVER_ONLY)
def test_some_rules_are_left_to_the_decoder(document: dict[str, Any]) -> None:
    assert _valid(config_json_schema(), config_json_schema(), document)
    with pytest.raises(ConfigError):
        decode_config(document)


def test_schema_agrees_with_a_real_validator_where_one_is_installed() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = config_json_schema()
    validator_class = jsonschema.Draft202012Validator
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    for document in GOOD + DRIVER_ONLY:
        assert validator.is_valid(document), document
    for document in BAD:
        assert not validator.is_valid(document), document
