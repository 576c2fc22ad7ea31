"""Keys and certificates for the real control plane on loopback, made with the `openssl` command.

kube-apiserver serves only TLS and signs service-account tokens with a key of its own, so the
local cluster needs a small PKI: a CA, a serving certificate for 127.0.0.1 and localhost, and the
service-account signing key pair. Everything lives in the cluster's temporary directory and dies
with it. Clients authenticate with bearer tokens (static ones for the control plane's own
components and the administrator, TokenRequest tokens for the driver's ServiceAccounts), so no
client certificates are made.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class PkiError(RuntimeError):
    """The keys could not be made; says which step and why."""


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise PkiError("the real control plane needs the `openssl` command to make its keys")
    done = subprocess.run(
        [binary, *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", pki.ca_key, "-out", pki.ca_cert,
             "-days", "30", "-subj", "/CN=dra-local-ca", cwd=directory)  # fmt: skip
    request = directory / "apiserver.csr"
    _openssl("req", *ec, "-keyout", pki.serving_key, "-out", request,
             "-subj", "/CN=kube-apiserver", cwd=directory)  # fmt: skip
    extensions = directory / "apiserver.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", request, "-CA", pki.ca_cert, "-CAkey", pki.ca_key,
             "-CAcreateserial", "-out", pki.serving_cert, "-days", "30",
             "-extfile", extensions, cwd=directory)  # fmt: skip
    # Service-account tokens: kube-apiserver signs with the private key and verifies with the
    # public one; kube-controller-manager's token controller signs with the private key too.
    _openssl("genrsa", "-out", pki.service_account_key, "2048", cwd=directory)
    _openssl("rsa", "-in", pki.service_account_key, "-pubout", "-out", pki.service_account_pub,
             cwd=directory)  # fmt: skip
    return pki
