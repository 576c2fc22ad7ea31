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
* `$setElementOrder/<field>`: the order of a merge list; elements it names come first, in its
  order, followed by the others in their previous order (upstream interleaves the others more
  cleverly; no caller here depends on it);
* `$retainKeys`: keys of the map to keep; every other key is cleared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.errors import bad_request
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
            raise bad_request(f"Unknown patch type: {directive}")
        result: dict[str, Any] = {}
        if isinstance(original, dict):
            result = original if owned else copy_json(original)
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
                if strategy is not None and isinstance(result.get(field), list):
                    result[field] = _ordered(result[field], order, strategy)
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
                if value not in current:
                    current.append(value)
            return current
        key = strategy.merge_key
        for element in elements:
            if not isinstance(element, dict):
                raise bad_request(f"{path}: element {element!r} is not an object")
            if key not in element:
                raise bad_request(f"map: {element} does not contain declared merge key: {key}")
            index = _find(current, key, element[key])
            if element.get(_PATCH) == "delete":
                if index is not None:
                    del current[index]
                continue
            if index is None:
                current.append(self._fresh(element, f"{path}[]"))
            else:
                current[index] = self.merge_map(current[index], element, f"{path}[]", owned=True)
        return current

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


def _ordered(items: list[Any], order: list[Any], strategy: ListStrategy) -> list[Any]:
    def ident(item: Any) -> Any:
        if strategy.merge_key is None:
            return item
        return item.get(strategy.merge_key) if isinstance(item, dict) else None

    wanted = [ident(o) for o in order]
    first = [item for w in wanted for item in items if ident(item) == w]
    rest = [item for item in items if ident(item) not in wanted]
    return first + rest


def strategic_merge_patch(target: Any, patch: Any, strategies: Strategies) -> Any:
    """`patch` applied to `target` (neither is modified) with the kind's list strategies."""
    if not isinstance(patch, dict):
        raise bad_request("a strategic merge patch must be a JSON object")
    merged = _Patcher(strategies).merge_map(target, patch, "")
    if merged is _DELETED:
        raise bad_request("a strategic merge patch cannot delete the whole object")
    return merged
