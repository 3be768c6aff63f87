"""Ref names: what a ref may be called, and the run-ref namespace.

Refs themselves live in the log (format 2): every commit entry carries its ref
moves ``(name, old, new, reason)`` and the ref table is derived from them (see
``engine``); moves are compare-and-swap under the writer lock (``Store.set_ref``).
A value is a 32-byte object id, or ``ref: <other name>`` for a symbolic ref (a
run's live ref names its live branch that way, like git's HEAD).

Names follow git's check-ref-format rules.

Some refs only ever move forward (``check_move``): the owner key ref is written
once, and a journal, segment or grant ref moves only to an object whose
``previous`` is the value it holds. A caller with the whole public API can
therefore append to those chains but never roll one back or replace it: a
revoked grant stays revoked, an earlier segment is never replaced.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import InvalidRefName, Refused
from . import runrefs

_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
SYMREF_PREFIX = runrefs.SYMREF_PREFIX


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


_NOT_A_CHAIN = object()


def forward_only(name: str) -> bool:
    """Whether ``name`` is a write-once or forward-only ref (cheap: called on every move)."""
    if name.startswith(runrefs.KEYS_PREFIX) or name.startswith(runrefs.REDACTED_PREFIX) or name.startswith(runrefs.SCHEMA_PREFIX):
        return True
    return (runrefs.is_journal_ref(name) or runrefs.is_segments_ref(name) or runrefs.is_grant_ref(name)
            or runrefs.is_deletions_ref(name) or runrefs.is_deleted_ref(name) or runrefs.is_cite_ref(name))


def write_once_deletion(name: str) -> bool:
    """A run's whole deletion and a blob's redaction: written once, to a deletion object, never moved."""
    return name.startswith(runrefs.REDACTED_PREFIX) or runrefs.is_deleted_ref(name)


def chain_type(name: str) -> str:
    """The object type a forward-only chain ref holds: ``grant``, ``journal``, ``segment`` or ``deletion``."""
    if runrefs.is_grant_ref(name):
        return "grant"
    if name.startswith(runrefs.SCHEMA_PREFIX):
        return "schema"
    if runrefs.is_deletions_ref(name) or write_once_deletion(name):
        return "deletion"
    return "journal" if runrefs.is_journal_ref(name) else "segment"


def check_move(name: str, old: bytes | str | None, new: bytes | str | None, previous_of: Callable[[bytes, str], object],
               is_new: Callable[[bytes], bool] | None = None) -> None:
    """Refuse a move that would roll back or replace a forward-only ref. ``previous_of(id, type)``
    gives the object's ``previous`` field if it is an object of that type (else ``_NOT_A_CHAIN``);
    ``is_new(id)`` says whether the object is stored by the commit making the move."""
    if name.startswith(runrefs.KEYS_PREFIX):
        if old is not None or not isinstance(new, bytes):
            raise Refused(f"ref {name} is written once and never moved or deleted")
        return
    if runrefs.is_cite_ref(name):
        # A run's log never goes back along the store log: each citing entry reads the store log at or
        # after the position the one before it read (docs/FORMAT.md "Citations").
        got = runrefs.parse_cite(new)
        if got is None:
            raise Refused(f"ref {name} names a store-log position (store@<entry>:<checksum>), not {new!r}")
        was = runrefs.parse_cite(old) if old is not None else None
        if old is not None and (was is None or got[0] < was[0] or (got[0] == was[0] and got[1] != was[1])):
            raise Refused(f"ref {name} moves back along the store log: it cites entry {got[0]}, the run's log cited {old!r} before")
        return
    if write_once_deletion(name):
        # Deletion is forward-only: a deleted run or a redacted blob is never restored, and what
        # deleted it is never replaced.
        if old is not None or not isinstance(new, bytes):
            raise Refused(f"ref {name} is written once and never moved or deleted: no deletion is undone")
        if previous_of(new, "deletion") is _NOT_A_CHAIN:
            raise Refused(f"ref {name} names only a deletion object")
        if is_new is not None and not is_new(new):
            raise Refused(f"ref {name} moves only to a deletion stored in the same commit")
        return
    if not isinstance(new, bytes):
        raise Refused(f"ref {name} only moves forward; it is never deleted or made symbolic")
    # The type too: any object naming the head as its ``previous`` (a grant behind a journal ref)
    # used to pass, and wedged the chain for good (every later read or update of it failed).
    want = chain_type(name)
    prev = previous_of(new, want)
    if prev is _NOT_A_CHAIN or prev != old:
        raise Refused(f"ref {name} only moves forward: the new object must be a {want} naming the current one as its previous")
    # The Host dates a journal version, and restore a segment, by the log position of its object
    # (was its writer / compacting key granted then?). One stored earlier and published later — say
    # by a worker revoked in between — would be dated before its publication; so these refs move
    # only to an object stored by the same commit.
    if want in ("journal", "segment", "deletion", "schema") and is_new is not None and not is_new(new):
        raise Refused(f"ref {name} moves only to a {want} stored in the same commit")
