"""The objstore command line (installed as the ``objstore_cli`` package)."""
