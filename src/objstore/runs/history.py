"""What ``objstore log`` shows, as a library: lazy entries, time filters, text lines, the branch graph.

* ``entries`` walks a run's history newest first and lazily, like ``git log``: the first
  entries are read one object at a time (a ``log -n 3`` decodes about three objects, however
  long the run), and only a caller that keeps reading switches to whole-block decoding.
* ``parse_time`` reads ``--since``/``--until`` and, as ``now`` minus it, every AGE of ``gc``
  (``lifecycle.gc.parse_age``): the one time parser. ISO dates and times (local unless they carry
  an offset), ``@EPOCH``, ``now``, ``today``, ``yesterday``, and spans ago in every form git's
  approxidate and a duration take (``90s``, ``30m``, ``1h30m``, ``3d``, ``1.5d``, ``1w``,
  ``2 hours``, ``2 hours ago``, ``2.days``, ``1.week.ago``, ``3.months.ago``; months and years are
  calendar ones, as in git).
* ``record_line``/``fork_line``/``full_lines`` are the text forms (``--format oneline|full``
  and the default grouped layout); JSON shapes are ``views``'s, never defined here.
* ``graph`` draws every branch of a run like ``git log --graph --all``: fork points where they
  happen, the live branch and retained heads marked, each fork line with its reason and any
  compensation flags. It prints no times, so its output is a pure function of the objects.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import json
import math
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import InvalidInput
from ..storage import codec
from . import records as R

if TYPE_CHECKING:
    from ..storage.store import Store
    from .chain import ChainReader, View

EAGER = 64  # entries read object by object before a walk switches to decoding whole blocks


class HistoryItem(NamedTuple):
    """One item ``objstore log`` shows: a record, or the fork object at the root of ``branch`` (not an
    entry of the store's log: those are the storage engine's ``LogEntry``)."""

    branch: int
    record: R.Record | None
    fork: dict | None

    @property
    def time(self) -> float | None:
        return self.record.time if self.record is not None else (self.fork or {}).get("time")  # one of the two is set


# -- walking ------------------------------------------------------------------------------
class _Reader:
    """Reads chain objects: one at a time for the first ``EAGER``, then through the store's
    block decoding (which decodes a whole block of records at once)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.n = 0

    def get(self, oid: bytes) -> tuple[str, Any]:
        self.n += 1
        if self.n <= EAGER:
            return self.store.get_one(oid)
        return self.store.get_decoded(oid)


def entries(log: ChainReader, view: View, branch: int | None = None, *, all_branches: bool = False,
            since: float | None = None, until: float | None = None) -> Iterator[HistoryItem]:
    """``objstore log``'s entries newest first, read only as far as the caller consumes.

    Default: the live branch (or ``branch``), its fork object, then the parent's records from
    the fork point down, and so on to the root — git log through the fork, in one line.
    ``all_branches``: every branch's own records and fork, highest branch first.
    ``since``/``until`` (epoch seconds) keep entries whose time is in [since, until]."""
    reader = _Reader(log.store)

    def raw() -> Iterator[HistoryItem]:
        if all_branches:
            for b in sorted(view.heads, reverse=True):
                for item in log.walk(view.head(b), get=reader.get):
                    yield HistoryItem(b, None, item) if isinstance(item, dict) else HistoryItem(b, item, None)
            return
        b = view.live if branch is None else branch
        head = view.head(b)
        while head is not None:
            fk = None
            for item in log.walk(head, get=reader.get):
                if isinstance(item, dict):
                    fk = item
                    yield HistoryItem(b, None, item)
                else:
                    yield HistoryItem(b, item, None)
            if fk is None:
                return
            b, head = fk["parent_branch"], fk["parent_record"]

    try:
        for e in raw():
            t = e.time
            if since is not None and (t is None or t < since):
                continue
            if until is not None and (t is None or t > until):
                continue
            yield e
    finally:
        log.store.forget_decoded()


# -- times --------------------------------------------------------------------------------
_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hr": 3600, "hour": 3600,
          "d": 86400, "day": 86400, "w": 604800, "week": 604800}
