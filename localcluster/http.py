"""HTTP: turn Kubernetes REST requests into storage calls, and answers into JSON.

Built on the standard library's `ThreadingHTTPServer` (one thread per connection) because a
watch is a long-lived streaming response, which is simplest as a blocking loop in its own
thread. Responses use HTTP/1.1 keep-alive with Content-Length, except watches, which stream
newline-delimited JSON events with chunked transfer encoding and keep the connection afterwards.

URL shapes served (core group under /api/v1, named groups under /apis/<group>/<version>):
  <prefix>/<plural>[/<name>[/status]]                      cluster-scoped resources
  <prefix>/<plural>                                        namespaced: list/watch all namespaces
  <prefix>/namespaces/<ns>/<plural>[/<name>[/status]]      namespaced resources
  /api/v1/namespaces/<ns>/pods/<name>/eviction             POST only (`eviction.py`)
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qs, unquote, urlsplit

from localcluster import discovery, errors
from localcluster.errors import ApiError
from localcluster.eviction import Evictions
from localcluster.resources import ResourceType
from localcluster.selectors import parse_selectors
from localcluster.storage import Store
from localcluster.watch import WatchRequest, parse_start, stream

_TRUE = ("true", "1")


@dataclass(frozen=True)
class Target:
    """What a resource URL names: a collection (name "") or one object, maybe its status."""

    resource: ResourceType
    namespace: str | None
    name: str
    status: bool


class Server(ThreadingHTTPServer):
    """The listening socket plus what handlers need: the store and the bookmark interval."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        bookmark_interval_s: float,
        request_log: TextIO | None = None,
    ) -> None:
        super().__init__(address, Handler)
        self.store = store
        self.bookmark_interval_s = bookmark_interval_s
        self.request_log = request_log
        """Gets `<unix time> <method> <path> [watch]` per request: how benchmarks count the
        calls a client makes (the path without its query)."""
        self._log_lock = threading.Lock()

    def log_request_line(self, method: str, path: str, watch: bool) -> None:
        if self.request_log is None:
            return
        line = f"{time.time():.3f} {method} {path}{' watch' if watch else ''}\n"
        with self._log_lock:
            self.request_log.write(line)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its kept-alive connection is not an error of the server (the
        default prints a traceback for it); anything else still is."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _find(store: Store, group: str, version: str, plural: str) -> ResourceType:
    rt = store.find(group, version, plural)
    if rt is not None:
        return rt
    raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")


