"""ConfigError's contract, and the rule that api/ stands on its own."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import api
from api import ConfigError, Problem


def test_config_error_exposes_first_field_and_all_problems() -> None:
    error = ConfigError([Problem("a.b", "is wrong"), Problem("c", "is also wrong")])
    assert isinstance(error, ValueError)
    assert error.field == "a.b"
    assert str(error) == "a.b: is wrong; c: is also wrong"
    assert error.message == str(error)
    assert [p.reason for p in error.problems] == ["is wrong", "is also wrong"]


def test_problem_message_can_be_worded_freely() -> None:
    problem = Problem("config[0]", "bad", message="config entry 0 is bad")
    assert str(ConfigError([problem])) == "config entry 0 is bad"


def test_config_error_needs_a_problem() -> None:
    with pytest.raises(ValueError, match="at least one problem"):
        ConfigError([])


def test_config_error_survives_pickling() -> None:
    error = ConfigError.at("sharing", "must be an object, got an array")
    copy = pickle.loads(pickle.dumps(error))
    assert copy.problems == error.problems
    assert str(copy) == str(error)


FORBIDDEN = {"dra_driver", "kubeletplugin", "controller"}


def test_api_does_not_import_the_driver() -> None:
    root = Path(api.__file__).parent
    offenders = []
    for source in root.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{source.relative_to(root)}: {name}"
                for name in names
                if name.split(".")[0] in FORBIDDEN
            ]
    assert offenders == []
