"""The local cluster's `dra-driver` commands (`apiserver`, `local-cluster`), registered through
the `dra_driver.commands` entry-point group so the core's command line never imports them."""
