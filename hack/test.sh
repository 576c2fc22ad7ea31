#!/usr/bin/env bash
# Quick start, part two: lint, type-check and run the test suite (benchmarks excluded), in two
# tiers:
#   embedded  the whole suite against the embedded API server and stand-ins (minutes, no Go);
#   upstream  the integration tests that exercise API behaviour (local cluster, controller,
#             plugin, queues, usage) and the differential conformance tests, against the real
#             kube-apiserver, kube-controller-manager and kube-scheduler 1.37 (DRA_CONTROL_PLANE=
#             upstream). The control plane is built first if this machine lacks it (hack/upstream.sh;
#             tens of minutes once per machine, then cached).
# Usage: hack/test.sh [--tier embedded|upstream|all] [--repeat N] [pytest arguments...]
# Without pytest arguments both tiers run; with them, only the embedded tier unless --tier says
# otherwise. --repeat N runs the chosen tests N times in a row and stops at the first red run,
# naming it (for hunting flaky tests; see docs/testing.md). Any failure fails the script, including pytest finding no tests (its exit code 5).
# Without Go the upstream tier is skipped with a warning, except under CI=true, where it fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

tier=""
repeat=1
while [ "$#" -gt 0 ]; do
  case "$1" in
    --tier) tier="${2:?--tier needs embedded, upstream or all}"; shift 2 ;;
    --repeat) repeat="${2:?--repeat needs a count}"; shift 2 ;;
    *) break ;;
  esac
done
case "$repeat" in
  ''|*[!0-9]*|0) echo "error: --repeat must be a positive whole number, got '$repeat'" >&2; exit 2 ;;
esac
if [ -z "$tier" ]; then
  if [ "$#" -eq 0 ]; then tier=all; else tier=embedded; fi
fi
case "$tier" in
  embedded|upstream|all) ;;
  *) echo "error: --tier must be embedded, upstream or all, got '$tier'" >&2; exit 2 ;;
esac

# The integration tests that run on both control planes (tests marked embedded_only test the
# embedded server itself and are left out of the upstream tier).
UPSTREAM_TESTS=(
  tests/integration/localcluster
  tests/integration/controller
  tests/integration/allocation
  tests/integration/plugin
  tests/integration/publisher
  tests/integration/cli
  tests/integration/apiserver
  tests/integration/kubelet
)

echo "==> ruff"
ruff check .
ruff format --check .
echo "==> mypy --strict"
mypy

# One worker per core (pytest-xdist): tests own their servers, ports (0) and directories, so they
# run side by side. A file's tests stay together, in order, on one worker (its module fixtures,
# such as an API server, are made once). "-n 0" among the arguments runs them in this process.
if [ "$tier" != upstream ]; then
  echo "==> pytest (embedded control plane)"
  for ((run = 1; run <= repeat; run++)); do
    [ "$repeat" -eq 1 ] || echo "--- embedded run $run of $repeat"
    DRA_CONTROL_PLANE=embedded pytest -n auto --dist loadfile -rf "$@" \
      || { [ "$repeat" -eq 1 ] || echo "embedded run $run of $repeat failed" >&2; exit 1; }
  done
fi

if [ "$tier" != embedded ]; then
  echo "==> control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd)"
  if ! command -v go >/dev/null 2>&1; then
    message="the upstream tier needs Go 1.26+ and the Go module proxy to build the real control plane; 'go' is not on PATH"
    if [ "${CI:-}" = true ]; then
      echo "error: $message" >&2
      exit 1
    fi
    echo "WARNING: upstream tier SKIPPED: $message" >&2
    exit 0
  fi
  started=$SECONDS
  DRA_UPSTREAM_BIN="$(bash hack/upstream.sh build)"
  export DRA_UPSTREAM_BIN
  echo "control plane ready in $((SECONDS - started)) s: $DRA_UPSTREAM_BIN"
  echo "==> pytest (upstream control plane)"
  paths=("$@")
  if [ "${#paths[@]}" -eq 0 ]; then paths=("${UPSTREAM_TESTS[@]}"); fi
  for ((run = 1; run <= repeat; run++)); do
    [ "$repeat" -eq 1 ] || echo "--- upstream run $run of $repeat"
    DRA_CONTROL_PLANE=upstream pytest -n auto --dist loadfile -rf -m "not embedded_only" \
      "${paths[@]}" \
      || { [ "$repeat" -eq 1 ] || echo "upstream run $run of $repeat failed" >&2; exit 1; }
  done
fi
