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
dra-driver devices --fake "$spec" --node-name demo-node --output json >"$ROOT/.venv/demo-slices.json"
python - "$ROOT/.venv/demo-slices.json" <<'PY'
import json
import sys
from collections import Counter

for item in json.load(open(sys.argv[1])):
    name, spec = item["metadata"]["name"], item["spec"]
    if spec.get("sharedCounters"):
        sets = [c["name"] for c in spec["sharedCounters"]]
        print(f"  {name}: counter sets {', '.join(sets)}")
    else:
        kinds = Counter(d["attributes"]["type"]["string"] for d in spec["devices"])
        listed = ", ".join(f"{n} {k}" for k, n in kinds.items())
        print(f"  {name}: {len(spec['devices'])} devices ({listed})")
PY
