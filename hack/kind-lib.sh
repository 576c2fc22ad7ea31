#!/usr/bin/env bash
# Shared by the hack/kind-*.sh scripts (sourced, not run): settings and prerequisite checks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
CLUSTER_NAME="${CLUSTER_NAME:-gpu-dra}"
RELEASE="${RELEASE:-dra}"
NAMESPACE="${NAMESPACE:-dra-system}"
IMAGE="${IMAGE:-gpu-dra-driver:dev}"
DRIVER_NAME="${DRIVER_NAME:-gpu.dra-driver.dev}"
FAKE_GPUS="${FAKE_GPUS:-H100-SXM5-80GB:8}"
export CLUSTER_NAME RELEASE NAMESPACE IMAGE DRIVER_NAME FAKE_GPUS

# require TOOL WHY: exit with a message that says what is missing and what it is for.
require() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "error: '$1' is not installed or not on PATH; it is needed $2" >&2
    exit 1
  fi
}

# cluster_exists: whether the kind cluster of this project is up.
cluster_exists() {
  kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"
}

log() {
  echo "==> $*" >&2
}
