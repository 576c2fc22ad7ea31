# syntax=docker/dockerfile:1
# The image of both daemons (dra-kubelet-plugin and dra-controller), built from the project's
# wheel. Build from the repository root:
#
#   docker build -t gpu-dra-driver:dev .
#
# The first stage builds wheels for the project and every dependency; the final stage installs
# only those wheels into a slim Python, so no compiler, pip cache or source tree ships. The image
# runs as an unprivileged user; the chart runs the kubelet plugin as root (it needs the host's
# devices) and the controller as this user.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api ./api
COPY dra_driver ./dra_driver
COPY kubeletplugin ./kubeletplugin
COPY controller ./controller
COPY localcluster ./localcluster
# localcluster/manifests links to the chart's CRDs, which the wheel must carry.
COPY deploy/helm/gpu-dra-driver/crds ./deploy/helm/gpu-dra-driver/crds
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpu-dra-driver" \
      org.opencontainers.image.description="Kubernetes DRA driver for NVIDIA GPUs" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links=/wheels gpu-dra-driver \
    && dra-kubelet-plugin --version && dra-controller --version
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT []
CMD ["dra-controller", "--help"]
