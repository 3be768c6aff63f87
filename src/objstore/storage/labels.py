"""Labels: outside names of runs and records, and the index keys they are found by.

A label is a pair of strings (``thread_id`` = ``T``). A run's labels determine its id
(``runs.labels.run_id``); a record's labels (an outside id such as a checkpoint id) are rows of
the log's own index: each labelled record's index row in its entry's meta carries its labels
(docs/FORMAT.md, format 5), and a sealed segment's index holds, beside the chain rows, one
**label row** per label: ``key(16) · u64 entry number · record id``, where

    key = BLAKE3("L\\0" + scope + "\\0" + escape(name) + "=" + escape(value))[:16]

and scope is the record's run (record labels), or the empty string for the labels of a
``run_started`` record (run labels, found store-wide). A chain row's key hashes
``"<run>\\0<branch>"``, one NUL and no more, so the two kinds of key never meet. ``escape`` is
RFC 3986 percent-encoding of the UTF-8 bytes of every character outside ``A-Z a-z 0-9 - . _ ~``,
so any string is a label and ``name=value`` pairs joined by ``&`` are injective.

This module owns the escaping, the canonical label list ``[[name, value], …]`` (sorted by name)
and the keys; it decides nothing about runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import blake3

STORE_SCOPE = ""  # the scope of run labels: found store-wide, not within one run
MAX_LABELS = 16
MAX_LABEL_CHARS = 1024


_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")  # what quote() leaves as it is: such a text is its own escape


def escape(text: str) -> str:
    if _UNRESERVED.fullmatch(text):
        return text  # most labels (ids, names): no call into quote, which a replay makes once per label
    return quote(text, safe="-._~")


def canonical(labels: Any) -> list[list[str]] | None:
    """The canonical label list of a stored ``labels`` map, or None if it is not a non-empty map of
    at most MAX_LABELS non-empty string names to string values (what an index row may carry)."""
    if type(labels) is not dict or not labels or len(labels) > MAX_LABELS:
        return None
    out = []
    for k, v in labels.items():
        if type(k) is not str or type(v) is not str or not k or len(k) > MAX_LABEL_CHARS or len(v) > MAX_LABEL_CHARS:
            return None
        out.append([k, v])
    out.sort()
    return out


def rows_ok(rows: Any) -> bool:
    """Whether ``rows`` is a canonical label list (the shape an entry's meta may carry)."""
    if type(rows) is not list or not rows or len(rows) > MAX_LABELS:
        return False
    last = None
    for r in rows:
        if (type(r) is not list or len(r) != 2 or type(r[0]) is not str or type(r[1]) is not str or not r[0]
                or len(r[0]) > MAX_LABEL_CHARS or len(r[1]) > MAX_LABEL_CHARS or (last is not None and r[0] <= last)):
            return False
        last = r[0]
    return True


def pair_text(name: str, value: str) -> str:
    return escape(name) + "=" + escape(value)


def set_text(rows: list[list[str]]) -> str:
    """The escaped label set: ``name=value`` pairs of the canonical list joined by ``&``."""
    return "&".join(pair_text(k, v) for k, v in rows)


def key(scope: str, name: str, value: str) -> bytes:
    """The index key of one label in one scope (a run id, or STORE_SCOPE)."""
    return blake3.blake3(("L\x00" + scope + "\x00" + pair_text(name, value)).encode()).digest()[:16]


def index_keys(run: str, branch: int, lsn: int, kind: str, rows: list[list[str]]) -> list[bytes]:
    """Every key a labelled record is found by: its labels within its run, and for a run's
    ``run_started`` record (LSN 0 of branch 0) its labels store-wide too."""
    keys = [key(run, k, v) for k, v in rows]
    if kind == "run_started" and branch == 0 and lsn == 0:
        keys.extend(key(STORE_SCOPE, k, v) for k, v in rows)
    return keys


# -- the run id a label set gives: one rule, applied wherever an entry is (engine's plan) and by runs.labels --

RUN_PREFIX = "l-"  # the ids of labelled runs; reserved: an unlabelled run never takes one


def run_id_of(rows: list[list[str]], generation: int = 0) -> str:
    """The id of the run a canonical label list names: ``l-`` + 48 hex digits of BLAKE3 of the escaped
    set, and ``-<g>`` for generation g ≥ 1."""
    base = RUN_PREFIX + blake3.blake3(set_text(rows).encode()).hexdigest()[:48]
    return base if generation == 0 else f"{base}-{generation}"


def generation_of(run: str, rows: list[list[str]]) -> int | None:
    """The generation of ``run`` among the runs of these labels, or None if the labels do not give it."""
    base = run_id_of(rows)
    if run == base:
        return 0
    g = run[len(base) + 1:] if run.startswith(base + "-") else ""
    return int(g) if g.isdigit() and g.isascii() and g[0] != "0" else None


def run_labels_problem(run: str, rows: list[list[str]] | None) -> str | None:
    """What is wrong with a run's ``run_started`` labels (a canonical list, None: no labels) for its id:
    a labelled run's id is the one its labels give, and an ``l-`` id belongs to a labelled run only."""
    if rows is None:
        return f"run id {run} is a labelled run's id, but its run_started record has no labels" if run.startswith(RUN_PREFIX) else None
    if generation_of(run, rows) is None:
        want = run_id_of(rows)
        return f"its labels give run id {want} (or {want}-<generation>), not {run}"
    return None


def live_earlier_generation(run: str, rows: list[list[str]], deleted: Callable[[str], bool]) -> int | None:
    """The first generation of these labels before ``run`` that is not a deleted run (``deleted``
    says which runs are), or None. A live one beside ``run`` would make two runs of one label set."""
    g = generation_of(run, rows)
    return next((k for k in range(g or 0) if not deleted(run_id_of(rows, k))), None)


def birth_problem(run: str, rows: list[list[str]] | None, deleted: Callable[[str], bool]) -> str | None:
    """The rule of creating a run (its ``run_started`` at LSN 0 of branch 0), judged from the record's
    index row alone: its labels give its id, and generation g ≥ 1 stands only beside deleted runs
    of generations 0 … g−1 (a deleted run's id is never used again)."""
    bad = run_labels_problem(run, rows)
    if bad is not None or rows is None:
        return bad
    k = live_earlier_generation(run, rows, deleted)
    if k is None:
        return None
    return f"run {run} is generation {generation_of(run, rows)} of its labels, but generation {k} ({run_id_of(rows, k)}) is not a deleted run"
