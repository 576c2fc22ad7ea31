"""The node daemon: registers with kubelet, publishes ResourceSlices, prepares devices."""
