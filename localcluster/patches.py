"""The three PATCH flavours the official client sends, applied to plain JSON documents.

* JSON merge patch (RFC 7386): dicts merge recursively, `null` deletes, anything else replaces.
* Strategic merge patch: `strategic_merge` with the kind's list strategies (`patch_strategies`);
  refused with 415 for kinds that have none (custom resources), as kube-apiserver does.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test, with RFC 6901 pointers.
"""

from __future__ import annotations

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


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise bad_request(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if adding else len(container) - 1
    if index > limit:
        raise bad_request(f"array index {index} out of range")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise bad_request(f"path element {token!r} does not exist")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, adding=False)]
        else:
            raise bad_request(f"cannot descend into a scalar at {token!r}")
    return current


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise bad_request(f"path {path!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False)]
    raise bad_request(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], adding=True), value)
    else:
        raise bad_request(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise bad_request("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise bad_request(f"path {path!r} does not exist")
        return doc, parent.pop(tokens[-1])
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, tokens[-1], adding=False))
    raise bad_request(f"path {path!r} does not exist")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: apply `operations` in order; all or nothing (target is not modified)."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy_json(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy_json(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy_json(op.get("value")))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"test operation failed at {path!r}")
        elif kind == "move":
            doc, value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy_json(_get(doc, op.get("from", ""))))
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
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
        return merge_patch(target, patch)
    if media == STRATEGIC:
        if strategies is None:
            raise _unsupported(strategic=False)
        return strategic_merge_patch(target, patch, strategies)
    if media == JSON_PATCH:
        if isinstance(patch, dict):
            # Client quirk: the official Python client (v33+) labels every PATCH body
            # json-patch+json unless told otherwise, dicts included. A JSON object can only
            # mean a merge-style patch: strategic where the kind has strategies, else merge.
            if strategies is None:
                return merge_patch(target, patch)
            return strategic_merge_patch(target, patch, strategies)
        return json_patch(target, patch)
    raise _unsupported(strategic=strategies is not None)
