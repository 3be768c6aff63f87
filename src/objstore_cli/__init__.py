"""The objstore command line (installed as the ``objstore_cli`` package).

Its first act is ``objstore.interrupt``'s: until ``main`` takes over (and restores Python's handler,
which the root group turns into exit 130), SIGINT prints the one line — or JSON object — and exits
130, never a KeyboardInterrupt traceback from the imports before it.
"""

from objstore import interrupt as _interrupt  # src/objstore/__init__.py installs it first; this is the console script's path

_interrupt.install_if_the_command()
