"""The one typed error hierarchy of objstore.

Modelled on BorgBackup's ``helpers/errors.py``: each class carries its own
message template and exit code, so the CLI turns any ``ObjstoreError`` into one
line on stderr and a documented exit code without knowing the cases.

Exit codes: ``EXIT_CODES`` below is the one table of them. ``objstore --help`` is generated from
it; docs/CLI.md ("Exit codes") and README.md explain each code, and tests/cli/test_exit_codes.py checks
that every class's code is in it and that those documents list every code.

Every error has a stable kebab-case ``code`` (``RunNotFound`` → ``run-not-found``)
and ``to_json()`` gives the one JSON shape the CLI prints under ``--json``.
"""

from __future__ import annotations

import re
from typing import Any

# (code, what it means), in the words of ``objstore --help``; a new code goes here, in its class, and in
# docs/CLI.md's and README.md's lists (tests/cli/test_exit_codes.py)
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "ok"),
    (1, "verify found problems"),
    (2, "usage"),
    (3, "no store (incl. an s3:// bucket that does not exist)"),
    (4, "not found"),
    (5, "invalid input (incl. a bad key file, a store that needs upgrade, a newer format)"),
    (6, "integrity error"),
    (7, "conflict"),
    (8, "refused (not the owner key, unauthenticated, job, revoked, never granted, stale or replayed request)"),
    (9, "limit exceeded"),
    (10, "operating-system error (incl. a journal host or object storage that cannot be reached or does not answer in time)"),
    (11, "state cache error (run 'objstore rebuild')"),
    (12, "erased (deleted or redacted)"),
    (13, "snapshot gone (gc rewrote it: open again)"),
    (14, "busy (a commit to object storage kept losing the race for HEAD: retry)"),
    (15, "a batch spanning several runs on object storage (use ingest --per-run)"),
    (130, "interrupted"),
)


def _kebab(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


class ObjstoreError(Exception):
    """Base class: ``msg`` is formatted with the positional args."""

    exit_code = 2
    msg = "objstore error: {}"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.args = args

    @property
    def code(self) -> str:
        """Stable machine name of the error: the class name in kebab case."""
        return _kebab(type(self).__name__)

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "message": str(self), "exit": self.exit_code}

    def __str__(self) -> str:
        try:
            return self.msg.format(*self.args)
        except (IndexError, KeyError):  # a template/args mismatch must not hide the error
            return f"{self.msg} {self.args!r}"


class StoreNotFound(ObjstoreError):
    exit_code = 3
    msg = "not an objstore store: {} (run 'objstore init' or pass --store)"


class StoreFormatError(ObjstoreError):
    exit_code = 3
    msg = "unsupported store format at {}: {}"


class NotFound(ObjstoreError):
    exit_code = 4
    msg = "not found: {}"


class ObjectNotFound(NotFound):
    msg = "object not found: {}"


class RunNotFound(NotFound):
    msg = "run not found: {}"


class BranchNotFound(NotFound):
    msg = "branch {} of run {} not found"


class InvalidInput(ObjstoreError):
    exit_code = 5
    msg = "invalid input: {}"


class InvalidRefName(InvalidInput):
    msg = "invalid ref name {!r}: {}"


class InvalidId(InvalidInput):
    msg = "invalid object id {!r}: {}"


class InvalidRecord(InvalidInput):
    msg = "invalid record: {}"


class IngestError(InvalidInput):
    msg = "ingest: line {}: {}"


class IntegrityError(ObjstoreError):
    """Stored bytes are damaged: hash mismatch, bad header, garbage, truncation."""

    exit_code = 6
    msg = "integrity error: object {} ({}): {}"


class UnknownObjectType(IntegrityError):
    msg = "integrity error: object {} ({}): unknown object type {!r}"


class MalformedObject(IntegrityError):
    """A stored object reads (its hash holds) but breaks its schema: a record of an ``x.`` kind its
    schema does not allow, a schema object that is no schema. Only a forger writes one; every read
    of it refuses it, as verify names it (``malformed-object``)."""

    msg = "integrity error: object {} is malformed: {}; run 'objstore verify'"


class CorruptPack(IntegrityError):
    msg = "integrity error: pack {}: {}"


class Conflict(ObjstoreError):
    exit_code = 7
    msg = "conflict: ref {} moved (expected {}, found {})"


class StaleBase(Conflict):
    """An optimistic commit (object storage) was built on a head that moved: a ref it read or
    moves changed meanwhile. Self-contained commits are re-run on the new head; a caller's own batch gets this."""

    msg = "the log moved under this batch: {} was {} when read, is {} now (run the batch again)"


class ParentSuperseded(Conflict):
    """A checkpoint put (the LangGraph savers with ``on_concurrent="raise"``) whose parent is no
    longer the newest checkpoint of its branch: another writer continued the thread first. Nothing
    of the put landed."""

    msg = "parent superseded: {}"


class Refused(ObjstoreError):
    exit_code = 8
    msg = "refused: {}"


class RetainedBranch(Refused):
    msg = "refused: branch {} of run {} is retained, not live (live is {}); pass allow_retained=True / --retained to append anyway"


class Unauthenticated(Refused):
    msg = "refused: unauthenticated caller: {}"


class WrongSubject(Refused):
    msg = "refused: caller subject {!r} does not own run {} (subject {!r})"


class WrongSession(Refused):
    msg = "refused: caller is bound to session {}, not {}"


