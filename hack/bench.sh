#!/usr/bin/env bash
# Benchmarks (not part of the test suite): allocator throughput, latency and memory on a
# 500-node H100 cluster, the fragmentation trace, the kubelet plugin's prepare/unprepare and its
# telemetry, then the allocation controller end to end. Figures are recorded in
# docs/performance/ (one page per benchmark, indexed by docs/performance.md).
# Usage: hack/bench.sh [--nodes N]   (extra arguments go to the two allocator benchmarks)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

echo "==> allocator: throughput, latency, peak RSS (first-fit, then scored)"
python -m tests.bench.bench_allocator "$@"
echo
echo "==> fragmentation: claims placed before the first rejection"
python -m tests.bench.bench_fragmentation "$@"
echo
echo "==> kubelet plugin: prepare/unprepare over gRPC"
python -m tests.bench.bench_plugin
echo
echo "==> kubelet plugin: telemetry CPU per sampling cycle, prepare latency with sampling on/off"
python -m tests.bench.bench_telemetry
echo
echo "==> allocation controller: gated pods end to end (all at once, then 100 pods/s)"
python -m tests.bench.bench_controller
python -m tests.bench.bench_controller --rate 100
