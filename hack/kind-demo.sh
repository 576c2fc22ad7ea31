#!/usr/bin/env bash
# The examples on the kind cluster of hack/kind-up.sh: applies every deploy/examples/*.yaml,
# waits for the pods, prints what each one got (its node, its claims' devices and the DRA_/CUDA_
# environment its container printed) and fails if any pod did not get what it asked for: every
# device allocated to its claims must show up in its container's environment.
#
# Examples whose pods carry the allocation controller's scheduling gate go through the chart's
# controller; --without-controller leaves them out (for an install with controller.enabled=false).
# --keep leaves the example objects in place afterwards.
# Usage: hack/kind-demo.sh [--without-controller] [--keep] [--timeout SECONDS]
set -euo pipefail
# shellcheck source=hack/kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

with_controller=true
keep=false
timeout=180
while [[ $# -gt 0 ]]; do
  case "$1" in
    --without-controller) with_controller=false ;;
    --keep) keep=true ;;
    --timeout) timeout="$2"; shift ;;
    *) echo "error: unknown argument '$1' (see the usage line in $0)" >&2; exit 2 ;;
  esac
  shift
done

require kind "to find the cluster made by hack/kind-up.sh"
require kubectl "to talk to the cluster"
if ! cluster_exists; then
  echo "error: no kind cluster '$CLUSTER_NAME'; run hack/kind-up.sh first" >&2
  exit 1
fi
kubectl config use-context "kind-$CLUSTER_NAME" >/dev/null

files=()
for file in "$ROOT"/deploy/examples/*.yaml; do
  if grep -q 'schedulingGates:' "$file" && [[ "$with_controller" != true ]]; then
    log "skipping $(basename "$file"): its pods wait for the allocation controller"
    continue
  fi
  files+=("$file")
done

cleanup() {
  if [[ "$keep" != true ]]; then
    for file in "${files[@]}"; do
      kubectl delete -f "$file" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    done
  fi
}
trap cleanup EXIT

pods=()
for file in "${files[@]}"; do
  while IFS= read -r name; do
    pods+=("${name#pod/}")
  done < <(kubectl apply -f "$file" -o name | grep '^pod/')
done
log "waiting up to ${timeout}s for ${#pods[@]} pods"
for pod in "${pods[@]}"; do
  kubectl wait --for=condition=Ready "pod/$pod" --timeout="${timeout}s" >/dev/null || true
done

# env_name DEVICE: the variable the plugin's CDI spec sets for a device.
env_name() {
  local upper
  upper="$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]' | tr -c 'A-Z0-9' '_')"
  printf 'DRA_DEVICE_%s' "$upper"
}

failed=0
for pod in "${pods[@]}"; do
  echo
  echo "pod $pod"
  node="$(kubectl get pod "$pod" -o jsonpath='{.spec.nodeName}')"
  echo "  node: ${node:--}"
  if ! kubectl wait --for=condition=Ready "pod/$pod" --timeout=1s >/dev/null 2>&1; then
    echo "  FAILED: not running; kubectl describe pod $pod says why"
    failed=$((failed + 1))
    continue
  fi
  logs="$(kubectl logs "$pod")"
  claims="$(kubectl get pod "$pod" -o jsonpath='{.status.resourceClaimStatuses[*].resourceClaimName} {.spec.resourceClaims[*].resourceClaimName}')"
  ok=true
  for claim in $claims; do
    devices="$(kubectl get resourceclaim "$claim" \
      -o jsonpath="{range .status.allocation.devices.results[?(@.driver==\"$DRIVER_NAME\")]}{.device}{\"\\n\"}{end}")"
    if [[ -z "$devices" ]]; then
      echo "  claim $claim: nothing allocated"
      ok=false
    fi
    for device in $devices; do
      echo "  claim $claim: $device"
      if ! grep -q "^$(env_name "$device")=" <<<"$logs"; then
        echo "    missing from the container's environment: $(env_name "$device")"
        ok=false
      fi
    done
  done
  echo "  environment:"
  while IFS= read -r line; do
    echo "    $line"
  done <<<"$logs"
  if [[ "$ok" != true ]]; then
    echo "  FAILED: the pod did not get what it asked for"
    failed=$((failed + 1))
  fi
done

echo
if [[ "$failed" -gt 0 ]]; then
  echo "$failed of ${#pods[@]} example pods did not get what they asked for"
  exit 1
fi
echo "all ${#pods[@]} example pods got what they asked for"
