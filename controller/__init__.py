"""The cluster daemon: allocates claims of gated pods with placement scoring."""
