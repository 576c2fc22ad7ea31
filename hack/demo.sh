#!/usr/bin/env bash
# Quick start, part one: run the driver end to end on the embedded local cluster with fake GPUs.
# Two nodes with eight fake H100 each (two of them with MIG mode off), one kubelet plugin process
# per node, the scheduler, claim controller and kubelet stand-ins; the pods in
# deploy/examples/*.yaml are scheduled, prepared and released, and every pod's node, devices and
# container environment are printed; then a busy and an idle pod show GPU usage telemetry, and
# two GPU queues borrow and reclaim. Exits 0 only when every example pod got what it asked for,
# the idle pod's GPU was reported idle and the busy one's not, and the queues behaved.
# Usage: hack/demo.sh [--nodes N] [--gpus PROFILE:COUNT] [--verbose]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

# DRA_CONTROL_PLANE=upstream runs it on the real control plane (hack/upstream.sh builds it).
if [ "${DRA_CONTROL_PLANE:-embedded}" = upstream ]; then bash "$ROOT/hack/upstream.sh" build >/dev/null; fi
exec dra-driver local-cluster --demo deploy/examples "$@"
