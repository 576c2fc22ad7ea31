"""The fake GPU backend: real products' MIG tables and the hardware's admission rules, no GPU.

It exists so every path of the driver (publishing, prepare, recovery, crash repair) runs in CI
and on a laptop with the behaviour of real GPUs, refusals included. `backend.py` is the
backend, `mig.py` the admission rules of GPU instances, `spec.py` the `PROFILE:COUNT` and YAML
inputs, `state.py` the on-disk state shared between processes, `topology.py` deterministic
identities, `faults.py` the failures a test can inject, `mps_control.py` a stand-in for
`nvidia-cuda-mps-control`.
"""

from dra_driver.backends.fake.backend import FakeBackend

__all__ = ["FakeBackend"]
