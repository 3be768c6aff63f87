"""Ref names: what a ref may be called, and the run-ref namespace.

Refs themselves live in the log (format 2): every commit entry carries its ref
moves ``(name, old, new, reason)`` and the ref table is derived from them (see
``engine``); moves are compare-and-swap under the writer lock (``Store.set_ref``).
A value is a 32-byte object id, or ``ref: <other name>`` for a symbolic ref (a
run's live ref names its live branch that way, like git's HEAD).

Names follow git's check-ref-format rules.
"""

from __future__ import annotations

import re

from .errors import InvalidRefName

_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
SYMREF_PREFIX = "ref: "


def check_ref_name(name: str) -> str:
    """Return ``name`` if valid, else raise InvalidRefName (git check-ref-format rules)."""
    if not isinstance(name, str) or not name:
        raise InvalidRefName(name, "empty")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidRefName(name, "must not start or end with '/'")
    if _BAD_CHARS.search(name):
        raise InvalidRefName(name, "control character, space or one of ~^:?*[\\")
    if ".." in name:
        raise InvalidRefName(name, "contains '..'")
    if "@{" in name or name == "@":
        raise InvalidRefName(name, "contains '@{' or is '@'")
    if name.endswith("."):
        raise InvalidRefName(name, "ends with '.'")
    for comp in name.split("/"):
        if not comp:
            raise InvalidRefName(name, "empty path component")
        if comp.startswith("."):
            raise InvalidRefName(name, "a component starts with '.'")
        if comp.endswith(".lock"):
            raise InvalidRefName(name, "a component ends with '.lock'")
    if len(name) > 1024:
        raise InvalidRefName(name[:40] + "...", "longer than 1024 characters")
    return name
