"""GPU usage per prepared device: attribution to claims and pods, metrics, and the Idle
condition in the claim's status (docs/telemetry.md)."""
