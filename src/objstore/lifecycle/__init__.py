"""Lifecycle: what happens to a whole store over its life, above the run model and the journal.

* ``upgrade`` — convert a format-1 or format-2 store in place to format 3;
* ``repair`` — cut a damaged end off the log, on purpose and on the record.
"""


def __getattr__(name: str) -> object:
    """A member reached as an attribute (``objstore.storage.engine`` after a bare ``import objstore``), loaded on first use."""
    import importlib

    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
