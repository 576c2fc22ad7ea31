"""The typed JSON reader: each accessor's refusals, the paths it reports, optional fields."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dra_driver.typed_json import JsonObject, JsonShapeError

DOCUMENT: dict[str, object] = {
    "name": "gpu-0",
    "count": 3,
    "negative": -2,
    "flag": True,
    "ratio": 1.0,
    "nothing": None,
    "tags": ["a", "b"],
    "mixed": ["a", 5],
    "child": {"leaf": "x", "deeper": {"n": "oops"}},
    "items": [{"leaf": "first"}, {"leaf": 7}],
    "notObjects": [{"leaf": "ok"}, "text"],
    "labels": {"a.example/x": "1", "b": 2},
}


def _root(path: str = "doc") -> JsonObject:
    return JsonObject(DOCUMENT, path)


def _refusal(read: Callable[[], object]) -> str:
    with pytest.raises(JsonShapeError) as caught:
        read()
    return str(caught.value)


def test_values_of_the_right_type_are_returned() -> None:
    root = _root()
    assert root.string("name") == "gpu-0"
    assert root.integer("count") == 3
    assert root.integer("count", minimum=0) == 3
    assert root.integer("negative") == -2
    assert root.strings("tags") == ("a", "b")
    assert root.nested("child").string("leaf") == "x"
    assert [item.path for item in root.nested_list("items")] == ["doc.items[0]", "doc.items[1]"]
    assert root.nested_list("items")[0].string("leaf") == "first"


@pytest.mark.parametrize(
    ("read", "message"),
    [
        (lambda r: r.string("count"), "doc.count: expected a string, found int"),
        (lambda r: r.string("nothing"), "doc.nothing: expected a string, found null"),
        (lambda r: r.string("tags"), "doc.tags: expected a string, found list"),
        (lambda r: r.integer("name"), "doc.name: expected an integer, found str"),
        # JSON keeps booleans and numbers apart, even though Python's bool is an int.
        (lambda r: r.integer("flag"), "doc.flag: expected an integer, found bool"),
        (lambda r: r.integer("ratio"), "doc.ratio: expected an integer, found float"),
        (lambda r: r.integer("nothing"), "doc.nothing: expected an integer, found null"),
        (
            lambda r: r.integer("negative", minimum=0),
            "doc.negative: expected a non-negative integer, found int",
        ),
        (
            lambda r: r.integer("count", minimum=4),
            "doc.count: expected an integer of at least 4, found int",
        ),
        (
            lambda r: r.integer("flag", minimum=0),
            "doc.flag: expected a non-negative integer, found bool",
        ),
        (lambda r: r.strings("name"), "doc.name: expected a list of strings, found str"),
        (lambda r: r.strings("child"), "doc.child: expected a list of strings, found dict"),
        (lambda r: r.strings("mixed"), "doc.mixed[1]: expected a string, found int"),
        (lambda r: r.nested("tags"), "doc.tags: expected an object, found list"),
        (lambda r: r.nested("nothing"), "doc.nothing: expected an object, found null"),
        (lambda r: r.nested_list("child"), "doc.child: expected a list, found dict"),
        (lambda r: r.nested_list("notObjects"), "doc.notObjects[1]: expected an object, found str"),
        (lambda r: r.nested("labels").string_members(), "doc.labels['b']: expected a string"),
        (lambda r: r.nested("items").object_members(), "doc.items: expected an object"),
        (
            lambda r: r.nested("child").object_members(),
            "doc.child['leaf']: expected an object, found str",
        ),
    ],
)
def test_wrong_types_are_refused_naming_path_and_expected_type(
    read: Callable[[JsonObject], object], message: str
) -> None:
    assert message in _refusal(lambda: read(_root()))


@pytest.mark.parametrize(
    "read",
    [
        lambda r: r.string("absent"),
        lambda r: r.integer("absent"),
        lambda r: r.strings("absent"),
        lambda r: r.nested("absent"),
        lambda r: r.nested_list("absent"),
    ],
)
def test_required_fields_must_be_present(read: Callable[[JsonObject], object]) -> None:
    assert _refusal(lambda: read(_root())) == "doc.absent: is required"


def test_optional_fields_are_none_when_absent_or_null() -> None:
    root = _root()
    for key in ("absent", "nothing"):
        assert root.optional_string(key) is None
        assert root.optional_integer(key) is None
        assert root.optional_integer(key, minimum=0) is None
        assert root.optional_strings(key) is None
        assert root.optional_nested(key) is None
        assert root.optional_nested_list(key) is None
    assert root.optional_string("name") == "gpu-0"
    assert root.optional_integer("count") == 3
    assert root.optional_strings("tags") == ("a", "b")
    assert root.optional_nested("child") is not None
    assert root.optional_nested_list("items") is not None


@pytest.mark.parametrize(
    ("read", "message"),
    [
        (lambda r: r.optional_string("count"), "doc.count: expected a string, found int"),
        (lambda r: r.optional_integer("flag"), "doc.flag: expected an integer, found bool"),
        (
            lambda r: r.optional_integer("negative", minimum=0),
            "doc.negative: expected a non-negative integer",
        ),
        (lambda r: r.optional_strings("mixed"), "doc.mixed[1]: expected a string, found int"),
        (lambda r: r.optional_nested("tags"), "doc.tags: expected an object, found list"),
        (lambda r: r.optional_nested_list("name"), "doc.name: expected a list, found str"),
    ],
)
def test_optional_fields_still_refuse_wrong_types(
    read: Callable[[JsonObject], object], message: str
) -> None:
    assert message in _refusal(lambda: read(_root()))


def test_nested_paths_follow_objects_lists_and_members() -> None:
    root = _root()
    deeper = root.nested("child").nested("deeper")
    assert deeper.path == "doc.child.deeper"
    assert _refusal(lambda: deeper.integer("n")) == (
        "doc.child.deeper.n: expected an integer, found str"
    )
    second = root.nested_list("items")[1]
    assert _refusal(lambda: second.string("leaf")) == (
        "doc.items[1].leaf: expected a string, found int"
    )
    members = JsonObject({"u-1": {"x": 1}}, "claims").object_members()
    assert members["u-1"].path == "claims['u-1']"
    assert members["u-1"].path_of("x") == "claims['u-1'].x"


def test_a_root_without_a_path_names_fields_bare() -> None:
    root = JsonObject({"kind": 3})
    assert _refusal(lambda: root.string("kind")) == "kind: expected a string, found int"
    assert _refusal(lambda: JsonObject([1])) == "expected an object, found list"
    assert _refusal(lambda: JsonObject(None, "spec")) == "spec: expected an object, found null"


def test_only_refuses_unknown_fields_and_otherwise_they_are_ignored() -> None:
    value = {"known": "x", "extra": 1}
    assert JsonObject(value, "doc").string("known") == "x"
    assert JsonObject(value, "doc").only({"known", "extra"}).string("known") == "x"
    assert _refusal(lambda: JsonObject(value, "doc").only({"known"})) == (
        "doc.extra: unsupported field"
    )
    # YAML may produce keys that are not strings; they are unknown all the same.
    assert _refusal(lambda: JsonObject({1: "x"}).only({"known"})) == "1: unsupported field"


def test_members_of_a_free_form_map() -> None:
    assert JsonObject({"a.example/x": "1", "b": "2"}, "labels").string_members() == {
        "a.example/x": "1",
        "b": "2",
    }
    assert _refusal(lambda: JsonObject({1: "x"}, "labels").string_members()) == (
        "labels['1']: expected a string key, found int"
    )


def test_errors_carry_path_and_problem_and_are_value_errors() -> None:
    with pytest.raises(JsonShapeError) as caught:
        _root().integer("flag")
    assert caught.value.path == "doc.flag"
    assert caught.value.problem == "expected an integer, found bool"
    assert isinstance(caught.value, ValueError)
