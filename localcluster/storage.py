"""The object store: every resource's objects, one resourceVersion counter, the event history.

All state sits behind one lock, so every write gets the next value of a single global
resourceVersion (as with etcd's revision) and watchers see events in exactly that order.
Stored dicts are never modified in place: each write stores a fresh dict, which lets events
share them and lets readers serialise them without holding the lock.

Kubernetes semantics kept here, because clients depend on them:
* optimistic concurrency (409 Conflict on a stale `metadata.resourceVersion`);
* status subresources (a create keeps only what `create_status` allows, a main-resource write
  never changes `status`, a status write changes nothing else and passes the kind's
  `status_strategy`, e.g. a claim's device status rules);
* finalizers (DELETE only marks `deletionTimestamp` while any remain; removing the last one
  deletes the object);
* owner-reference garbage collection (deleting an object deletes what it owns, by uid; deleting
  a namespace deletes what is in it).
Resource types can be added and removed while serving (`register`, `unregister`): custom
resources come and go with their CRDs. Both tables are replaced, never changed in place, so
request threads may read them without the lock. Observers (`observe`) see every committed event
under the lock; the CRD registry uses this to follow CRD writes.
Simplifications: namespaces need not exist before objects are created in them; list
`limit`/`continue` are not implemented.
"""

from __future__ import annotations

import datetime
import json
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster import admin_access, errors
from localcluster.create_status import status_on_create
from localcluster.json_copy import copy_json
from localcluster.patch_strategies import strategies_for
from localcluster.patches import apply_patch
from localcluster.resources import ResourceType

Obj = dict[str, Any]
Predicate = Callable[[Mapping[str, Any]], bool]
_Key = tuple[str, str]
_NAME_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
#: kube-apiserver's words when a patch leaves something other than an object: it reads the
#: patched document's apiVersion and kind first.
_NOT_AN_OBJECT = (
    "couldn't get version/kind; json parse error: json: cannot unmarshal KIND into Go value "
    'of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string '
    '"json:\\"kind,omitempty\\"" }'
)


def _json_scalar_kind(value: object) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


@dataclass(frozen=True)
class Event:
    """One committed write: `old` is the previous state (None for ADDED)."""

    rv: int
    resource: str
    type: str
    obj: Obj
    old: Obj | None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an object whose change bumps `metadata.generation`: all but metadata and the
    type (a write through another served version changes the type). `status` counts: a kind with
    the status subresource keeps its old status on a main-resource write, so only a kind without
    one (a custom resource without the subresource, as upstream) sees a change there."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "kind", "apiVersion")}


