"""`ApiServer`: the local API server's public face (start, stop, URL, kubeconfig).

A TEST AND DEMO HARNESS, never for production: no authentication or authorization, plain HTTP
on the loopback interface, everything in memory. Typical use::

    with ApiServer() as server:          # port 0: the OS picks a free port
        server.write_kubeconfig(path)
        kubernetes.config.load_kube_config(str(path))
        kubernetes.client.CoreV1Api().list_node()
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import yaml
from kubernetes import client

from localcluster.crds import CRD_KEY, CustomResourceDefinitions
from localcluster.defaults import DEFAULT_WATCH_HISTORY
from localcluster.http import Server
from localcluster.resources import DEFAULT_RESOURCES, ResourceType, Validator
from localcluster.storage import Store
from localcluster.validation import DEFAULT_STATUS_STRATEGIES, DEFAULT_VALIDATORS


class ApiServer:
    """An in-memory Kubernetes API server on 127.0.0.1, served from a background thread.

    `resources` replaces the default resource table; `validators` maps a resource key
    (`pods`, `resourceslices.resource.k8s.io`) to a callable of the new and the old object (None
    on create) whose non-empty answer rejects the write with 422 Invalid (the defaults apply
    kube-apiserver's rules to every built-in kind the project uses, `dra_driver.validation`;
    pass `validators={}` to drop them; status writes always get the status strategies of
    `localcluster/validation.py`). `history` bounds the watch history (older start RVs get 410
    Gone); `bookmark_interval_s` paces BOOKMARK events for watches that ask for them;
    `request_log`, when given, gets a line per request (see `localcluster.http`).
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        resources: Iterable[ResourceType] = DEFAULT_RESOURCES,
        validators: Mapping[str, Validator] | None = None,
        history: int = DEFAULT_WATCH_HISTORY,
        bookmark_interval_s: float = 5.0,
        request_log: TextIO | None = None,
    ) -> None:
        chosen = dict(DEFAULT_VALIDATORS if validators is None else validators)
        types = [
            replace(
                rt,
                validator=chosen.get(rt.key, rt.validator),
                status_strategy=DEFAULT_STATUS_STRATEGIES.get(rt.key, rt.status_strategy),
            )
            for rt in resources
        ]
        unknown = set(chosen) - {rt.key for rt in types}
        if unknown:
            raise ValueError(f"validators for unknown resources: {sorted(unknown)}")
        # Serving CustomResourceDefinitions means serving what they define, as they change.
        crds = CustomResourceDefinitions(frozenset(rt.key for rt in types))
        types = [crds.resource_type(rt) if rt.key == CRD_KEY else rt for rt in types]
        self.store = Store(types, history=history)
        crds.attach(self.store)
        namespaces = next((rt for rt in types if rt.key == "namespaces"), None)
        if namespaces is not None:
            # As in a real cluster; it also means no list ever reports resourceVersion "0",
            # which watch clients would read as "list first" rather than "from the start".
            for name in ("default", "kube-system"):
                self.store.create(namespaces, "", {"metadata": {"name": name}})
        self._host = host
        self._port = port
        self._bookmark_interval_s = bookmark_interval_s
        self._request_log = request_log
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ApiServer:
        """Bind and serve in a daemon thread; returns once the socket is listening."""
        if self._server is not None:
            raise RuntimeError("the API server is already running")
        self._server = Server(
            (self._host, self._port), self.store, self._bookmark_interval_s, self._request_log
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="localcluster-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End every watch, stop serving and close the socket."""
        if self._server is None:
            return
        self.store.close()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the API server is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def kubeconfig(self, context: str = "localcluster") -> dict[str, Any]:
        """A kubeconfig (as a dict) with one cluster, user and context pointing here."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": "default"},
                }
            ],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | Path, context: str = "localcluster") -> Path:
        """Write `kubeconfig()` to `path` (parents created) and return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(context), sort_keys=False))
        return target

    def configuration(self) -> client.Configuration:
        """Client settings for this server (no login: it has none)."""
        return client.Configuration(host=self.url)

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(self.configuration())

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
