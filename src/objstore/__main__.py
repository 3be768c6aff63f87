"""``python -m objstore``: the command line, as the installed ``objstore`` command runs it."""

import objstore_cli  # noqa: F401 - first: its SIGINT handler covers the library's import time
from objstore_cli.main import main

main()
