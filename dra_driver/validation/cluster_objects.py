"""ResourceSlices and GpuQueues, whose rules live with the code that writes and reads them.

Slices are checked per slice by `dra_driver.slices.limits` (the limits the publisher keeps);
pool-level checks are left out because kube-apiserver validates one slice at a time. A GpuQueue
is checked by the queue code's own reading of it (`dra_driver.queues.spec.parse_queue`), which
enforces what the CRD's schema and rules enforce in a cluster.
"""

from __future__ import annotations

from dra_driver.queues.spec import KIND, QueueSpecError, parse_queue
from dra_driver.slices.limits import check_limits
from dra_driver.validation import decoding
from dra_driver.validation.decoding import Obj
from dra_driver.validation.field_errors import FieldError, worded
from dra_driver.validation.meta import validate_meta
from dra_driver.validation.names import dns1123_subdomain


def validate_slice(resource_slice: Obj, old: Obj | None = None) -> list[FieldError]:
    del old
    spec = decoding.mapping(resource_slice, "spec", "spec")
    pool = decoding.mapping(spec, "pool", "spec.pool")
    for key in ("generation", "resourceSliceCount"):
        decoding.integer(pool, key, f"spec.pool.{key}")
    return [
        worded(v.path, v.message)
        for v in check_limits([resource_slice])
        if not v.message.startswith("pool ")
    ]


def validate_queue(queue: Obj, old: Obj | None = None) -> list[FieldError]:
    del old
    errors = validate_meta(queue, False, dns1123_subdomain)
    if errors:
        return errors
    try:
        parse_queue(queue)
    except QueueSpecError as err:
        # "GpuQueue <name>: spec.<field>: <problem>"
        rest = str(err).removeprefix(f"{KIND} ").partition(": ")[2]
        field, _, problem = rest.partition(": ")
        return [worded(field, problem) if problem else worded("spec", rest)]
    return []
