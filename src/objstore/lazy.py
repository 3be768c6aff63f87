"""Members of a package reached as attributes, loaded on first use (PEP 562 ``__getattr__``).

``objstore.storage.log.local`` after a bare ``import objstore`` works as it did when the package
imported its modules eagerly, without making ``import objstore`` pay for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def member_getattr(package: str) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: a submodule of that name, imported on first use."""

    def __getattr__(name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{name}":
                raise  # a member that exists but fails to import: its own error
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
