"""Container Device Interface (CDI) specs: names, content, versions, files and their effect.

The kubelet plugin hands kubelet fully qualified CDI device IDs; the container runtime then reads
the spec files in `/var/run/cdi` to learn what those IDs mean. This package makes those files,
writes them so runtimes never read half of one, and predicts what a container will get.
"""

from dra_driver.cdi.codec import spec_from_dict, spec_to_dict
from dra_driver.cdi.environment import container_edits, container_environment
from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import (
    CdiDevice,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Hook,
    Mount,
    validate_spec,
)
from dra_driver.cdi.names import (
    parse_qualified_name,
    qualified_name,
    split_kind,
    validate_claim_uid,
    validate_class,
    validate_device_name,
    validate_kind,
    validate_vendor,
)
from dra_driver.cdi.nvidia import (
    control_device_nodes,
    gpu_device_nodes,
    mig_capability_minor,
    mig_capability_path,
    mig_device_nodes,
    visible_devices_env,
)
from dra_driver.cdi.store import DEFAULT_ROOT, STATIC_ROOT, CdiSpecDir
from dra_driver.cdi.version import BASELINE_VERSION, KNOWN_VERSIONS, minimum_version

__all__ = [
    "BASELINE_VERSION",
    "DEFAULT_ROOT",
    "KNOWN_VERSIONS",
    "STATIC_ROOT",
    "CdiDevice",
    "CdiError",
    "CdiSpec",
    "CdiSpecDir",
    "ContainerEdits",
    "DeviceNode",
    "Hook",
    "Mount",
    "container_edits",
    "container_environment",
    "control_device_nodes",
    "gpu_device_nodes",
    "mig_capability_minor",
    "mig_capability_path",
    "mig_device_nodes",
    "minimum_version",
    "parse_qualified_name",
    "qualified_name",
    "spec_from_dict",
    "spec_to_dict",
    "split_kind",
    "validate_claim_uid",
    "validate_class",
    "validate_device_name",
    "validate_kind",
    "validate_spec",
    "validate_vendor",
    "visible_devices_env",
]
