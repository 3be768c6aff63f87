"""Naming runs by their labels on the command line: ``thread_id=T`` or ``k=v,k2=v2``.

This module owns the label spec — its grammar (``parse``), how it is told from a run id
(``is_label_spec``), and what run it names (``resolve_labels``) — for ``objstore runs --label`` and
for every RUN argument (``objstore_cli.params.RunType``). The labels themselves, and finding runs
by them, are ``runs.labels`` (``ChainReader.find_run`` / ``find_runs``).

Grammar: ``name=value`` pairs separated by ``,``; the first unescaped ``=`` of a pair ends its
name (a value may hold further ``=``); a backslash escapes the next ``,``, ``=`` or ``\\`` (no other
character), so any label can be written: ``path=a\\,b`` is the value ``a,b``. A value may be empty
(``checkpoint_ns=``: LangGraph's root namespace); a name may not, nor appear twice. A run id is
``[A-Za-z0-9_.-]`` only, so a text with an unescaped ``=`` is never an id: it is a label spec.

Resolution: the run whose labels are exactly these (its id is computed, no search) wins; else the
one live run whose labels include all of them; else, when those runs differ only in one label the
spec does not give and exactly one has it empty, that one (the namespace rule, ``root_namespace``:
``thread_id=T`` names a LangGraph thread's root namespace, not its subgraphs'); several others →
``AmbiguousRun`` (exit 5) naming the candidates with their labels; none → ``RunNotFound`` (exit 4).
Deleted runs are never found.
Reads: the refs of the computed id, the label rows of the index and the ``run_started`` records of
the matches (``runs.labels``), plus the labels of at most ``MAX_CANDIDATES`` candidates to name them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import AmbiguousRun, InvalidInput, RunNotFound
from . import labels as L
from .labels import check_labels
from .resolve import MAX_CANDIDATES, ambiguity_text

if TYPE_CHECKING:
    from .chain import ChainReader

_ESCAPABLE = ",=\\"


def is_label_spec(text: object) -> bool:
    """Whether a RUN argument is a label spec: it has an ``=`` that no backslash escapes."""
    if not isinstance(text, str):
        return False
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "=":
            return True
    return False


def _split(text: str, spec: str) -> list[list[tuple[str, bool]]]:
    """``text`` cut at unescaped commas into pairs; each pair is a list of (character, was escaped)."""
    pairs: list[list[tuple[str, bool]]] = [[]]
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, None)
            if nxt is None or nxt not in _ESCAPABLE:
                shown = "a trailing '\\'" if nxt is None else f"'\\{nxt}'"
                raise InvalidInput(f"label spec {spec!r}: {shown} (a backslash escapes only ',', '=' or '\\')")
            pairs[-1].append((nxt, True))
        elif ch == ",":
            pairs.append([])
        else:
            pairs[-1].append((ch, False))
    return pairs


def parse(spec: str) -> dict[str, str]:
    """The labels a spec names (InvalidInput for a malformed spec, with what is wrong)."""
    if not isinstance(spec, str) or not spec:
        raise InvalidInput("a label spec is name=value[,name=value...]")
    out: dict[str, str] = {}
    for pair in _split(spec, spec):
        at = next((i for i, (ch, esc) in enumerate(pair) if ch == "=" and not esc), None)
        if at is None:
            shown = "".join(ch for ch, _ in pair)
            raise InvalidInput(f"label spec {spec!r}: {shown!r} is not name=value (a ',' inside a value is written '\\,')")
        name = "".join(ch for ch, _ in pair[:at])
        value = "".join(ch for ch, _ in pair[at + 1:])
        if not name:
            raise InvalidInput(f"label spec {spec!r}: a label needs a name before '='")
        if name in out:
            raise InvalidInput(f"label spec {spec!r}: label {name!r} given twice")
        out[name] = value
    return check_labels(out, f"label spec {spec!r}")


def show(labels: dict[str, str]) -> str:
    """Labels written as a spec (sorted by name, escaped): what ``parse`` reads back to them."""

    def esc(s: str) -> str:
        return "".join("\\" + ch if ch in _ESCAPABLE else ch for ch in s)

    return ",".join(f"{esc(k)}={esc(v)}" for k, v in sorted(labels.items()))


def matching_runs(log: ChainReader, labels: dict[str, str]) -> list[str]:
    """Every live run whose labels include all of ``labels``, newest first (``find_runs``).

    Through ``runs.labels`` with the labels as a map, not ``log.find_runs(**labels)``: a label may
    be named anything, ``self`` too (a keyword argument of that name was a TypeError traceback)."""
    return L.find_runs(log.store, labels)


def root_namespace(log: ChainReader, spec: dict[str, str], found: list[str]) -> str | None:
    """Of several runs a spec matches, the one the namespace rule names, or None: the runs carry
    the same label names and agree on every label but one (a label the spec does not give), and
    exactly one of them has that label empty — the root, the others its namespaces (LangGraph's
    ``checkpoint_ns``: a subgraph's checkpoints are a run of their own beside the thread's). Reads
    the labels of every match (the ``run_started`` record each)."""
    got = {r: log.run_labels(r) for r in found}
    names = {frozenset(lab) for lab in got.values()}
    if len(names) != 1:
        return None
    varying = [k for k in next(iter(names)) - spec.keys() if len({lab[k] for lab in got.values()}) > 1]
    if len(varying) != 1:
        return None
    empty = [r for r, lab in got.items() if lab[varying[0]] == ""]
    return empty[0] if len(empty) == 1 else None


def namespace_root(labels: dict[str, str], live: Mapping[str, str]) -> str | None:
    """The run a run with ``labels`` is a namespace of (the same labels, one non-empty value empty
    there: ``root_namespace``'s rule read from the other side), or None. ``live`` maps the
    generation-0 id of each live labelled run (``L.run_id``; a later generation's id is that plus
    ``-<g>``) to the run: the lookup is computed ids, no read (``runs`` does it for every run)."""
    for k, v in labels.items():
        if v != "":
            top = live.get(L.run_id({**labels, k: ""}))
            if top is not None:
                return top
    return None


def by_first_generation(runs: Iterable[str]) -> dict[str, str]:
    """{the generation-0 id of a labelled run: the run} of ``runs`` (for ``namespace_root``)."""
    return {r[:len(L.PREFIX) + 48]: r for r in runs if L.is_label_id(r)}


def resolve_labels(log: ChainReader, spec: str) -> str:
    """The one run a label spec names (module docstring); RunNotFound, AmbiguousRun or InvalidInput."""
    labels = parse(spec)
    exact = L.find_run(log.store, labels)  # a map, not **labels: see matching_runs
    if exact is not None:
        return exact
    found = matching_runs(log, labels)
    if len(found) == 1:
        return found[0]
    if not found:
        raise RunNotFound(f"no run has the labels {show(labels)}")
    top = root_namespace(log, labels, found)
    if top is not None:
        return top
    named = [f"{r} ({show(log.run_labels(r))})" for r in found[:MAX_CANDIDATES]] + found[MAX_CANDIDATES:]
    raise AmbiguousRun(spec, f"{len(found)} runs: {ambiguity_text(named)}")
