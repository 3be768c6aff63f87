"""The ref namespace: every name the refs of a run (and of a subject, and the owner key) take,
the spelling of a symbolic ref, and the one parser of a run's refs.

Like dulwich's ``refs.py``, the constants and the parsers live together, so no other module
spells ``run/…`` or ``ref: …`` by hand::

    run/<R>/branch/<N>           head of branch N of run R (its newest record, or its fork object)
    run/<R>/live                 ref: run/<R>/branch/<N> — the live branch, like git's HEAD
    run/<R>/journal              head of R's journal version chain (docs/JOURNAL.md)
    run/<R>/segments             head of R's compaction segment chain
    run/<R>/grant/<public key>   head of a grant chain about one key on run R
    run/<R>/deletions            head of R's chain of partial deletions (records, a branch from an LSN)
    run/<R>/deleted              the deletion of the whole run R, written once: R is gone
    run/<R>/cite                 store@<N>:<checksum>: the store-log position R's newest citing entry read (format 6)
    subjects/<S>/grant/<key>     head of a subject-wide grant chain
    redacted/<id hex>            the redaction of one blob, written once
    keys/owner                   the store owner's public key, written once
    anchor                       the newest anchor manifest (format 6: every log's head; runs.anchor_manifest)

This module depends on nothing but the error classes: the engine, the refs rules, the run log,
verify and the journal modules all take their names from here.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import BranchNotFound, InvalidInput, RunNotFound

RUN_PREFIX = "run/"
SUBJECT_PREFIX = "subjects/"
KEYS_PREFIX = "keys/"
OWNER_REF = "keys/owner"
ANCHOR_REF = "anchor"
SYMREF_PREFIX = "ref: "

# The last component of a run's single refs (besides branch/<N> and grant/<key>).
LIVE = "live"
JOURNAL = "journal"
SEGMENTS = "segments"
DELETIONS = "deletions"
DELETED = "deleted"
CITE = "cite"
CITE_PREFIX = "store@"
REDACTED_PREFIX = "redacted/"
SCHEMA_PREFIX = "schema/"  # schema/<kind>: the newest schema object of an x. record kind (append-only chain)


def run_prefix(run: str) -> str:
    return f"{RUN_PREFIX}{run}/"


def branch_ref(run: str, branch: int) -> str:
    return f"{RUN_PREFIX}{run}/branch/{branch}"


def live_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{LIVE}"


def journal_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{JOURNAL}"


def segments_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{SEGMENTS}"


def deletions_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{DELETIONS}"


def deleted_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{DELETED}"


def cite_ref(run: str) -> str:
    return f"{RUN_PREFIX}{run}/{CITE}"


def is_cite_ref(name: str) -> bool:
    return name.startswith(RUN_PREFIX) and name.endswith("/" + CITE)


def cite_value(entry: int, checksum: bytes) -> str:
    """A cite ref's value: the store-log position ``(entry, checksum)`` a run-log entry's rules read."""
    return f"{CITE_PREFIX}{entry}:{checksum.hex()}"


def parse_cite(value: object) -> tuple[int, bytes] | None:
    """(entry, checksum) of a cite ref's value, or None if it is not one."""
    if not isinstance(value, str) or not value.startswith(CITE_PREFIX):
        return None
    n, sep, hx = value[len(CITE_PREFIX):].partition(":")
    if not sep or not n.isdigit() or not n.isascii() or len(hx) != 64:
        return None
    try:
        return int(n), bytes.fromhex(hx)
    except ValueError:
        return None


def redacted_ref(oid: bytes) -> str:
    return REDACTED_PREFIX + oid.hex()


def run_grant_prefix(run: str) -> str:
    return f"{RUN_PREFIX}{run}/grant/"


def subject_grant_prefix(subject: str) -> str:
    return f"{SUBJECT_PREFIX}{subject}/grant/"


def run_grant_ref(run: str, public: str) -> str:
    return run_grant_prefix(run) + public


def subject_grant_ref(subject: str, public: str) -> str:
    return subject_grant_prefix(subject) + public


def symref(target: str) -> str:
    """The value of a symbolic ref pointing at ``target``."""
    return SYMREF_PREFIX + target


def parse_symref_value(value: object) -> str | None:
    """The target of a symbolic ref value, or None if ``value`` is not one (an id, absent)."""
    if isinstance(value, str) and value.startswith(SYMREF_PREFIX):
        return value[len(SYMREF_PREFIX):]
    return None


def run_of(name: str) -> str | None:
    """The run a ref name belongs to (``run/<R>/…``), or None."""
    if name.startswith(RUN_PREFIX):
        i = name.find("/", len(RUN_PREFIX))
        if i > len(RUN_PREFIX):
            return name[len(RUN_PREFIX):i]
    return None


def branch_of(run: str, name: str) -> int | None:
    """N if ``name`` is ``run/<run>/branch/<N>``, else None."""
    prefix = run_prefix(run) + "branch/"
    if name.startswith(prefix):
        rest = name[len(prefix):]
        if rest.isdigit() and rest.isascii():
            return int(rest)
    return None


def is_journal_ref(name: str) -> bool:
    return name.startswith(RUN_PREFIX) and name.endswith("/" + JOURNAL)


def is_segments_ref(name: str) -> bool:
    return name.startswith(RUN_PREFIX) and name.endswith("/" + SEGMENTS)


def is_deletions_ref(name: str) -> bool:
    return name.startswith(RUN_PREFIX) and name.endswith("/" + DELETIONS)


def is_deleted_ref(name: str) -> bool:
    return name.startswith(RUN_PREFIX) and name.endswith("/" + DELETED)


def is_grant_ref(name: str) -> bool:
    return (name.startswith(RUN_PREFIX) or name.startswith(SUBJECT_PREFIX)) and "/grant/" in name


def journal_run(name: str) -> str | None:
    """R if ``name`` is ``run/<R>/journal`` (R a single component), else None."""
    if is_journal_ref(name):
        run = name[len(RUN_PREFIX):-len(JOURNAL) - 1]
        if run and "/" not in run:
            return run
    return None


class RunRefs(NamedTuple):
    """A run's refs, parsed: the live branch number and each branch's head id."""

    live: int
    heads: dict[int, bytes]


def parse_run_refs(run: str, refs: dict) -> RunRefs:
    """The one parser of a run's refs (``{name: value}`` as the store holds them).

    No ``live`` ref (a format-1 store could lose it in a crash) means branch 0 is live. Raises
    ``RunNotFound`` without a branch 0 and ``InvalidInput`` when ``live`` does not name an existing
    branch of the same run."""
    if not isinstance(refs.get(branch_ref(run, 0)), bytes):
        raise RunNotFound(run)
    heads: dict[int, bytes] = {}
    for name, value in refs.items():
        b = branch_of(run, name)
        if b is not None and isinstance(value, bytes):
            heads[b] = value
    live = refs.get(live_ref(run), symref(branch_ref(run, 0)))
    target = parse_symref_value(live)
    live_branch = branch_of(run, target) if target is not None else None
    if live_branch is None:
        raise InvalidInput(f"live ref of run {run} is malformed: {live!r}")
    if live_branch not in heads:
        raise InvalidInput(f"live ref of run {run} names branch {live_branch}, which does not exist")
    return RunRefs(live_branch, heads)


def head_of(run: str, heads: dict[int, bytes], branch: int) -> bytes:
    try:
        return heads[branch]
    except KeyError:
        raise BranchNotFound(branch, run) from None