_CALENDAR = {"mo": 1, "month": 1, "y": 12, "yr": 12, "year": 12}  # months per unit
_SPAN = re.compile(r"(?:\d+(?:\.\d+)?[a-z]+)+")  # after blanks and word dots are dropped: 1h30m, 1.5d, 2days, 1weekago
_PART = re.compile(r"(\d+(?:\.\d+)?)([a-z]+)")
_WORD_GAP = re.compile(r"\s+|(?<![0-9])\.|\.(?![0-9])")  # blanks, and dots not inside a number (2.days, not 1.5d)

_TIME_HELP = ("use an ISO date/time (2026-12-01, 2026-12-01 05:20), @EPOCH, now, today, yesterday, "
              "or a span ago (90s, 30m, 1h30m, 3d, 1w, 2.days.ago, 2 hours ago)")


def parse_time(text: str, now: float | None = None) -> float:
    """Epoch seconds of a ``--since``/``--until`` value (see the module docstring); InvalidInput
    for anything else, a time that is not finite or beyond what a clock can show (before year 1
    or after 9999) included."""
    if not isinstance(text, str):
        raise InvalidInput(f"a time is text ({_TIME_HELP}), got {type(text).__name__}")
    try:
        t = _parse_time(text, time.time() if now is None else now)
        _dt.datetime.fromtimestamp(t, _dt.timezone.utc)  # out of a calendar's range: refused, not "no entries"
    except (ValueError, OverflowError, OSError):
        t = math.nan
    if not math.isfinite(t):
        raise InvalidInput(f"cannot read time {text!r}: {_TIME_HELP}")
    return t


def _unit(name: str) -> str | None:
    # a plural of a word ("days", "hrs"), never of a one-letter unit ("ms" is not minutes)
    for cand in (name, name[:-1] if name.endswith("s") and len(name) > 2 else None):
        if cand and (cand in _UNITS or cand in _CALENDAR):
            return cand
    return None


def _span_ago(s: str, now: float) -> float | None:
    """``now`` minus a span (``1h30m``, ``2 days``, ``1.week.ago``, ``1.5d``), or None if ``s`` is not one.
    Fractions are for fixed units only (``1.5d``, ``0.5h``); months and years are whole calendar ones."""
    compact = _WORD_GAP.sub("", s)
    if compact.endswith("ago"):
        compact = compact[:-3]
    if not compact or not _SPAN.fullmatch(compact):
        return None
    seconds: float = 0
    months = 0
    for n, name in _PART.findall(compact):
        unit = _unit(name)
        if unit is None:
            return None
        if unit in _CALENDAR:
            if not n.isdigit():
                return None  # half a calendar month is no date
            months += int(n) * _CALENDAR[unit]
        else:
            seconds += (int(n) if n.isdigit() else float(n)) * _UNITS[unit]
    t = now - seconds
    if months:
        d = _dt.datetime.fromtimestamp(t)
        y, m = divmod(d.year * 12 + d.month - 1 - months, 12)
        day = min(d.day, calendar.monthrange(y, m + 1)[1])  # 31 March minus a month is 28/29 February
        t = d.replace(year=y, month=m + 1, day=day).timestamp()
    return t


def _parse_time(text: str, now: float) -> float:
    s = text.strip().lower()
    midnight = _dt.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if s == "now":
        return now
    if s == "today":
        return midnight.timestamp()
    if s == "yesterday":
        return (midnight - _dt.timedelta(days=1)).timestamp()
    if s.startswith("@"):
        return float(s[1:])  # ValueError, or nan/inf: refused by the caller
    ago = _span_ago(s, now)
    if ago is not None:
        return ago
    raw = text.strip()
    d = _dt.datetime.fromisoformat(raw[:-1] + "+00:00" if raw[-1:] in "zZ" and raw[:-1] else raw)
    return d.timestamp()  # naive: local time


def human_time(t: float | None) -> str:
    """Local time as ``2026-12-01 05:20:11`` (``-`` when unknown)."""
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


