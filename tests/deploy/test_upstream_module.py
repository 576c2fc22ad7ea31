"""The Go module that builds the real control plane pins one release throughout."""

from __future__ import annotations

import re

from tests.deploy.chart import ROOT

MODULE = ROOT / "hack" / "upstream"


def _versions() -> tuple[str, str]:
    script = (ROOT / "hack" / "upstream.sh").read_text()
    k8s = re.search(r'^K8S_VERSION="(v[0-9.]+)"', script, re.M)
    etcd = re.search(r'^ETCD_VERSION="(v[0-9.]+)"', script, re.M)
    assert k8s and etcd, "hack/upstream.sh names no K8S_VERSION or ETCD_VERSION"
    return k8s.group(1), etcd.group(1)


def test_the_module_requires_the_versions_the_script_names() -> None:
    k8s, etcd = _versions()
    gomod = (MODULE / "go.mod").read_text()
    assert f"\tk8s.io/kubernetes {k8s}\n" in gomod
    assert f"\tgo.etcd.io/etcd/server/v3 {etcd}\n" in gomod


def test_every_staging_module_is_replaced_by_the_same_minor_release() -> None:
    k8s, _ = _versions()
    staging = "v0." + k8s.removeprefix("v1.")
    gomod = (MODULE / "go.mod").read_text()
    replaces = re.findall(r"^\t(k8s\.io/[a-z0-9-]+) => (k8s\.io/[a-z0-9-]+) (v\S+)$", gomod, re.M)
    assert len(replaces) >= 30
    for name, target, version in replaces:
        assert (name, version) == (target, staging)
    # A staging module required as v0.0.0 without a replace would not resolve outside the
    # kubernetes repository.
    required = set(re.findall(r"^\t(k8s\.io/[a-z0-9-]+) v0\.0\.0$", gomod, re.M))
    assert required <= {name for name, _, _ in replaces}
    assert (MODULE / "go.sum").stat().st_size > 0