class JobCaller(Refused):
    msg = "refused: job identity {!r} may not read or write journals"


class WriterRevoked(Refused):
    msg = "refused: writer {!r} has no live grant on run {}: {}"


class StaleRequest(Refused):
    msg = "refused: request time is {:.0f} s from the Host's clock (limit {:.0f} s)"


class ReplayedRequest(Refused):
    msg = "refused: request nonce {} was already used (a replayed request)"


class LimitExceeded(ObjstoreError):
    exit_code = 9
    msg = "limit exceeded: {}"


class LockTimeout(ObjstoreError):
    exit_code = 9
    msg = "limit exceeded: could not take {} within {} s"


class CorruptLog(IntegrityError):
    msg = "integrity error: log {}: {}"


class UntrustedGcPending(IntegrityError):
    """tmp/gc/pending names a rewrite that gc cannot trust (a row that is not one a gc wrote for the
    packed file in place): gc commits none of it."""

    msg = "integrity error: {}: {}; gc commits nothing (if no gc is running, delete the file and run gc again)"


class HostUnavailable(ObjstoreError):
    """A journal Host that does not answer (socket gone, process dead). Compaction and startup
    record it as the outcome ``unavailable (read_failed: …)``; only a write fails with it."""

    exit_code = 10
    msg = "journal host unavailable: {}"

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else ""


class StorageOSError(ObjstoreError):
    """An operating-system failure, wrapped with the operation it interrupted (borg's BackupOSError)."""

    exit_code = 10
    msg = "operating-system error while trying to {}: {}"


class ExportFailed(StorageOSError):
    """An OTLP/HTTP endpoint (``objstore export --endpoint``) that cannot be reached, does not answer
    in time or answers other than 2xx: nothing was exported by this call."""

    msg = "OTLP export to {} failed: {}"


class StoreNeedsUpgrade(ObjstoreError):
    exit_code = 5
    msg = "store at {} is format {}; run 'objstore --store {} upgrade' to convert it to format 3"


class BucketNeedsUpgrade(StoreNeedsUpgrade):
    """A store on object storage of one HEAD (formats 3 to 5) is read as it is; writing to it waits for the
    upgrade that gives each run a HEAD of its own (format 7)."""

    msg = ("store at {} is format {} (one HEAD for the whole store), which this objstore reads but does not write; "
           "run 'objstore --store {} upgrade' to give each run its own HEAD (format 7)")


class StateCacheError(ObjstoreError):
    """The derived SQLite state cache failed (locked, damaged, wrong column type). Nothing in
    the objects is lost: ``objstore rebuild`` remakes the cache from them."""

    exit_code = 11
    msg = "state cache error while trying to {}: {} (run 'objstore rebuild' to remake it from the objects)"


class AmbiguousRun(InvalidInput):
    """A run prefix that names more than one run."""

    msg = "ambiguous run {!r}: it matches {}"


class Interrupted(ObjstoreError):
    """Ctrl-C (SIGINT). Everything committed before it stays; nothing is half-written."""

    exit_code = 130
    msg = "interrupted"


class NewerFormat(ObjstoreError):
    """A stored object of a schema version newer than this objstore knows (written by a later
    release): refused on read, never guessed at. Exit 5, like ``StoreNeedsUpgrade``: the store is
    fine, this program is too old for it."""

    exit_code = 5
    msg = "newer format: {} {} has schema version {}; this objstore reads up to version {} (upgrade objstore to read it)"


class Erased(ObjstoreError):
    """The object was deleted or redacted by a recorded deletion (issue 17): its id stays in the
    log and commits to its content, its body is withheld, and after ``gc`` gone from every file."""

    exit_code = 12
    msg = "{} is erased"


class Redacted(Erased):
    """A redacted blob (``objstore redact``): every read of its body is refused, with the reason."""

    msg = "blob {} is redacted ({}): {}"


class Deleted(Erased):
    """An object of a deleted run, or a deleted record: withheld from every read, with the reason."""

    msg = "{} was deleted ({}): {}"


class BodyRemoved(Erased):
    """``gc`` removed this object's body (a deletion or redaction named it); its header stays."""

    msg = "the body of object {} was removed by gc after a recorded deletion"


class SnapshotGone(ObjstoreError):
    """A reader held a snapshot from before a ``gc`` that rewrote what it needed to read: it never
    reads wrong bytes; it reopens the store (or its snapshot) instead."""

    exit_code = 13
    msg = "the snapshot this read belongs to was rewritten by gc ({}); open the store again to read the current one"


class Busy(ObjstoreError):
    """A commit to object storage kept losing the compare-and-swap on the log's HEAD; nothing of it landed."""

    exit_code = 14
    msg = "busy: {} (the commit lost the race for HEAD {} times in {} s; nothing of it landed, retry later)"


class MultiLogBatch(ObjstoreError):
    """A commit writes one log (one run's, or the store log); this one spanned several. Nothing was written."""

    exit_code = 15
    msg = "a batch writes one run's log; this one touches {} ({}): nothing was written, commit each run on its own"


class IngestMultiLog(MultiLogBatch):
    """Events of several runs applied as one commit (``ingest.apply_events``) where a commit writes one run's log
    (a store with a log per run, object storage): refused, nothing written; the line names the way out."""

    msg = ("a commit writes one run's log; these events touch {} ({}): "
           "apply them run by run (ingest.apply_events_per_run, what 'objstore ingest' does)")