def resolve(store: Store, parts: list[str]) -> Target:
    """Map path segments (after /api/v1 or /apis/<g>/<v>, given with group/version) to a target."""
    group, version, rest = parts[0], parts[1], parts[2:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rt = _find(store, group, version, rest[2])
        if not rt.namespaced or len(rest) > 5 or (len(rest) == 5 and rest[4] != "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[3] if len(rest) >= 4 else ""
        return Target(rt, rest[1], name, len(rest) == 5)
    if not rest or len(rest) > 3 or (len(rest) == 3 and rest[2] != "status"):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    rt = _find(store, group, version, rest[0])
    if rt.namespaced and len(rest) > 1:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return Target(
        rt, None if rt.namespaced else "", rest[1] if len(rest) > 1 else "", len(rest) == 3
    )


class Handler(BaseHTTPRequestHandler):
    """One connection's requests."""

    protocol_version = "HTTP/1.1"
    server: Server
    _raw_body: bytes = b""

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle plus the peer's
        # delayed ACK adds tens of milliseconds to every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test harness should not write a line per request to stderr."""

    # ---- plumbing ----------------------------------------------------------------------------

    def _send_json(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._end_headers_with(data)

    def _end_headers_with(self, data: bytes) -> None:
        """End the headers and send them with the body in one write: two writes cost a second
        system call per answer, and the server answers thousands of calls a second in bursts."""
        self._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
        self.flush_headers()

    def _read_body(self) -> Any:
        """The request body as JSON (None when empty); read up front by `_dispatch`."""
        if not self._raw_body:
            return None
        try:
            return json.loads(self._raw_body)
        except ValueError as err:
            raise errors.bad_request(f"the request body is not valid JSON: {err}") from None

    def _object_body(self) -> dict[str, Any]:
        body = self._read_body()
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        return body

    def _alive(self) -> bool:
        """False once the client closed its end (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return True
            return bool(self.connection.recv(1, socket.MSG_PEEK))
        except OSError:
            return False

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        watch = query.get("watch", "").lower() in _TRUE
        self.server.log_request_line(method, url.path, watch)
        parts = [unquote(p) for p in url.path.split("/") if p]
        # Always consume the body first, so an early error keeps keep-alive in step.
        length = int(self.headers.get("Content-Length") or 0)
        self._raw_body = self.rfile.read(length) if length > 0 else b""
        try:
            self._route(method, parts, query)
        except ApiError as err:
            self._send_json(err.code, err.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as err:  # a harness bug: answer like an API server, not a dead socket
            self._send_json(500, ApiError(500, "InternalError", repr(err)).status())

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- routing -----------------------------------------------------------------------------

    def _route(self, method: str, parts: list[str], query: dict[str, str]) -> None:
        store = self.server.store
        types = list(store.served.values())
        doc: dict[str, Any] | None = None
        if parts == ["version"]:
            doc = dict(discovery.KUBERNETES_VERSION)
        elif parts == ["api"]:
            doc = discovery.api_versions()
        elif parts == ["apis"]:
            doc = discovery.api_group_list(types)
        elif len(parts) == 2 and parts[0] == "api":
            doc = discovery.api_resource_list(types, "", parts[1])
        elif len(parts) == 2 and parts[0] == "apis":
            doc = discovery.find_group(types, parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            doc = discovery.api_resource_list(types, parts[1], parts[2])
        elif (
            len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4:]
            == [
                "pods",
                parts[5],
                "eviction",
            ]
        ):
            if method != "POST":
                raise errors.method_not_allowed(f"{method} is not supported on pods/eviction")
            evicted = Evictions(store).evict(parts[3], parts[5], self._object_body())
            return self._send_json(201, evicted)
        elif len(parts) > 2 and parts[0] == "api":
            return self._resource(method, resolve(store, ["", *parts[1:]]), query)
        elif len(parts) > 3 and parts[0] == "apis":
            return self._resource(method, resolve(store, parts[1:]), query)
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method != "GET":
            raise errors.method_not_allowed(f"{method} is not supported here")
        self._send_json(200, doc)
        return None

    def _resource(self, method: str, target: Target, query: dict[str, str]) -> None:
        store = self.server.store
        rt, name = target.resource, target.name
        namespace = target.namespace or ""
        if method != "GET" and "dryRun" in query:
            # Better refused than silently written: a dry run must not change anything.
            raise errors.bad_request("dryRun is not supported by the local API server")
        match = parse_selectors(rt, query.get("labelSelector"), query.get("fieldSelector"))
        if not name:
            if method == "GET" and query.get("watch", "").lower() in _TRUE:
                return self._watch(target, query)
            if method == "GET":
                encoded, rv = store.list_json(rt, target.namespace, match)
                return self._send_encoded_list(rt, encoded, rv)
            if method == "POST" and target.namespace is not None:
                body = self._object_body()
                return self._send_json(201, store.create(rt, namespace, body))
            if method == "DELETE":
                deleted = store.delete_collection(rt, target.namespace, match)
                return self._send_list(rt, deleted, store.resource_version)
            raise errors.method_not_allowed(f"{method} is not supported on a collection")
        if method == "GET":
            obj = store.get(rt, namespace, name)
            if target.status and not rt.has_status:
                raise errors.not_found(rt.plural, rt.group, name)
            return self._send_json(200, obj)
        if method == "PUT":
            body = self._object_body()
            return self._send_json(
                200, store.update(rt, namespace, name, body, status=target.status)
            )
        if method == "PATCH":
            patch = self._read_body()
            content_type = self.headers.get("Content-Type") or ""
            return self._send_json(
                200,
                store.patch(rt, namespace, name, content_type, patch, status=target.status),
            )
        if method == "DELETE" and not target.status:
            options = self._read_body()
            pre = options.get("preconditions") if isinstance(options, dict) else None
            return self._send_json(200, store.delete(rt, namespace, name, pre))
        raise errors.method_not_allowed(f"{method} is not supported here")

    def _send_encoded_list(self, rt: ResourceType, items: str, rv: int) -> None:
        head = json.dumps(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
            }
        )
        data = (head[:-1] + ',"items":' + items + "}").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_list(self, rt: ResourceType, items: list[dict[str, Any]], rv: int) -> None:
        self._send_json(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            },
        )

    def _watch(self, target: Target, query: dict[str, str]) -> None:
        timeout_text = query.get("timeoutSeconds")
        try:
            timeout = float(timeout_text) if timeout_text else None
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
        if timeout is not None and timeout <= 0:
            timeout = None  # as upstream: 0 means "the server's default", here no limit
        request = WatchRequest(
            resource=target.resource,
            namespace=target.namespace,
            match=parse_selectors(
                target.resource, query.get("labelSelector"), query.get("fieldSelector")
            ),
            resource_version=query.get("resourceVersion"),
            timeout_s=timeout,
            bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
            send_initial_events=query.get("sendInitialEvents", "").lower() in _TRUE,
        )
        parse_start(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        events = stream(
            self.server.store,
            request,
            bookmark_interval_s=self.server.bookmark_interval_s,
            alive=self._alive,
        )
        for event in events:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        # A stream that ended cleanly leaves the connection reusable: closing it here would
        # race with the client putting it back in its pool and reusing it (RemoteDisconnected).
        if self.server.store.closed or not self._alive():
            self.close_connection = True
