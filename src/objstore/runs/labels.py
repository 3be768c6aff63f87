"""Labelled runs and records: the run id a label set determines, and finding by label.

A run may carry outside names (``thread_id``, ``checkpoint_ns``): its **labels**, stored in its
``run_started`` record's payload (``labels``). They determine its id: ``l-`` and the first 48 hex
digits of BLAKE3 of the escaped label set (``storage.labels.set_text``), so creating the run with
expect-absent *is* the labels' uniqueness — two processes starting the same thread make one run
and one ``Conflict``. A record may carry labels too (an outside id such as a checkpoint id); many
records of a run may share one.

Finding reads only what it returns: ``find_run`` computes the id (no read but the run's refs);
``find_runs`` and ``find_records`` look the label rows up in the log's own index
(``Store.label_rows``: the tail's rows and one binary search per sealed segment's index), then
read just the records those rows name. A row is a claim, checked against the record it names
(run, kind, labels) before the record is returned, so a forged row changes no answer; a record a
recorded deletion covers, or of a deleted run, is not found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import Erased, InvalidInput, ObjectNotFound, SnapshotGone
from ..storage import codec
from ..storage import labels as L
from ..storage.runrefs import branch_ref, deleted_ref
from ..storage.store import Store

PREFIX = L.RUN_PREFIX  # the ids of labelled runs; reserved: an unlabelled run never takes one


def check_labels(labels: object, what: str = "labels") -> dict[str, str]:
    """A caller's labels as stored: a non-empty map of non-empty string names to string values
    (any text: they are escaped in every key), at most 16, each at most 1024 characters."""
    if not isinstance(labels, Mapping) or not labels:
        raise InvalidInput(f"{what} must be a non-empty map of names to values")
    out: dict[str, str] = {}
    for k, v in labels.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidInput(f"{what}: a label is a non-empty name and a string value, got {k!r}={v!r}")
        codec.check_text(k, f"{what} name")
        codec.check_text(v, f"{what} value")
        out[k] = v
    if L.canonical(out) is None:
        raise InvalidInput(f"{what}: at most {L.MAX_LABELS} labels, names and values of at most {L.MAX_LABEL_CHARS} characters")
    return out


def run_id(labels: Mapping[str, str], generation: int = 0) -> str:
    """The id of the run these labels name: ``l-`` + 48 hex digits of BLAKE3 of the escaped set,
    and ``-<g>`` for generation g ≥ 1 (``storage.labels.run_id_of``). A deleted run's id is never
    used again (its refs are write-once), so the labels of a deleted run name the next generation's
    run: ``find_run`` and ``start_run`` step past deleted generations."""
    rows = L.canonical(dict(labels))
    if rows is None:
        raise InvalidInput("labels must be a non-empty map of names to values")
    return L.run_id_of(rows, generation)


def generations(store: Store, labels: Mapping[str, str]) -> tuple[str, bool]:
    """(run id, exists) of the first generation of these labels that is not a deleted run."""
    g = 0
    while True:
        run = run_id(labels, g)
        if not _deleted(store, run):
            return run, store.read_ref(branch_ref(run, 0)) is not None
        g += 1


def is_label_id(run: str) -> bool:
    return run.startswith(PREFIX)


def _payload(store: Store, oid: bytes) -> dict | None:
    """A record's payload, or None if it is not a readable record (erased, missing, another type)."""
    try:
        otype, p = store.get(oid)
    except (Erased, ObjectNotFound, SnapshotGone):  # deleted or redacted, its body gone at gc, or removed meanwhile
        return None
    return p if otype == codec.RECORD and isinstance(p, dict) else None


def _has(p: dict, want: dict[str, str]) -> bool:
    got = p.get("labels")
    return type(got) is dict and all(got.get(k) == v for k, v in want.items())


def _deleted(store: Store, run: str) -> bool:
    """Whether ``run`` is a deleted run, for a look-up that obeys it (its deletion checked: Store.obey_deletion)."""
    gone = store.read_ref(deleted_ref(run))
    if gone is None:
        return False
    store.obey_deletion(deleted_ref(run), gone)
    return True


def _live(store: Store, run: str) -> bool:
    return store.read_ref(branch_ref(run, 0)) is not None and not _deleted(store, run)


def find_run(store: Store, labels: Mapping[str, str]) -> str | None:
    """The live run with exactly these labels, or None."""
    run, exists = generations(store, check_labels(labels))
    return run if exists else None


def _candidates(store: Store, scope: str, want: dict[str, str]) -> list[tuple[int, bytes]]:
    """(entry, record id) the label rows name for every pair of ``want`` in ``scope``."""
    found: dict[bytes, int] | None = None
    for k, v in want.items():
        rows = {oid: n for n, oid in store.label_rows(L.key(scope, k, v), run=scope or None)}
        found = rows if found is None else {oid: n for oid, n in found.items() if oid in rows}
        if not found:
            return []
    return [(n, oid) for oid, n in (found or {}).items()]


def find_runs(store: Store, labels: Mapping[str, str]) -> list[str]:
    """Every live run whose labels include all of ``labels``, newest start first."""
    want = check_labels(labels)
    out = []
    for _n, oid in sorted(_candidates(store, L.STORE_SCOPE, want), reverse=True):
        p = _payload(store, oid)
        if (p is None or p.get("kind") != "run_started" or p.get("branch") != 0 or p.get("lsn") != 0 or not _has(p, want)
                or type(p.get("run")) is not str or check_run_labels(p["run"], p["labels"]) is not None):
            continue
        run = p["run"]
        if (_live(store, run) and run not in out
                and live_earlier_generation(run, p["labels"], lambda r: _deleted(store, r)) is None):
            out.append(run)
    return out


def live_earlier_generation(run: str, labels: dict, deleted: Callable[[str], bool]) -> int | None:
    """The first generation of these labels before ``run`` that is not a deleted run (``deleted``
    says which runs are), or None. A live one beside ``run`` would make two runs of one label set:
    the entry creating ``run`` is refused (``storage.labels.birth_problem``, a rule of applying it),
    and verify names it."""
    rows = L.canonical(labels)
    return None if rows is None else L.live_earlier_generation(run, rows, deleted)


def generation_of(run: str, labels: dict) -> int | None:
    rows = L.canonical(labels)
    return None if rows is None else L.generation_of(run, rows)


def find_records(store: Store, run: str, labels: Mapping[str, str]) -> list[tuple[bytes, dict]]:
    """(id, payload) of every record of ``run`` carrying all of ``labels``, newest commit first."""
    want = check_labels(labels)
    got = []
    for n, oid in _candidates(store, run, want):
        p = _payload(store, oid)
        if p is not None and p.get("run") == run and _has(p, want):
            got.append(((n, p.get("lsn"), p.get("branch")), oid, p))
    got.sort(key=lambda g: g[0], reverse=True)  # newest commit first; within one commit, the later LSN first
    return [(oid, p) for _k, oid, p in got]


def labels_of(payload: dict) -> dict[str, str]:
    got = payload.get("labels")
    return dict(got) if type(got) is dict else {}


def check_run_labels(run: str, labels: Any) -> str | None:
    """What is wrong with a stored run_started record's labels for its run id, or None: a labelled
    run's id is the one its labels give, and an ``l-`` id belongs to a labelled run only
    (``storage.labels.run_labels_problem``)."""
    if labels is None:
        return L.run_labels_problem(run, None)
    rows = L.canonical(labels)
    if rows is None:
        return "field 'labels' must be a non-empty map of at most 16 names to string values"
    return L.run_labels_problem(run, rows)