# -- text ---------------------------------------------------------------------------------
def summary(r: R.Record) -> str:
    """What a record says, in a few words."""
    b = r.body
    gone = R.deleted_by(r)
    if gone is not None:
        return f"deleted ({gone.hex()[:12]})"
    if r.kind == R.ATTEMPT:
        return f"step {b['step']} attempt {b['attempt']} {b['state']}"
    if r.kind == R.INTENT:
        return f"{b['intent']} {b['effect']} ({'idempotent' if b['idempotent'] else 'NOT idempotent'})"
    if r.kind == R.INTENT_COMMITTED:
        return str(b["intent"])
    if r.kind == R.RUN_FINISHED:
        return str(b["status"]) + (f": {b['error']}" if b.get("error") else "")
    if r.kind == R.RUN_STARTED:
        return f"subject {b['subject']} workflow {b['workflow_version']}"
    if r.kind.startswith("x."):  # an extension kind: its registered summary, if any (loaded only when one is shown)
        from . import xsummary

        x = xsummary.summarize(r.kind, b)
        if x is not None:
            return x
    return str(b.get("role", "") or b.get("task", "") or "")


def compensation_text(fk: dict) -> str:
    items = []
    for x in fk.get("compensation") or []:
        where = f", committed at lsn {x['committed_lsn']}" if x.get("committed_lsn") is not None else ""
        items.append(f"{x.get('intent')} ({x.get('effect')}, step {x.get('step')}{where})")
    return "COMPENSATION REQUIRED: " + "; ".join(items) if items else ""


def parent_text(fk: dict) -> str:
    """Where a fork object's branch comes from: a branch of its run, or (a copy) of another run."""
    src = f"run {fk['parent_run']} branch" if fk.get("parent_run") else "branch"
    return f"{'copied' if fk.get('parent_run') else 'forked'} from {src} {fk['parent_branch']} at lsn {fk['parent_lsn']}"


def fork_text(fk: dict) -> str:
    s = f"branch {fk['branch']} {parent_text(fk)}"
    if fk.get("reason"):
        s += f" ({fk['reason']})"
    comp = compensation_text(fk)
    return s + (f"  [{comp}]" if comp else "")


def record_line(r: R.Record, *, with_time: bool = True) -> str:
    """The default layout's line of a record (with its local time)."""
    when = f"  {human_time(r.time)}" if with_time else ""
    return f"lsn {r.lsn:<4} {r.kind:<16} {r.id.hex()[:12]}{when}  {summary(r)}"


def fork_line(fk: dict, *, with_time: bool = True) -> str:
    when = f"  {human_time(fk.get('time'))}" if with_time else ""
    return f"fork   {fk['id'].hex()[:12]}{when}  {fork_text(fk)}"


def oneline(e: HistoryItem) -> str:
    """``--format oneline``: short id, branch/lsn, kind, what."""
    if e.record is not None:
        r = e.record
        return f"{r.id.hex()[:12]} b{r.branch}/{r.lsn} {r.kind} {summary(r)}".rstrip()
    fk = e.fork
    assert fk is not None
    return f"{fk['id'].hex()[:12]} b{fk['branch']} fork {fork_text(fk)}"


def full_lines(e: HistoryItem, live: int) -> list[str]:
    """``--format full``: every field of the entry, body as indented JSON, then a blank line."""
    if e.record is not None:
        r = e.record
        out = [f"record {r.id.hex()}",
               f"Run:     {r.run}",
               f"Branch:  {r.branch}{' (live)' if r.branch == live else ''}   LSN: {r.lsn}",
               f"Kind:    {r.kind}",
               f"Parent:  {r.parent.hex() if r.parent else '-'}",
               f"Date:    {human_time(r.time)}",
               ""]
        body = json.dumps(codec.to_jsonable(r.body), indent=2, sort_keys=True, ensure_ascii=False)
        out += ["    " + line for line in body.splitlines()]
    else:
        fk = e.fork
        assert fk is not None
        out = [f"fork {fk['id'].hex()}",
               f"Run:     {fk['run']}",
               f"Branch:  {fk['branch']}{' (live)' if fk['branch'] == live else ''} {parent_text(fk)}",
               f"Parent record: {fk['parent_record'].hex()}",
               f"Parent head:   {fk['parent_head'].hex()}",
               f"Date:    {human_time(fk.get('time'))}",
               "",
               f"    reason: {fk.get('reason') or '-'}"]
        comp = compensation_text(fk)
        if comp:
            out.append("    " + comp)
    return out + [""]


