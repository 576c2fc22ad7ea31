"""The `dra-driver` umbrella command line."""
