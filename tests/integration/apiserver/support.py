"""Helpers that let one test speak to either control plane: raw HTTP with the client's login
(for request shapes the typed client cannot send) and namespaces made before they are used."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.polling import wait_until

Obj = dict[str, Any]


class Raw:
    """Requests to the server `configuration` points at, with its token and CA when it has
    them (kube-apiserver) and none when it has none (the embedded server)."""

    def __init__(self, configuration: client.Configuration) -> None:
        parsed = urllib.parse.urlsplit(configuration.host)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.tls = parsed.scheme == "https"
        self.context: ssl.SSLContext | None = None
        if self.tls:
            self.context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        self.headers: dict[str, str] = {}
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                self.headers[setting["key"]] = setting["value"]

    def connection(self, timeout: float = 10) -> http.client.HTTPConnection:
        """A fresh keep-alive connection; send with `request(...)` to carry the login."""
        if self.tls:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> http.client.HTTPResponse:
        conn.request(method, path, body=body, headers={**self.headers, **(headers or {})})
        return conn.getresponse()

    def send(
        self, method: str, path: str, body: Obj | None = None, content_type: str | None = None
    ) -> tuple[int, Obj]:
        """One request on its own connection; the status code and the decoded JSON answer
        (`{"text": ...}` for an answer that is not JSON, such as a plain 404 page)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type or "application/json"}
        conn = self.connection()
        try:
            answer = self.request(conn, method, path, data, headers)
            payload = answer.read()
            try:
                return answer.status, json.loads(payload) if payload else {}
            except ValueError:
                return answer.status, {"text": payload.decode(errors="replace")}
        finally:
            conn.close()


def ensure_namespace(core: client.CoreV1Api, name: str) -> str:
    """Create namespace `name` unless it exists; return the name. kube-apiserver refuses
    objects in a namespace that does not exist (the NamespaceLifecycle admission plugin),
    the embedded server does not, so portable tests make their namespaces first."""
    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as error:
        if error.status != 409:
            raise
    return name


def namespaces_fixture(*names: str) -> Any:
    """A module-scoped, autouse fixture that makes `names` (see `ensure_namespace`); assign it
    to a module-level name so pytest finds it."""

    @pytest.fixture(scope="module", autouse=True)
    def namespaces(core: client.CoreV1Api) -> None:
        for name in names:
            ensure_namespace(core, name)

    return namespaces


def established(ext: client.ApiextensionsV1Api, name: str) -> dict[str, str]:
    """The CRD's conditions once it is `Established`: kube-apiserver sets that a moment after
    the create (the embedded server at once), and serves the kind from then on."""
    conditions: dict[str, str] = {}

    def check() -> bool:
        crd = ext.read_custom_resource_definition(name)
        conditions.clear()
        conditions.update({c.type: c.status for c in crd.status.conditions or ()})
        return conditions.get("Established") == "True"

    wait_until(check, f"CRD {name} established")
    return conditions


def not_found(call: Callable[[], object]) -> bool:
    """Whether `call` answers 404 (any other error is raised)."""
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise
        return True
    return False
