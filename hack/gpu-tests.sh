#!/usr/bin/env bash
# The real-NVML tests (tests/gpu) on a machine with an NVIDIA GPU and no network. What the tests
# need beyond that machine's own packages travels as wheels in .whl/ (ignored by git, filled
# beforehand with `pip download` for its Python and platform); they are installed into /tmp/site,
# which goes first on the path. Like the tests, nothing here changes a GPU setting: nvidia-smi is
# only asked to list and query. The output is also written to ${OUT:-/tmp}/gpu-tests.log.
# Usage: hack/gpu-tests.sh [pytest arguments]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
SITE=/tmp/site
LOG="${OUT:-/tmp}/gpu-tests.log"
mkdir -p "$(dirname "$LOG")"

if compgen -G ".whl/*.whl" >/dev/null; then
  if "$PYTHON" -m pip --version >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" .whl/*.whl
  else
    # An interpreter without pip: a wheel with no .data folder installs by unpacking it.
    rm -rf "$SITE"
    "$PYTHON" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
      "$SITE" .whl/*.whl
  fi
fi
export PYTHONPATH="$SITE:$ROOT"

{
  echo "==> GPUs"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || echo "nvidia-smi -L failed"
    nvidia-smi --query-gpu=name,driver_version,mig.mode.current,compute_mode --format=csv ||
      echo "nvidia-smi --query-gpu failed"
  else
    echo "nvidia-smi is not on the PATH"
  fi
  echo "==> Python packages"
  "$PYTHON" - <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, distribution

print(sys.version.split()[0], sys.executable)
for name in ("pytest", "hypothesis", "nvidia-ml-py", "protobuf", "cel-expr-python", "pydantic",
             "pydantic-core", "structlog", "PyYAML", "typing-extensions"):
    try:
        dist = distribution(name)
        print(f"{name} {dist.version} ({dist.locate_file('')})")
    except PackageNotFoundError:
        print(f"{name}: not installed")
EOF
  echo "==> pytest tests/gpu"
  "$PYTHON" -m pytest tests/gpu -v -rs -p no:cacheprovider "$@"
} 2>&1 | tee "$LOG"
