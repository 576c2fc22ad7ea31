#!/usr/bin/env bash
# Quick start, part one: show what a node with fake GPUs publishes to Kubernetes.
# Usage: hack/demo.sh [FAKE_SPEC]   (default: H100-SXM5-80GB:2)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

spec="${1:-H100-SXM5-80GB:2}"
echo "==> ResourceSlices a node with fake GPUs ($spec) would publish:"
dra-driver devices --fake "$spec" --node-name demo-node --output yaml
echo
echo "==> Summary (devices per slice):"
dra-driver devices --fake "$spec" --node-name demo-node --output json | python -c '
import json, sys
for s in json.load(sys.stdin):
    spec = s["spec"]
    if spec.get("sharedCounters"):
        print(f"  {s[\"metadata\"][\"name\"]}: counter sets {[c[\"name\"] for c in spec[\"sharedCounters\"]]}")
    else:
        kinds = {}
        for d in spec["devices"]:
            t = d["attributes"]["type"]["string"]
            kinds[t] = kinds.get(t, 0) + 1
        print(f"  {s[\"metadata\"][\"name\"]}: {len(spec[\"devices\"])} devices {kinds}")
'
