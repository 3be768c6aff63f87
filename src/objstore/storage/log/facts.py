"""The record facts the log applies, handed to it by the layer that owns the record schema.

An entry's meta carries an index row per record and per chained object (``recs``, ``prevs``), and
the tables' rules run over those rows; but what a record *is* belongs to the run model. So the log
decodes no record: it calls the three functions below, which forward to the provider module the
run model registers (``objstore.runs.facts``: ``object_facts``, ``facts_of``, ``body_refs``).

Registration holds for every user of storage, including one that never imports ``objstore.runs``:
the top package ``objstore`` (whose ``__init__`` Python runs before any ``objstore.x``) names the
provider in ``RECORD_FACTS``, a dotted path, so registering costs a string and imports nothing.
The provider is imported on first use (the first commit, the first entry a reader takes in, the
first crafted entry), by ``importlib`` with that non-literal path, so the import graph still runs
down and ``import objstore`` loads no table or rule code. ``register`` replaces the provider (a
module or object with the same three functions), for a store that runs another record model.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

_provider: Any = None  # the provider in use, once resolved
_path: str | None = None  # a provider registered by path, imported on first use


def register(provider: Any) -> None:
    """Make ``provider`` (a module, an object, or the dotted path of a module) the record facts the log applies."""
    global _provider, _path
    if isinstance(provider, str):
        _provider, _path = None, provider
    else:
        _provider, _path = provider, None


def _resolve() -> Any:
    global _provider
    if _provider is None:
        path = _path if _path is not None else getattr(sys.modules[__name__.partition(".")[0]], "RECORD_FACTS", None)
        if path is None:
            raise RuntimeError("no record facts registered for the log (objstore.RECORD_FACTS or storage.log.facts.register)")
        _provider = importlib.import_module(path)
    return _provider


def object_facts(otype: str, canonical: bytes, value: Any, oid: bytes | None = None) -> list | None:
    """The index row an entry's meta carries for one object (None: it carries none); ``value``: the
    decoded payload if the caller has it."""
    row: list | None = _resolve().object_facts(otype, canonical, value, oid)
    return row


def facts_of(objects: list) -> dict:
    """id -> index row of those of ``objects`` [(id, type, canonical bytes or LargeBlob)] that have one."""
    rows: dict = _resolve().facts_of(objects)
    return rows


def body_refs(body: dict) -> list:
    """Every object id a record body names, in the body's canonical order."""
    refs: list = _resolve().body_refs(body)
    return refs