class Store:
    """Thread-safe storage for the configured resource types."""

    def __init__(self, resources: Iterable[ResourceType], history: int = 1000) -> None:
        types = list(resources)
        #: Resource key -> the type whose objects are stored under that key.
        self.types: dict[str, ResourceType] = {rt.key: rt for rt in types}
        #: (group, version, plural) -> type: every version served (CRDs may serve several).
        self.served: dict[tuple[str, str, str], ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in types
        }
        self._objects: dict[str, dict[_Key, Obj]] = {key: {} for key in self.types}
        #: Owner uid -> (resource key, object key) of what names it in `ownerReferences`, so a
        #: deletion finds its dependents without reading every stored object.
        self._owned: dict[str, set[tuple[str, _Key]]] = {}
        self._observers: list[Callable[[Event], None]] = []
        self._rv = 0
        self._history: deque[Event] = deque()
        self._history_size = max(1, history)
        self._dropped_rv = 0
        self._cond = threading.Condition(threading.RLock())
        self._closed = False

    # ---- the resource table ------------------------------------------------------------------

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.served.get((group, version, plural))

    def register(self, served: Iterable[ResourceType]) -> None:
        """Serve these versions of one resource (replacing what was served for its key); the
        first is the storage version. Objects already stored under the key stay."""
        versions = list(served)
        if not versions:
            return
        key = versions[0].key
        with self._cond:
            kept = {k: rt for k, rt in self.served.items() if rt.key != key}
            kept.update({(rt.group, rt.version, rt.plural): rt for rt in versions})
            self._objects.setdefault(key, {})
            self.types = {**self.types, key: versions[0]}
            self.served = kept

    def unregister(self, key: str) -> None:
        """Stop serving a resource: its objects are deleted (DELETED events), then it goes."""
        with self._cond:
            rt = self.types.get(key)
            if rt is None:
                return
            for obj_key, obj in sorted(self._objects.get(key, {}).items()):
                self._remove(rt, obj_key, obj)
            self.served = {k: t for k, t in self.served.items() if t.key != key}
            self.types = {k: t for k, t in self.types.items() if k != key}
            self._objects.pop(key, None)

    def observe(self, observer: Callable[[Event], None]) -> None:
        """Call `observer` with every committed event, under the store's lock."""
        with self._cond:
            self._observers.append(observer)

    # ---- reads -------------------------------------------------------------------------------

    @property
    def lock(self) -> threading.Condition:
        """The store's (reentrant) lock, for a caller whose reads and writes must be atomic
        together (an eviction checks its budget and deletes under it)."""
        return self._cond

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self._cond:
            return copy_json(self._existing(rt, namespace, name))

    def list_objects(
        self, rt: ResourceType, namespace: str | None, match: Predicate
    ) -> tuple[list[Obj], int]:
        """Matching objects (all namespaces when `namespace` is None) and the current RV."""
        with self._cond:
            items = [
                copy_json(obj)
                for (ns, _), obj in sorted(self._objects[rt.key].items())
                if (namespace is None or ns == namespace) and match(obj)
            ]
            return items, self._rv

    def list_json(
        self, rt: ResourceType, namespace: str | None, match: Predicate
    ) -> tuple[str, int]:
        """`list_objects` encoded as a JSON array: encoding under the lock is the snapshot, so
        lists of thousands of large objects (slices) need no deep copy."""
        with self._cond:
            items = [
                obj
                for (ns, _), obj in sorted(self._objects[rt.key].items())
                if (namespace is None or ns == namespace) and match(obj)
            ]
            return json.dumps(items, separators=(",", ":")), self._rv

    def events_after(self, after: int, timeout: float) -> tuple[list[Event], int]:
        """Events newer than `after`, waiting up to `timeout` s for one; and the RV now seen.

        Raises 410 Gone when events after `after` have already left the bounded history.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._rv > after, timeout)
            if after < self._dropped_rv:
                raise errors.gone(f"too old resource version: {after} ({self._dropped_rv})")
            # From the newest back: every watcher wakes on every write, and reading the whole
            # history each time (under the lock writers wait for) cost more than the writes.
            events: list[Event] = []
            for event in reversed(self._history):
                if event.rv <= after:
                    break
                events.append(event)
            events.reverse()
            return events, max(after, self._rv)

    def check_watchable(self, after: int) -> None:
        with self._cond:
            if after < self._dropped_rv:
                raise errors.gone(f"too old resource version: {after} ({self._dropped_rv})")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake every watcher so it can end its stream."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ---- writes ------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str, body: Mapping[str, Any]) -> Obj:
        obj = self._with_type(rt, body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        namespace = self._namespace_for(rt, namespace, meta)
        with self._cond:
            name = meta.get("name") or ""
            if not name:
                prefix = meta.get("generateName") or ""
                if not prefix:
                    raise errors.invalid(
                        rt.kind,
                        rt.group,
                        "",
                        [("metadata.name", "Required value: name or generateName is required")],
                    )
                name = self._generated_name(rt, namespace, prefix)
            if (namespace, name) in self._objects[rt.key]:
                raise errors.already_exists(rt.plural, rt.group, name)
            meta["name"] = name
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta.pop("generation", None)
            if rt.tracks_generation:
                meta["generation"] = 1
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(key, None)
            status = status_on_create(rt, obj)
            obj.pop("status", None)
            if status is not None:
                obj["status"] = status
            first = self._admin_refusal(rt, namespace, obj, None, status=False)
            obj = self._validate(rt, obj, None, first)
            return copy_json(self._commit(rt, (namespace, name), obj, None, "ADDED"))

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> Obj:
        """PUT: replace the object (or only its status when `status`), with RV preconditions."""
        with self._cond:
            old = self._existing(rt, namespace, name)
            new = self._merged_for_update(rt, namespace, name, old, body, status)
            return copy_json(self._commit_update(rt, (namespace, name), old, new))

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        status: bool = False,
    ) -> Obj:
        """PATCH: apply the patch to the current object, then continue as an update."""
        with self._cond:
            old = self._existing(rt, namespace, name)
            patched = apply_patch(content_type, old, patch, strategies_for(rt.key))
            if not isinstance(patched, dict):
                kind = "array" if isinstance(patched, list) else _json_scalar_kind(patched)
                raise errors.undecodable_patch(patched, _NOT_AN_OBJECT.replace("KIND", kind))
            try:
                new = self._merged_for_update(rt, namespace, name, old, patched, status)
            except errors.DecodeError as failure:
                raise errors.undecodable_patch(patched, failure.problem) from None
            return copy_json(self._commit_update(rt, (namespace, name), old, new))

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        """DELETE: mark for deletion while finalizers remain, else remove (and collect owned)."""
        with self._cond:
            obj = self._existing(rt, namespace, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != _meta(obj).get("uid"):
                raise errors.conflict(rt.plural, rt.group, name, "Precondition failed: UID")
            rv = pre.get("resourceVersion")
            if rv and rv != _meta(obj).get("resourceVersion"):
                raise errors.conflict(
                    rt.plural, rt.group, name, "Precondition failed: ResourceVersion"
                )
            return copy_json(self._delete(rt, (namespace, name), obj))

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, match: Predicate
    ) -> list[Obj]:
        with self._cond:
            targets = [
                (key, obj)
                for key, obj in sorted(self._objects[rt.key].items())
                if (namespace is None or key[0] == namespace) and match(obj)
            ]
            return [copy_json(self._delete(rt, key, obj)) for key, obj in targets]

    # ---- internals ---------------------------------------------------------------------------

    def _existing(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._objects[rt.key].get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    @staticmethod
    def _with_type(rt: ResourceType, body: Mapping[str, Any]) -> Obj:
        obj = copy_json(dict(body))
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        return obj

    @staticmethod
    def _namespace_for(rt: ResourceType, namespace: str, meta: dict[str, Any]) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        given = meta.get("namespace")
        if given and namespace and given != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        namespace = namespace or given or ""
        if not namespace:
            raise errors.bad_request("a namespaced object needs a namespace")
        meta["namespace"] = namespace
        return namespace

    def _generated_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        while True:
            name = prefix + "".join(secrets.choice(_NAME_SUFFIX) for _ in range(5))
            if (namespace, name) not in self._objects[rt.key]:
                return name

    def _admin_refusal(
        self, rt: ResourceType, namespace: str, obj: Obj, old: Obj | None, *, status: bool
    ) -> list[errors.StatusCause]:
        labels = _meta(self._objects.get("namespaces", {}).get(("", namespace), {})).get("labels")
        return admin_access.refusal(rt.kind, obj, old, labels, status=status)

    @staticmethod
    def _validate(
        rt: ResourceType, obj: Obj, old: Obj | None, first: Sequence[errors.StatusCause] = ()
    ) -> Obj:
        """The object to store after the type's admission (pruning, defaults) and validation;
        `first` are causes found before (the namespace-dependent admin-access rule), reported
        with the validator's as kube-apiserver's strategies do."""
        name = str(_meta(obj).get("name", ""))
        if rt.defaulter is not None:
            obj = rt.defaulter(obj)
        if rt.admit is not None:
            obj, admit_causes = rt.admit(obj, old)
            if admit_causes:
                raise errors.invalid(rt.kind, rt.group, name, admit_causes)
        causes: list[errors.Cause | errors.StatusCause] = list(first)
        if rt.validator is not None:
            causes.extend(rt.validator(obj, old))
        if causes:
            raise errors.invalid(rt.kind, rt.group, name, causes)
        return obj

    def _merged_for_update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        old: Obj,
        body: Mapping[str, Any],
        status: bool,
    ) -> Obj:
        if status and not rt.has_status:
            raise errors.not_found(rt.plural, rt.group, name)
        meta = body.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise errors.bad_request("metadata must be an object")
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request("the namespace of the object does not match the URL")
        given_rv = meta.get("resourceVersion")
        if given_rv and given_rv != _meta(old).get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        if status:
            new = copy_json(old)
            if "status" in body:
                new["status"] = copy_json(body["status"])
            else:
                new.pop("status", None)
            for key in rt.status_metadata:
                if key in meta:
                    new["metadata"][key] = copy_json(meta[key])
                else:
                    new["metadata"].pop(key, None)
            if rt.status_strategy is not None:
                new, strategy_causes = rt.status_strategy(new, old)
                causes = [
                    *self._admin_refusal(rt, namespace, new, old, status=True),
                    *strategy_causes,
                ]
                if causes:
                    raise errors.invalid(rt.kind, rt.group, name, causes)
            if rt.admit is None:
                return new
            # Custom resources: the whole object is pruned and validated again (as upstream),
            # but only status may come out different.
            admitted = self._validate(rt, new, old)
            kept = copy_json(old)
            kept.pop("status", None)
            if "status" in admitted:
                kept["status"] = admitted["status"]
            return kept
        new = self._with_type(rt, body)
        new_meta = new.setdefault("metadata", {})
        new_meta.pop("generation", None)
        for key in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            if key in old["metadata"]:
                new_meta[key] = old["metadata"][key]
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            new_meta.pop(key, None)
            if key in old["metadata"]:
                new_meta[key] = old["metadata"][key]
        if rt.has_status:
            new.pop("status", None)
            if "status" in old:
                new["status"] = copy_json(old["status"])
        new = self._validate(rt, new, old)
        if rt.tracks_generation and _spec_part(new) != _spec_part(old):
            new_meta = new["metadata"]
            new_meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    def _commit_update(self, rt: ResourceType, key: _Key, old: Obj, new: Obj) -> Obj:
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rt, key, new)
        new_meta_cmp = {k: v for k, v in meta.items() if k != "resourceVersion"}
        old_meta_cmp = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
        if new_meta_cmp == old_meta_cmp and {**new, "metadata": {}} == {**old, "metadata": {}}:
            return old  # a no-op write: no new resourceVersion, no event (as upstream)
        return self._commit(rt, key, new, old, "MODIFIED")

    def _commit(self, rt: ResourceType, key: _Key, obj: Obj, old: Obj | None, kind: str) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        for uid in _owner_uids(self._objects[rt.key].get(key)):
            self._owned.get(uid, set()).discard((rt.key, key))
        if kind != "DELETED":
            for uid in _owner_uids(obj):
                self._owned.setdefault(uid, set()).add((rt.key, key))
        if kind == "DELETED":
            self._objects[rt.key].pop(key, None)
        else:
            self._objects[rt.key][key] = obj
        if len(self._history) >= self._history_size:
            self._dropped_rv = self._history.popleft().rv
        event = Event(self._rv, rt.key, kind, obj, old)
        self._history.append(event)
        self._cond.notify_all()
        for observer in self._observers:
            observer(event)
        return obj

    def _delete(self, rt: ResourceType, key: _Key, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return obj
            marked = copy_json(obj)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._commit(rt, key, marked, obj, "MODIFIED")
        return self._remove(rt, key, obj)

    def _remove(self, rt: ResourceType, key: _Key, obj: Obj) -> Obj:
        old = self._objects[rt.key].get(key)
        gone = self._commit(rt, key, copy_json(obj), old, "DELETED")
        self._collect_dependents(rt, gone)
        return gone

    def _collect_dependents(self, rt: ResourceType, owner: Obj) -> None:
        """Garbage collection: delete what the removed object owned (and a namespace's content)."""
        uid = _meta(owner).get("uid")
        owner_ns = _meta(owner).get("namespace", "")
        found = self._owned.pop(uid, set()) if isinstance(uid, str) else set()
        if rt.group == "" and rt.plural == "namespaces":
            name = key_name(owner)
            for other_key, objects in self._objects.items():
                other = self.types.get(other_key)
                if other is not None and other.namespaced:
                    found.update((other_key, key) for key in objects if key[0] == name)
        # In the order of the resource table, then by key, as a full scan would go.
        order = {other_key: index for index, other_key in enumerate(self._objects)}
        for other_key, key in sorted(found, key=lambda item: (order.get(item[0], -1), item[1])):
            other = self.types.get(other_key)
            if other is None:
                continue  # unregistered by an earlier deletion in this pass
            obj = self._objects.get(other_key, {}).get(key)
            if obj is None:
                continue  # deleted by an earlier deletion in this pass
            # Namespaced owners own only objects in their own namespace (as upstream).
            in_namespace = rt.group == "" and rt.plural == "namespaces" and other.namespaced
            if not in_namespace and other.namespaced and rt.namespaced and key[0] != owner_ns:
                continue
            self._delete(other, key, obj)


def _owner_uids(obj: Mapping[str, Any] | None) -> set[str]:
    if obj is None:
        return set()
    refs = _meta(obj).get("ownerReferences") or []
    if not isinstance(refs, list):
        return set()
    return {r["uid"] for r in refs if isinstance(r, Mapping) and isinstance(r.get("uid"), str)}


def key_name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))
