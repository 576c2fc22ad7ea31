"""Strategic merge patch, as kube-apiserver applies it to built-in kinds.

Clients rely on its list semantics: `{"metadata": {"finalizers": ["mine"]}}` adds a finalizer
and keeps everyone else's, a pod status patch with one condition keeps the other conditions.
A harness that replaced lists instead would hide every caller that sends a partial list
expecting it to replace the whole (or a whole list expecting a merge). The list strategies come
from `patch_strategies`; lists without one are replaced, as upstream.

Directives understood (the ones kubectl and client-go send):
* `$patch: replace` in a map (replace the map) or as a list element (replace the list);
* `$patch: delete` in a map (delete it) or as a list element (delete the element with that key);
* `$deleteFromPrimitiveList/<field>`: remove these values from a merge list of scalars;
* `$setElementOrder/<field>`: the order of a merge list;
* `$retainKeys`: keys of the map to keep; every other key is cleared.

The order of a merged list is upstream's (`normalizeElementOrder` and `mergeSortedSlice` of
apimachinery's `strategicpatch`): the patch's elements keep the patch's order (or the
`$setElementOrder` list's), the others keep theirs, and the two are interleaved by their places
in the stored list, so an element the stored list does not have comes before the stored elements
not yet placed: `["b"]` merged into `["a"]` is `["b", "a"]`. A malformed patch (an element
without its merge key, an unknown `$patch`) is a 500 with upstream's message, as kube-apiserver
answers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.errors import ApiError, bad_request
from localcluster.json_copy import copy_json
from localcluster.patch_strategies import ListStrategy, Strategies

_PATCH = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Patcher:
    def __init__(self, strategies: Strategies) -> None:
        self.strategies = strategies

    def merge_map(
        self, original: Any, patch: Mapping[str, Any], path: str, owned: bool = False
    ) -> Any:
        """The merged map, or `_DELETED` for `$patch: delete`. `owned`: `original` is a copy
        made by this patch already (a part of the copied target), merged into in place rather
        than copied again at every level."""
        directive = patch.get(_PATCH, "merge")
        if directive == "delete":
            return _DELETED
        if directive == "replace":
            return self.merge_map(None, {k: v for k, v in patch.items() if k != _PATCH}, path)
        if directive != "merge":
            raise _failure(f"unknown patch type: {directive} in map: {_go(patch)}")
        result: dict[str, Any] = {}
        if isinstance(original, dict):
            result = original if owned else copy_json(original)
        for key, order in patch.items():
            listed = patch.get(key[len(_ORDER) :])
            if key.startswith(_ORDER) and isinstance(order, list) and isinstance(listed, list):
                _check_order(listed, order, self.strategies.get(_child(path, key[len(_ORDER) :])))
        # The stored lists, for `$setElementOrder` (merging below changes `result` in place).
        before = {
            key[len(_ORDER) :]: copy_json(result.get(key[len(_ORDER) :]))
            for key in patch
            if key.startswith(_ORDER)
        }
        for key, values in patch.items():
            if key.startswith(_DELETE_PRIMITIVE):
                field = key[len(_DELETE_PRIMITIVE) :]
                if not isinstance(values, list):
                    raise bad_request(f"{key} must be a list")
                if isinstance(result.get(field), list):
                    result[field] = [v for v in result[field] if v not in values]
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            here = _child(path, key)
            if value is None:
                result.pop(key, None)
            elif isinstance(value, dict):
                merged = self.merge_map(result.get(key), value, here, owned=True)
                if merged is _DELETED:
                    result.pop(key, None)
                else:
                    result[key] = merged
            elif isinstance(value, list):
                result[key] = self.merge_list(result.get(key), value, here, owned=True)
            else:
                result[key] = copy_json(value)
        for key, order in patch.items():
            if key.startswith(_ORDER) and isinstance(order, list):
                field = key[len(_ORDER) :]
                strategy = self.strategies.get(_child(path, field))
                stored = before.get(field)
                if strategy is not None and isinstance(result.get(field), list):
                    merged = result[field]
                    ident = _identity(strategy.merge_key)
                    named = {_hashable(ident(o)) for o in order}
                    patched = [m for m in merged if _hashable(ident(m)) in named]
                    others = [m for m in merged if _hashable(ident(m)) not in named]
                    server = stored if isinstance(stored, list) else []
                    result[field] = _normalized(patched, others, order, server, ident)
        retain = patch.get(_RETAIN)
        if retain is not None:
            if not isinstance(retain, list):
                raise bad_request(f"{_RETAIN} must be a list")
            result = {k: v for k, v in result.items() if k in retain}
        return result

    def merge_list(
        self, original: Any, patch: list[Any], path: str, owned: bool = False
    ) -> list[Any]:
        strategy = self.strategies.get(path)
        elements = [e for e in patch if not (isinstance(e, dict) and e.get(_PATCH) == "replace")]
        if strategy is None or len(elements) != len(patch):
            # No strategy (atomic) or `$patch: replace`: the patch's list is the new list.
            return [self._fresh(e, f"{path}[]") for e in elements]
        current: list[Any] = []
        if isinstance(original, list):
            current = original if owned else copy_json(original)
        if strategy.merge_key is None:
            for value in elements:
                if isinstance(value, (dict, list)):
                    raise bad_request(f"{path}: a list of scalars cannot hold {value!r}")
            stored = list(current)
            for value in elements:
                if value not in current:
                    current.append(value)
            return self._in_order(current, elements, stored, None)
        key = strategy.merge_key
        for element in elements:
            if not isinstance(element, dict):
                raise bad_request(f"{path}: element {element!r} is not an object")
            if key not in element:
                raise _failure(f"map: {_go(element)} does not contain declared merge key: {key}")
        # Deletions first (`mergeSliceWithSpecialElements`), then merges and additions.
        deleted = {_hashable(e[key]) for e in elements if e.get(_PATCH) == "delete"}
        current = [item for item in current if _hashable(_keyed(item, key)) not in deleted]
        for element in elements:
            if element.get(_PATCH) not in (None, "delete"):
                raise _failure(f"unknown patch type: {element[_PATCH]} in map: {_go(element)}")
        merging = [e for e in elements if _PATCH not in e]
        stored = list(current)
        for element in merging:
            index = _find(current, key, element[key])
            if index is None:
                current.append(self._fresh(element, f"{path}[]"))
            else:
                current[index] = self.merge_map(current[index], element, f"{path}[]", owned=True)
        return self._in_order(current, merging, stored, key)

    @staticmethod
    def _in_order(
        merged: list[Any], patch: list[Any], stored: list[Any], key: str | None
    ) -> list[Any]:
        """`mergeSlice`'s last step: the merged list in upstream's order."""
        ident = _identity(key)
        named = {_hashable(ident(p)) for p in patch}
        patched = [m for m in merged if _hashable(ident(m)) in named]
        others = [m for m in merged if _hashable(ident(m)) not in named]
        return _normalized(patched, others, patch, stored, ident)

    def _fresh(self, value: Any, path: str) -> Any:
        """A patch value with nothing under it: directives and nulls dropped."""
        if isinstance(value, dict):
            merged = self.merge_map(None, value, path)
            return {} if merged is _DELETED else merged
        if isinstance(value, list):
            return self.merge_list(None, value, path)
        return copy_json(value)


def _find(items: list[Any], key: str, value: Any) -> int | None:
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get(key) == value:
            return index
    return None


class _Deleted:
    """Marks a map that `$patch: delete` removes from its parent."""


_DELETED: Any = _Deleted()


def _identity(key: str | None) -> Any:
    """What tells list elements apart: the merge key's value, or the scalar itself."""
    if key is None:
        return lambda item: item
    return lambda item: _keyed(item, key)


