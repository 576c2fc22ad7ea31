"""Which driver files a GPU container gets, as data.

The NVIDIA container stack groups the driver's user-space files by "driver capability"; a CUDA
container is given the `compute` and `utility` groups. The names below are those groups'
libraries and programs as NVIDIA's libnvidia-container lists them. A library is named without
its version (`libcuda.so`): the installed files carry the driver version
(`libcuda.so.580.95.05`) and a soname link (`libcuda.so.1`). Not every driver release ships every
library (the fatbinary loader is gone from recent ones, the PKCS#11 libraries are new), so only
`REQUIRED_LIBRARIES` must be present.
"""

from __future__ import annotations

from pathlib import PurePosixPath

# NVML, GPU configuration and NVSwitch topology: what nvidia-smi and monitoring agents load.
UTILITY_LIBRARIES = (
    "libnvidia-ml.so",
    "libnvidia-cfg.so",
    "libnvidia-nscq.so",
)

# The CUDA driver and what it loads at run time (the PTX JIT, the NVVM compiler), plus OpenCL.
COMPUTE_LIBRARIES = (
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-opencl.so",
    "libnvidia-gpucomp.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-fatbinaryloader.so",
    "libnvidia-allocator.so",
    "libnvidia-compiler.so",
    "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so",
    "libnvidia-nvvm.so",
)

LIBRARIES = UTILITY_LIBRARIES + COMPUTE_LIBRARIES

# Without these a CUDA or NVML program cannot start, so a driver root lacking them is an error.
REQUIRED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")

# Development names programs link against at run time (`-lcuda` in JIT compilers such as
# Triton's); the driver installs only the sonames, and NVIDIA's toolkit adds this one link too.
DEVELOPMENT_LINKS = {"libcuda.so": "libcuda.so.1"}

UTILITY_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
COMPUTE_BINARIES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
BINARIES = UTILITY_BINARIES + COMPUTE_BINARIES

# Where a driver's programs are installed, relative to the driver root.
BINARY_DIRS = (PurePosixPath("usr/bin"), PurePosixPath("usr/local/bin"), PurePosixPath("bin"))

# Library directories searched when the driver root has no linker cache: the multiarch layout of
# Debian and Ubuntu first, then the lib64 layout of RHEL, SUSE and their relatives.
LIBRARY_DIRS = (
    PurePosixPath("usr/lib/x86_64-linux-gnu"),
    PurePosixPath("usr/lib/aarch64-linux-gnu"),
    PurePosixPath("lib/x86_64-linux-gnu"),
    PurePosixPath("lib/aarch64-linux-gnu"),
    PurePosixPath("usr/lib64"),
    PurePosixPath("lib64"),
    PurePosixPath("usr/lib"),
    PurePosixPath("lib"),
)

# GSP firmware, per driver version; the first directory that exists wins.
FIRMWARE_DIRS = (PurePosixPath("lib/firmware/nvidia"), PurePosixPath("usr/lib/firmware/nvidia"))
FIRMWARE_GLOB = "gsp*.bin"

# Sockets of the driver's daemons; a container talks to them when they run.
IPC_SOCKETS = (
    PurePosixPath("run/nvidia-persistenced/socket"),
    PurePosixPath("run/nvidia-fabricmanager/socket"),
)

# The NVIDIA container toolkit's hook program, or its older form as a subcommand of nvidia-ctk.
CDI_HOOK = "nvidia-cdi-hook"
CTK = "nvidia-ctk"