# -- graph --------------------------------------------------------------------------------
def graph(log: ChainReader, view: View) -> Iterator[str]:
    """``log --graph``: every branch of the run as a tree, newest first, one line per record or fork.

    The live lineage is the leftmost column; at each fork point the branch that was left (its
    records after the fork point) and every other fork hang off the record they start from, so
    what was abandoned shows beside what replaced it. Each branch head is marked — the live
    one ``LIVE``, the others ``retained`` — and each fork line carries its reason and any
    compensation flags. No times: the output depends on the objects only."""
    nodes: dict[bytes, R.Record | dict] = {}
    parent: dict[bytes, bytes | None] = {}
    children: dict[bytes | None, list[bytes]] = {}
    for b in sorted(view.heads):
        own, fk = log.chain(view.head(b))
        items: list = ([fk] if fk is not None else []) + own
        for it in items:
            oid = it["id"] if isinstance(it, dict) else it.id
            # a copy's cross-run fork is this run's root: its parent record is the source run's
            p = (None if it.get("parent_run") else it["parent_record"]) if isinstance(it, dict) else it.parent
            nodes[oid] = it
            parent[oid] = p
            children.setdefault(p, []).append(oid)
    heads = {h: b for b, h in view.heads.items()}
    live_path = set()
    oid = view.head(view.live)
    while oid is not None:
        live_path.add(oid)
        oid = parent.get(oid)

    def branch_of(oid: bytes) -> int:
        it = nodes[oid]
        return it["branch"] if isinstance(it, dict) else it.branch

    def order(kids: list[bytes]) -> list[bytes]:
        # the live lineage first (leftmost), then the newest branch first
        return sorted(kids, key=lambda k: (k not in live_path, -branch_of(k)))

    roots = order(children.get(None, []))
    seq: list[bytes] = []
    stack: list[tuple[bytes, bool]] = [(r, False) for r in reversed(roots)]
    while stack:  # post-order: each child's whole subtree, then the node (newest first)
        oid, done = stack.pop()
        if done:
            seq.append(oid)
            continue
        stack.append((oid, True))
        for kid in reversed(order(children.get(oid, []))):
            stack.append((kid, False))

    lanes: list[bytes | None] = []  # what each column waits for: the parent of its last node
    for oid in seq:
        cols = [i for i, w in enumerate(lanes) if w == oid]
        if not cols:
            lanes.append(oid)
            col = len(lanes) - 1
        else:
            col = cols[0]
            for k in reversed(cols[1:]):
                yield _collapse(len(lanes), k)
                del lanes[k]
        prefix = " ".join("*" if i == col else "|" for i in range(len(lanes)))
        yield f"{prefix} {_node_text(nodes[oid], heads.get(oid), view.live)}".rstrip()
        if parent[oid] is None:
            del lanes[col]
        else:
            lanes[col] = parent[oid]


def _collapse(n: int, k: int) -> str:
    """The line that merges column ``k`` into ``k - 1`` (columns after it move left too)."""
    chars = [" "] * (2 * n)
    for j in range(n):
        if j < k:
            chars[2 * j] = "|"
        else:
            chars[2 * j - 1] = "/"
    return "".join(chars).rstrip()


def _node_text(it: R.Record | dict, head_of: int | None, live: int) -> str:
    mark = ""
    if head_of is not None:
        mark = f"  <- branch {head_of} " + ("(LIVE)" if head_of == live else "(retained, not live)")
    if isinstance(it, dict):
        return f"{it['id'].hex()[:12]} fork   {fork_text(it)}{mark}"
    return f"{it.id.hex()[:12]} b{it.branch}/{it.lsn:<3} {it.kind:<16} {summary(it)}{mark}"
