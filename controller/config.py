"""Settings of the allocation controller, resolved from flags and environment once at start.

Names that users see (the gate, the finalizer, the gang labels, the Lease) derive from the driver
name unless set explicitly, so two drivers installed side by side never answer for each other's
pods.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.allocator import AllocationMode
from dra_driver.controller_names import (
    default_finalizer,
    default_gang_label,
    default_gang_size_label,
    default_gate,
)
from dra_driver.workload_profile import ProfileEntry


def default_lease_name(driver_name: str) -> str:
    return f"{driver_name.replace('.', '-')}-controller"


__all__ = [
    "ControllerConfig",
    "LeaderElection",
    "default_finalizer",
    "default_gang_label",
    "default_gang_size_label",
    "default_gate",
    "default_lease_name",
]


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """Lease timing, in seconds, with the meaning client-go gives them."""

    enabled: bool = True
    lease_name: str = "gpu-dra-driver-dev-controller"
    lease_namespace: str = "default"
    identity: str = ""
    lease_duration_s: float = 15.0
    """How long a standby waits after the last renewal before it takes the lease over."""
    renew_deadline_s: float = 10.0
    """How long the leader keeps trying to renew before it gives up leading."""
    retry_period_s: float = 2.0
    """Time between attempts to acquire or renew."""

    def validate(self) -> None:
        if not self.lease_duration_s > self.renew_deadline_s > self.retry_period_s > 0:
            raise ValueError(
                "leader election needs lease-duration > renew-deadline > retry-period > 0, got "
                f"{self.lease_duration_s} > {self.renew_deadline_s} > {self.retry_period_s}"
            )


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    driver_name: str
    kubeconfig: str | None
    gate_name: str
    finalizer: str
    gang_label: str
    gang_size_label: str
    mode: AllocationMode = AllocationMode.SCORED
    leader: LeaderElection = LeaderElection()
    metrics_port: int | None = None
    healthcheck_port: int | None = None
    resync_s: float = 30.0
    default_queue: str = "default"
    """The queue of pods whose namespace no GpuQueue names: no guarantee, no limit, served
    last at equal standing."""
    reclaim_hold_s: float = 60.0
    """How long devices freed by reclaim stay kept for the pod they were freed for."""
    report_interval_s: float = 10.0
    """A waiting pod whose reason changes is told the new one at most this often (the first
    reason goes out when the allocation work pauses, at most 5 s later): reasons move with
    every pass while a queue reclaims or capacity comes and goes, and each report is two API
    calls."""
    workload_profile: tuple[ProfileEntry, ...] | None = None
    """A configured workload profile (`--workload-profile`); None: learn it from the pods."""
    workload_configmap: str | None = None
    """Where the learned profile is kept (in the Lease's namespace); None: nowhere."""
    workload_write_s: float = 60.0
    """The learned profile is written at most this often, and only when it changed."""
    settle_s: float = 0.2
    """Written allocations are re-checked against the watch this long after the write, before
    the gates come off: an allocator that decided on older state gets that long to land its
    write where we see it, and we withdraw ours instead of double-booking."""
    """Pods that did not fit are retried on every relevant change and at least this often."""
