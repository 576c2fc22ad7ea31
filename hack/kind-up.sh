#!/usr/bin/env bash
# A kind cluster with the driver on fake GPUs: creates the cluster (deploy/kind/cluster.yaml),
# builds the image from the Dockerfile, loads it into the nodes and installs the Helm chart with
# fake GPUs on the two workers. Then waits until every worker publishes its ResourceSlices.
#
# Settings (environment): KIND_NODE_IMAGE (a kindest/node image of Kubernetes 1.36 or 1.37;
# kind's default when empty), CLUSTER_NAME (gpu-dra), IMAGE (gpu-dra-driver:dev), FAKE_GPUS
# (H100-SXM5-80GB:8, PROFILE:COUNT per node), RELEASE (dra), NAMESPACE (dra-system).
# Usage: hack/kind-up.sh [extra helm arguments, e.g. --set logging.level=debug]
set -euo pipefail
# shellcheck source=hack/kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

require docker "to build the driver's image"
require kind "to run a Kubernetes cluster in containers (https://kind.sigs.k8s.io)"
require kubectl "to talk to the cluster"
require helm "to install the chart in deploy/helm/gpu-dra-driver"
if ! docker info >/dev/null 2>&1; then
  echo "error: docker is installed but its daemon does not answer (is it running, may you use it?)" >&2
  exit 1
fi
if [[ "$FAKE_GPUS" != *:* ]]; then
  echo "error: FAKE_GPUS must be PROFILE:COUNT, e.g. H100-SXM5-80GB:8 (got '$FAKE_GPUS')" >&2
  exit 1
fi
profile="${FAKE_GPUS%%:*}"
count="${FAKE_GPUS##*:}"

if cluster_exists; then
  log "kind cluster $CLUSTER_NAME exists; reusing it"
else
  log "creating kind cluster $CLUSTER_NAME"
  create=(kind create cluster --name "$CLUSTER_NAME" --config "$ROOT/deploy/kind/cluster.yaml")
  if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
    create+=(--image "$KIND_NODE_IMAGE")
  fi
  "${create[@]}"
fi
kubectl config use-context "kind-$CLUSTER_NAME" >/dev/null

server_minor="$(kubectl version -o json | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | tail -n 1)"
if [[ -n "$server_minor" && "$server_minor" -lt 34 ]]; then
  echo "error: the cluster runs Kubernetes 1.$server_minor; the driver needs 1.34+ (1.36+ for MIG and shares)" >&2
  exit 1
fi

log "building $IMAGE"
docker build -t "$IMAGE" "$ROOT"
log "loading $IMAGE into the nodes"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

log "installing the chart as $RELEASE in $NAMESPACE with $count fake $profile per worker"
helm upgrade --install "$RELEASE" "$ROOT/deploy/helm/gpu-dra-driver" \
  --namespace "$NAMESPACE" --create-namespace \
  --set driverName="$DRIVER_NAME" \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never \
  --set fakeGpus.enabled=true --set fakeGpus.profile="$profile" --set fakeGpus.count="$count" \
  --set-string 'kubeletPlugin.nodeSelector.dra-driver\.dev/fake-gpus=true' \
  --set logging.format=console \
  "$@"
kubectl -n "$NAMESPACE" rollout status daemonset -l app.kubernetes.io/component=kubelet-plugin --timeout=180s

log "waiting for every worker's ResourceSlices"
workers="$(kubectl get nodes -l dra-driver.dev/fake-gpus=true -o name | wc -l)"
for _ in $(seq 1 60); do
  pools="$(kubectl get resourceslices --field-selector "spec.driver=$DRIVER_NAME" \
    -o jsonpath='{range .items[*]}{.spec.pool.name}{"\n"}{end}' | sort -u | grep -c . || true)"
  if [[ "$pools" -ge "$workers" ]]; then
    log "ready: $pools node(s) publish $DRIVER_NAME devices; try hack/kind-demo.sh"
    exit 0
  fi
  sleep 2
done
echo "error: only $pools of $workers workers published ResourceSlices within 120 s; see" >&2
echo "  kubectl -n $NAMESPACE logs -l app.kubernetes.io/component=kubelet-plugin" >&2
exit 1
