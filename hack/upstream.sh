#!/usr/bin/env bash
# The real Kubernetes control plane as test infrastructure, built from Go modules by name (the
# module in hack/upstream pins k8s.io/kubernetes, its staging modules and etcd).
#
#   hack/upstream.sh build   build kube-apiserver, kube-controller-manager, kube-scheduler,
#                            kubelet, etcd and the fake CRI runtime once per machine; print the
#                            directory that holds them
#   hack/upstream.sh dir     print that directory if it is complete, else exit 1
#
# The binaries go to a cache outside the repository, keyed by the versions, the module's files and
# the Go toolchain, so a later run (or another checkout) on the same machine reuses them.
# DRA_UPSTREAM_CACHE overrides the cache root (default: ${XDG_CACHE_HOME:-~/.cache}/dra-driver).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="$ROOT/hack/upstream"
K8S_VERSION="v1.37.2"
ETCD_VERSION="v3.7.0"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd fakecri)

cache_dir() {
  local root="${DRA_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-driver}"
  local key
  key=$( { go version; cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE"/*/*.go; } | sha256sum | cut -c1-12)
  echo "$root/upstream/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-$key"
}

complete() {
  local dir=$1 b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    echo "error: building the real control plane needs Go (1.26 or newer) and the Go module proxy;" \
      "'go' is not on PATH" >&2
    exit 3
  fi
}

build() {
  need_go
  local dir
  dir=$(cache_dir)
  if complete "$dir"; then echo "$dir"; return; fi
  mkdir -p "$(dirname "$dir")"
  # One build at a time per machine: a second caller waits, then finds the result.
  exec 9>"$(dirname "$dir")/.build.lock"
  flock 9
  if complete "$dir"; then echo "$dir"; return; fi
  local tmp="$dir.partial.$$" started=$SECONDS
  rm -rf "$tmp"; mkdir -p "$tmp"
  local v=k8s.io/component-base/version cv=k8s.io/client-go/pkg/version
  local ldflags="-s -w"
  for pkg in $v $cv; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "building the control plane ($K8S_VERSION, etcd $ETCD_VERSION) into $dir" >&2
  (cd "$MODULE" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    ./etcd ./fakecri) >&2
  rm -rf "$dir"; mv "$tmp" "$dir"
  echo "built in $((SECONDS - started)) s" >&2
  echo "$dir"
}

case "${1:-}" in
  build) build ;;
  dir)
    need_go
    d=$(cache_dir)
    if complete "$d"; then echo "$d"; else echo "error: control plane not built; run hack/upstream.sh build" >&2; exit 1; fi ;;
  *) echo "usage: $0 build|dir" >&2; exit 2 ;;
esac
