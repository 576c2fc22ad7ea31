#!/usr/bin/env bash
# Deletes the kind cluster made by hack/kind-up.sh (and with it everything installed in it).
# Usage: hack/kind-down.sh   (CLUSTER_NAME picks another cluster than gpu-dra)
set -euo pipefail
# shellcheck source=hack/kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

require kind "to delete the cluster"
if ! cluster_exists; then
  log "no kind cluster '$CLUSTER_NAME'; nothing to do"
  exit 0
fi
kind delete cluster --name "$CLUSTER_NAME"