def _keyed(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


def _sorted_by(items: list[Any], order: list[Any], ident: Any) -> list[Any]:
    """`normalizeSliceOrder`: a stable sort of `items` by their places in `order`."""
    places: dict[Any, int] = {}
    for place, item in enumerate(order):
        places.setdefault(_hashable(ident(item)), place)
    return sorted(items, key=lambda item: places.get(_hashable(ident(item)), len(order)))


def _normalized(
    patched: list[Any], others: list[Any], patch_order: list[Any], stored: list[Any], ident: Any
) -> list[Any]:
    """`normalizeElementOrder`: the patch's elements in `patch_order`, the others in the stored
    order, merged as `mergeSortedSlice` merges them: a stored element goes first only when the
    patch element it is compared with is stored too, and later."""
    right = _sorted_by(patched, patch_order, ident)
    left = _sorted_by(others, stored, ident)
    places: dict[Any, int] = {}
    for place, item in enumerate(stored):
        places.setdefault(_hashable(ident(item)), place)
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li = places.get(_hashable(ident(left[i])))
            ri = places.get(_hashable(ident(right[j])))
            if li is not None and ri is not None and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _go(value: Any) -> str:
    """A JSON value as Go's `%v` prints it (`map[image:no-name]`), for upstream's messages."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_order(listed: list[Any], order: list[Any], strategy: ListStrategy | None) -> None:
    """`validatePatchWithSetOrderList`: the patch's elements (deletions aside) must appear in
    the `$setElementOrder` list, in the same order."""
    key = strategy.merge_key if strategy is not None else None
    ident = _identity(key)
    kept = [e for e in listed if not (isinstance(e, dict) and e.get(_PATCH) == "delete")]
    at = 0
    for wanted in order:
        while at < len(kept) and isinstance(kept[at], dict) and _PATCH in kept[at]:
            at += 1
        if at < len(kept) and ident(kept[at]) == ident(wanted):
            at += 1
    if at < len(kept):
        raise _failure(
            f"The order in patch list:\n{_go(listed)}\n doesn't match $setElementOrder list:\n"
            f"{_go(order)}\n"
        )


def _failure(message: str) -> ApiError:
    """A patch that cannot be applied: kube-apiserver passes the merge's error on as is, a 500
    with no reason (`interpretStrategicMergePatchError` maps only a few errors to 400)."""
    return ApiError(500, "", message)


def strategic_merge_patch(target: Any, patch: Any, strategies: Strategies) -> Any:
    """`patch` applied to `target` (neither is modified) with the kind's list strategies."""
    if not isinstance(patch, dict):
        raise bad_request("a strategic merge patch must be a JSON object")
    merged = _Patcher(strategies).merge_map(target, patch, "")
    if merged is _DELETED:
        raise bad_request("a strategic merge patch cannot delete the whole object")
    return merged
