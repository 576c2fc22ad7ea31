#!/usr/bin/env bash
# Quick start, part one: run the driver end to end on the embedded local cluster with fake GPUs.
# Two nodes with eight fake H100 each, one kubelet plugin process per node, the scheduler, claim
# controller and kubelet stand-ins; the pods in deploy/examples/*.yaml are scheduled, prepared and
# released, and every pod's node, devices and container environment are printed. Exits 0 only
# when every example pod got what it asked for.
# Usage: hack/demo.sh [--nodes N] [--gpus PROFILE:COUNT] [--verbose]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

exec dra-driver local-cluster --demo deploy/examples "$@"
