"""The three PATCH flavours the official client sends, applied to plain JSON documents.

* JSON merge patch (RFC 7386): dicts merge recursively, `null` deletes, anything else replaces.
* Strategic merge patch: `strategic_merge` with the kind's list strategies (`patch_strategies`);
  refused with 415 for kinds that have none (custom resources), as kube-apiserver does.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test, with RFC 6901 pointers, as
  kube-apiserver's patch library applies them (its leniencies included, `json_patch`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from localcluster.errors import ApiError, bad_request
from localcluster.json_copy import copy_json
from localcluster.patch_strategies import Strategies
from localcluster.strategic_merge import strategic_merge_patch

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: the result of applying `patch` to `target` (neither is modified)."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    result = copy_json(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


#: kube-apiserver's answer when a JSON patch does not apply (`NewGenericServerResponse` with
#: 422 and no details: the patch library's own error is not shown).
NOT_APPLIED = "the server rejected our request due to an error in our request"
_GO_INT = re.compile(r"[+-]?[0-9]+")


class _NotAppliedError(Exception):
    """One operation of a JSON patch does not apply."""


def _decode_error(what: str, into: str) -> ApiError:
    return bad_request(
        f"error decoding patch: json: cannot unmarshal {what} into Go value of type {into}"
    )


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _token(text: str) -> str:
    return text.replace("~1", "/").replace("~0", "~")


def _atoi(key: str) -> int:
    if not _GO_INT.fullmatch(key):
        raise _NotAppliedError
    return int(key)


def _position(items: list[Any], key: str, size: int) -> int:
    """An index into a list of `size` places: negative ones count from the end."""
    index = _atoi(key)
    if index >= size or index < -size:
        raise _NotAppliedError
    return index + size if index < 0 else index


def _find(doc: Any, path: Any) -> tuple[Any, str]:
    """The container a path's last token is in, and that token (`findObject`: the text before
    the first '/' is ignored, a missing or null step fails)."""
    if not isinstance(path, str):
        raise _NotAppliedError
    split = path.split("/")
    if len(split) < 2:
        raise _NotAppliedError
    current = doc
    for part in split[1:-1]:
        current = _get(current, _token(part))
        if not isinstance(current, dict | list):
            raise _NotAppliedError
    return current, _token(split[-1])


def _get(container: Any, key: str) -> Any:
    """A map's value (None when missing) or a list's item (out of range fails)."""
    if isinstance(container, dict):
        return container.get(key)
    return container[_position(container, key, len(container))]


def _add(container: Any, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
    elif key == "-":
        container.append(value)
    else:
        container.insert(_position(container, key, len(container) + 1), value)


def _remove(container: Any, key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _NotAppliedError
        del container[key]
    else:
        container.pop(_position(container, key, len(container)))


def _go_equal(stored: Any, given: Any) -> bool:
    """`lazyNode.equal` of the patch library: an object matches when each of its own keys
    matches (keys only the test value has are not looked at), lists item by item, scalars as
    compact JSON text."""
    if isinstance(stored, dict):
        return isinstance(given, dict) and all(
            key in given
            and ((value is None and given[key] is None) or _go_equal(value, given[key]))
            for key, value in stored.items()
        )
    if isinstance(stored, list):
        return (
            isinstance(given, list)
            and len(stored) == len(given)
            and all(_go_equal(a, b) for a, b in zip(stored, given, strict=True))
        )
    return json.dumps(stored, separators=(",", ":")) == json.dumps(given, separators=(",", ":"))


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    if kind == "replace" and op.get("path") == "":
        return copy_json(op.get("value"))  # the whole document
    if kind == "add":
        container, key = _find(doc, op.get("path"))
        _add(container, key, copy_json(op.get("value")))
    elif kind == "remove":
        container, key = _find(doc, op.get("path"))
        _remove(container, key)
    elif kind == "replace":
        container, key = _find(doc, op.get("path"))
        if isinstance(container, dict):
            container[key] = copy_json(op.get("value"))  # a missing key is added
        else:
            container[_position(container, key, len(container))] = copy_json(op.get("value"))
    elif kind == "move":
        container, key = _find(doc, op.get("from"))
        value = _get(container, key)
        _remove(container, key)
        target, at = _find(doc, op.get("path"))
        _add(target, at, value)
    elif kind == "copy":
        container, key = _find(doc, op.get("from"))
        value = copy_json(_get(container, key))  # a missing key copies null
        target, at = _find(doc, op.get("path"))
        _add(target, at, value)
    elif kind == "test":
        container, key = _find(doc, op.get("path"))
        if "value" not in op:
            raise _NotAppliedError
        found = _get(container, key)
        if found is None:
            if op["value"] is not None:
                raise _NotAppliedError
        elif not _go_equal(found, op["value"]):
            raise _NotAppliedError
    else:
        raise _NotAppliedError
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 as kube-apiserver applies it (`evanphx/json-patch`): all or nothing (target is
    not modified). A body that is no list of objects does not decode (400); an operation that
    does not apply is 422. The library's leniencies are kept: `replace` of a missing key adds
    it, `copy` from a missing key copies null, indices may be negative (from the end) or carry
    a sign or leading zeros."""
    if not isinstance(operations, list):
        raise _decode_error(_json_kind(operations), "[]handlers.jsonPatchOp")
    for op in operations:
        if not isinstance(op, dict):
            raise _decode_error(_json_kind(op), "handlers.jsonPatchOp")
    doc = copy_json(target)
    try:
        for op in operations:
            doc = _apply(doc, op)
    except (_NotAppliedError, IndexError):
        raise ApiError(422, "Invalid", NOT_APPLIED) from None
    return doc


def _unsupported(strategic: bool) -> ApiError:
    # kube-apiserver's words for a patch type the resource does not accept (server-side apply
    # is not served here, so it is not offered).
    accepted = [JSON_PATCH, MERGE, *([STRATEGIC] if strategic else [])]
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def apply_patch(
    content_type: str, target: Any, patch: Any, strategies: Strategies | None = None
) -> Any:
    """Dispatch on the request's Content-Type (parameters such as charset are ignored).

    `strategies` are the kind's list strategies; None means the kind has none (a custom
    resource), and a strategic merge patch is refused with 415 as upstream.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE:
        if not isinstance(patch, dict):
            raise _decode_error(_json_kind(patch), "map[string]interface {}")
        return merge_patch(target, patch)
    if media == STRATEGIC:
        if not isinstance(patch, dict):
            # Strategic merge decodes the body without the "error decoding patch" preamble.
            raise bad_request(
                f"json: cannot unmarshal {_json_kind(patch)} into Go value of type "
                "map[string]interface {}"
            )
        if strategies is None:
            raise _unsupported(strategic=False)
        return strategic_merge_patch(target, patch, strategies)
    if media == JSON_PATCH:
        # A JSON object is no JSON patch (400, as upstream). The official client sends a dict
        # body it labels json-patch+json as a strategic merge patch itself.
        return json_patch(target, patch)
    raise _unsupported(strategic=strategies is not None)
