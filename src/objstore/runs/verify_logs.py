"""Verify over a store with a log per run (format 6): every log proved on its own, the catalog against the logs.

The store log first, then every run's log, each by one pass of objstore.runs.verify (``verify_log``, handed in: its
entries, chain checksum, index files, witness, objects, and the run model of that run read from its own log),
one run at a time: a run's log is released once checked, so memory does not grow with the number of runs.
What a run's log names in another log (a copy's source record, a deleted source) is read from that log.

The runs walked are those the catalog names (``catalog/ids/<xx>/``) and those with a directory
(``runs/<xx>/``), shard by shard. Beside each log's own findings it names, one line each:

* ``missing-run-log <run>`` — the catalog lists the run, its log directory is gone (a problem);
* ``uncatalogued-run <run>`` — a log holding entries with no catalog entry: listings and ``latest`` miss it;
* ``catalog-mismatch <run>`` — the catalog entry disagrees with the run's ``run_started`` record (subject,
  labels, copy_of) or with its log (a time after the log's first entry: the entry is written before it), or its
  order name is missing (listings miss the run);
* ``bad-catalog-entry <run>`` — an entry that does not read, or names another run;
* ``wrong-run-log <run>`` — the log at a run's place holds another run's refs (swapped or moved logs);
* ``bad-cite run/<R>/cite`` — the store-log position a run's entries cite is not in the store log (rolled back
  or rewritten under them);
* the note ``unstarted-run <run>`` — a log with no entry (a ``start_run`` killed before its first commit,
  with or without its catalog entry): listings skip it; it does not fail verify.

Anchors (objstore.runs.anchor_manifest): a token of version 2 names a store-log entry holding a manifest of
every log's head; each listed log must still extend its head, else one line: ``anchor-rolled-back``,
``anchor-truncated``, ``anchor-rewritten``, ``anchor-removed`` or ``anchor-swapped``, naming the log
(``store`` or ``run/<R>``). A token of version 1 names an entry of the store log (checked as on one log).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import CorruptLog, ObjstoreError, StorageOSError
from ..storage import codec, runrefs
from ..storage import labels as L
from ..storage.log.witness import REPAIRS_REF
from ..storage.runlogs.catalog import CatalogEntry, order_key, shard
from ..storage.runlogs.logs import CATALOG, RUNS, RunLogs, run_dir
from . import anchor_manifest as M
from .anchors import parse_anchor
from .verify_report import Problem, Report

if TYPE_CHECKING:
    from ..storage.log.engine import Engine
    from .api import RunLog

CITE_SUMS_MAX = 1 << 20  # store-log entries whose checksums are kept for the cites (beyond: read when cited)
OneLogPass = Callable[..., Report]  # verify.verify_log(log, engine, run, check_state, want, progress, jobs, watch, seen)



def walk_runs(root: str) -> Iterator[tuple[str, str, bool, bool]]:
    """(shard dir, run, catalogued, has a log directory) of every run the catalog or ``runs/`` names, shard by shard."""
    ids_dir, runs_dir = os.path.join(root, CATALOG, "ids"), os.path.join(root, RUNS)
    for xx in sorted(set(_ls(ids_dir)) | set(_ls(runs_dir))):
        ids = set(_ls(os.path.join(ids_dir, xx)))
        dirs = {n for n in _ls(os.path.join(runs_dir, xx)) if not n.startswith(".")}  # .<run>.new-…: a creation's staging
        for run in sorted(ids | dirs):
            yield xx, run, run in ids, run in dirs


def _ls(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise StorageOSError(f"list {d}", e) from None


class _Pass:
    """One verify of a store of format 6: its findings, and what the anchors want of each log."""

    def __init__(self, log: RunLog, check_state: bool, progress: Callable[[int, int], None] | None, jobs: int | None,
                 verify_log: OneLogPass) -> None:
        self.log = log
        self.verify_log = verify_log
        self.logs: RunLogs = log.store.logs  # type: ignore[assignment]
        self.root = self.logs.root
        self.remote: Any = self.logs if getattr(self.logs, "bucket", None) is not None else None  # a store on object storage (BucketLogs)
        self.check_state, self.jobs = check_state, jobs
        self.progress = progress
        self.done = [0, 0]  # objects, bytes of the logs before this one (progress is cumulative)
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []
        self.entries = self.objects = self.n_logs = 0
        self.checksum = b""
        self.store_count = 0  # the store log's last entry read, and its entries' checksums (for cites)
        self.store_sums: dict[int, bytes] = {}
        self.manifest: dict[str, list[tuple[int, bytes]]] = {}  # leaf name -> the heads (entry, checksum) v2 anchors name

    def _progress(self) -> Callable[[int, int], None] | None:
        if self.progress is None:
            return None
        f, base = self.progress, tuple(self.done)
        return lambda n, b: f(base[0] + n, base[1] + b)

    def one_log(self, engine: Engine, run: str | None, want: list[tuple[int, bytes]], watch: list[int]) -> tuple[Report, dict]:
        seen: dict = {}
        r = self.verify_log(self.log, engine, run, self.check_state, want, self._progress(), self.jobs, watch, seen)
        where = self._where(engine) if self.remote is not None or getattr(engine, "root", None) else ""
        self.problems.extend(p._replace(where=p.where or where) for p in r.problems)
        self.notes.extend(p._replace(where=p.where or where) for p in r.notes)
        self.entries += r.entries
        self.objects += r.objects
        self.n_logs += 1
        self.done[0] += r.objects
        self.done[1] += seen.get("bytes", 0)
        return r, seen

    def add(self, code: str, subject: str, where: str, detail: str) -> None:
        self.problems.append(Problem(code, subject, where, detail))

    # -- the store log, and the manifests its anchors name --------------------------------------------------
    def store_log(self, tokens: list[str]) -> None:
        v1 = [parse_anchor(t) for t in tokens if not M.is_manifest_token(t)]
        v2 = [M.parse_manifest_token(t) for t in tokens if M.is_manifest_token(t)]
        engine = self.logs.store_log
        # every store-log entry's checksum, for the positions run logs cite (a store log holds the store-wide refs
        # only: grants, schemas, anchors — small beside the runs)
        upto = engine.refresh().entry
        every = range(1, upto + 1) if upto <= CITE_SUMS_MAX else range(0)
        r, seen = self.one_log(engine, None, v1, [*every, *(n for n, _c, _r in v2)])
        self.unnamed_keys(engine, None)
        self.checksum = r.checksum
        self.store_count, self.store_sums = seen.get("count", r.entries), seen.get("sums", {})
        for entry, checksum, root in v2:
            bad = self.judge(M.STORE_LEAF, engine, (entry, checksum), seen, r)
            if bad is not None:
                continue  # the manifest's entry is not the one anchored: the logs it lists cannot be judged from here
            oid = M.find_manifest(self.log.store, entry)
            try:
                if oid is None:
                    raise ValueError(f"entry {entry} of the store log holds no anchor manifest")
                leaves, _prev, got = M.read_manifest(self.log.store, oid)
            except (ObjstoreError, ValueError) as e:
                self.add("anchor-rewritten", M.STORE_LEAF, self._where(engine), f"the anchored manifest does not read: {e}")
                continue
            if got != root:
                self.add("anchor-rewritten", M.STORE_LEAF, self._where(engine), f"the manifest at entry {entry} has root {got.hex()}, "
                         f"the anchor names {root.hex()}")
                continue
            for name, n, c in leaves:
                if name == M.STORE_LEAF:
                    self.judge(name, engine, (n, c), seen, r, watched=False)
                elif (n, c) not in self.manifest.setdefault(name, []):
                    self.manifest[name].append((n, c))

    def _where(self, engine: Engine) -> str:
        if self.remote is not None:
            return getattr(engine, "bucket").url  # noqa: B009  (an S3 log: its keys' prefix)
        return os.path.join(getattr(engine, "root", ""), "log")

    def _run_where(self, run: str, log: bool = True) -> str:
        """Where run ``run``'s log is, as a line names it: its directory (``log``: its log files), or its key prefix."""
        if self.remote is not None:
            return self.remote.run_url(run)
        d = run_dir(self.root, run)
        return os.path.join(d, "log") if log else d

    def judge(self, name: str, engine: Engine, want: tuple[int, bytes], seen: dict, r: Report, watched: bool = True) -> tuple | None:
        """The anchor line for log ``name`` if it no longer extends the head ``want`` (None: it does)."""
        n, checksum = want
        count = seen.get("count", r.entries)
        sums = seen.get("sums", {})
        where = self._where(engine)
        if n == 0:
            return None
        if count >= n and n in sums:
            if sums[n] == checksum:
                return None
            p = Problem("anchor-rewritten", name, where, f"entry {n} has checksum {sums[n].hex()}, the anchor names {checksum.hex()}")
        elif count >= n:  # (an entry read but not watched: the store leaf of a manifest past the entries watched)
            got = _checksum_at(engine, n)
            if got == checksum:
                return None
            p = Problem("anchor-rewritten", name, where, f"entry {n} has checksum {got.hex() if got else '(unread)'}, "
                        f"the anchor names {checksum.hex()}")
        else:
            # a log whose own pass found damage (a cut entry, a missing segment, a witness it falls short of) or a
            # torn tail was cut; a sound log that ends early is an older copy put back
            damaged = bool(r.problems) or any(q.code == "torn-tail" for q in r.notes)
            code = "anchor-truncated" if damaged else "anchor-rolled-back"
            p = Problem(code, name, where, f"the log ends at entry {count}, the anchor names entry {n} ({checksum.hex()})")
        self.problems.append(p)
        return p

    # -- the runs ------------------------------------------------------------------------------------------
    def runs(self, only: set[str] | None = None) -> None:
        if only is not None:
            walk = self.named(sorted(only))
        else:
            walk = self.remote.walk_runs() if self.remote is not None else walk_runs(self.root)
        for xx, run, catalogued, has_dir in walk:
            try:
                self.one_run(xx, run, catalogued, has_dir)
            finally:
                self.logs.release()
        for name, heads in sorted(self.manifest.items()):  # listed, and neither catalogued nor on disk
            if only is not None and name[len(M.RUN_LEAF):] not in only:
                continue
            for n, c in heads:
                self.add("anchor-removed", name, "", f"the log is gone; the anchor names its entry {n} ({c.hex()})")

    def named(self, runs: list[str]) -> Iterator[tuple[str, str, bool, bool]]:
        """What ``walk_runs`` says of these runs only (``verify RUN``: no listing of every run)."""
        for run in runs:
            if self.remote is not None:
                yield shard(run), run, self.logs.catalog.entry(run) is not None, self.remote.has_log(run)
            else:
                yield shard(run), run, os.path.exists(self.logs.catalog.id_path(run)), os.path.isdir(run_dir(self.root, run))

    def one_run(self, xx: str, run: str, catalogued: bool, has_dir: bool) -> None:
        d = self._run_where(run, log=False)
        if shard(run) != xx:
            where = os.path.join(self.root, RUNS if has_dir else os.path.join(CATALOG, "ids"), xx, run)
            if self.remote is not None:
                where = self.remote.run_url(run, xx)
            self.add("misplaced-run-log", run, where, f"is under shard {xx}, run {run} belongs under {shard(run)}: readers do not find it there")
            return
        entry = self.catalog_entry(run) if catalogued else None
        name = M.run_leaf(run)
        anchored = self.manifest.pop(name, [])
        if not has_dir:
            if self.remote is not None and catalogued:  # a start_run killed before its first commit made HEAD
                self.notes.append(Problem("unstarted-run", run, d, "its log has no HEAD (a start_run killed before its "
                                          "first commit): listings skip it"))
            elif catalogued:
                self.add("missing-run-log", run, d, "the catalog lists this run, its log is gone")
            for n, c in anchored:
                self.add("anchor-removed", name, d, f"the log is gone; the anchor names its entry {n} ({c.hex()})")
            return
        try:
            engine = self.logs.run_log(run)
        except ObjstoreError as err:
            self.add("corrupt-log", run, self._run_where(run), f"the run's log does not open: {err}")
            return
        r, seen = self.one_log(engine, run, [], [n for n, _c in anchored])
        self.unnamed_keys(engine, run)
        self.check_cite(run, engine)
        held = self.held_runs(engine, run)
        if held:
            self.add("wrong-run-log", run, self._run_where(run), f"the log at run {run}'s place holds the refs of run {', '.join(held)}")
        for want in anchored:
            if held:
                self.add("anchor-swapped", name, self._run_where(run), f"the log at its place holds run {', '.join(held)}'s log, not the "
                         f"one anchored at entry {want[0]} ({want[1].hex()})")
            else:
                self.judge(name, engine, want, seen, r)
        if r.entries == 0 and not r.problems:
            why = "a start_run killed before its first commit" + ("" if catalogued else ", before its catalog entry")
            self.notes.append(Problem("unstarted-run", run, d, f"its log holds no entry ({why}): listings skip it"))
            return
        if not catalogued:
            self.add("uncatalogued-run", run, d, f"its log holds {r.entries} entries, the catalog has no entry for it: listings and latest miss it")
        elif entry is not None and not held:
            self.catalog_against_log(run, entry, engine)

    def unnamed_keys(self, engine: Engine, run: str | None) -> None:
        """On object storage: a note for each chunk or entry key of the log that no entry names (a writer killed
        between its PUT and the HEAD swap that would have named it). Never read; a LIST of the log's keys finds them."""
        if self.remote is None:
            return
        try:
            keys = engine.unnamed_keys()  # type: ignore[attr-defined]
        except ObjstoreError:
            return  # a log that does not walk: its own pass named why
        for x in keys:
            self.notes.append(Problem("unnamed-key", run or "store", f"{self._where(engine)}/{x.key}",
                                      "no entry names it (a writer killed between its PUT and the HEAD swap); "
                                      "'objstore gc --prune-unreferenced-older-than AGE' removes it"))

    def check_cite(self, run: str, engine: Engine) -> None:
        """The store-log position the run's newest citing entry read is an entry of the store log, with that checksum
        (a store log rolled back or rewritten under the runs that cite it is named here)."""
        name = runrefs.cite_ref(run)
        cite = runrefs.parse_cite(engine.tables.refs.get(name))
        if cite is None or cite[0] == 0:
            return
        n, checksum = cite
        where = self._run_where(run)
        if n > self.store_count:
            self.add("bad-cite", name, where, f"cites store-log entry {n}; the store log ends at entry {self.store_count}")
            return
        got = self.store_sums.get(n)
        if got is None:
            got = _checksum_at(self.logs.store_log, n)
        if got != checksum:
            self.add("bad-cite", name, where, f"cites store-log entry {n} with checksum {checksum.hex()}; that entry's is "
                     f"{got.hex() if got else '(unread)'}")

    def catalog_entry(self, run: str) -> CatalogEntry | None:
        path = self.logs.catalog.id_path(run)
        try:
            e = self.logs.catalog.entry(run)
        except CorruptLog as err:
            self.add("bad-catalog-entry", run, path, err.args[1] if len(err.args) > 1 else str(err))
            return None
        except StorageOSError as err:
            self.add("bad-catalog-entry", run, path, f"does not read: {err}")
            return None
        if e is not None and e.run != run:
            self.add("bad-catalog-entry", run, path, f"names run {e.run!r:.80}")
            return None
        return e

    def held_runs(self, engine: Engine, run: str) -> list[str]:
        """The other runs whose refs the log at ``run``'s place holds (a sound run log holds its own only)."""
        others: set[str] = set()
        for ref in list(engine.tables.refs):
            if ref == REPAIRS_REF:
                continue  # the note of a repair of this log (lifecycle.repair): every log may hold its own
            r = runrefs.run_of(ref)
            if r != run:
                others.add(str(r) if r is not None else ref)
                if len(others) > 3:
                    break
        return sorted(others)

    def catalog_against_log(self, run: str, entry: CatalogEntry, engine: Engine) -> None:
        """The catalog entry says what the run's run_started record says; its order name lists it."""
        path = self.logs.catalog.id_path(run)
        if self.remote is not None:
            if not self.remote.catalog.order_exists(entry):  # (BucketCatalog)
                self.add("catalog-mismatch", run, path, f"its order key catalog/order/{order_key(entry.time_us)}-{run} is missing: "
                         "listings miss the run")
                return
        elif not os.path.exists(order := self.logs.catalog._order_path(order_key(entry.time_us), run)):
            self.add("catalog-mismatch", run, path, f"its order name {os.path.relpath(order, self.root)} is missing: listings miss the run")
            return
        got = _started(engine, run)
        if got is None:
            return  # no run_started to compare (a run begun by a ref move; or its body removed: named by the log's pass)
        diff = []
        subject, labels, _when, copy_of = got
        if subject != entry.subject:
            diff.append(f"subject {entry.subject!r} (record: {subject!r})")
        mine = [list(r) for r in entry.labels] if entry.labels is not None else None
        if labels != mine:
            diff.append(f"labels {mine!r:.120} (record: {labels!r:.120})")
        first = _first_entry_time(engine)
        if first is not None and entry.time_us > first:  # written under the run log's lock before its first entry
            diff.append(f"time {entry.time_us} µs, after the run's first entry ({first} µs)")
        if copy_of != entry.copy_of:
            diff.append(f"copy_of {entry.copy_of!r} (record: {copy_of!r})")
        if diff:
            self.add("catalog-mismatch", run, path, "the catalog entry says " + "; ".join(diff))


def _started(engine: Engine, run: str) -> tuple[str, list | None, int | None, str | None] | None:
    """(subject, canonical labels, time in µs, source run) its run_started record says, or None if unread."""
    oid = engine.record_at(run, 0, 0)
    if oid is None or not engine.has_body(oid):
        return None
    try:
        t, v = codec.decode(engine.read(oid), oid, False)
    except ObjstoreError:
        return None
    if t != codec.RECORD or not isinstance(v, dict) or v.get("kind") != "run_started":
        return None
    b = v.get("body")
    body: dict = b if isinstance(b, dict) else {}
    s = body.get("subject")
    subject = s if isinstance(s, str) else "default"
    rows = L.canonical(v.get("labels")) if v.get("labels") is not None else None
    labels = [list(r) for r in rows] if rows is not None else None
    tm = v.get("time")
    when = int(float(tm) * 1_000_000) if isinstance(tm, (int, float)) and not isinstance(tm, bool) else None
    copy_of: str | None = None
    parent = v.get("parent")
    if isinstance(parent, bytes) and engine.has_body(parent):
        try:
            ft, fv = codec.decode(engine.read(parent), parent, False)
            src = fv.get("parent_run") if ft == codec.FORK and isinstance(fv, dict) else None
            copy_of = src if isinstance(src, str) else None
        except ObjstoreError:
            pass
    return subject, labels, when, copy_of


def _first_entry_time(engine: Engine) -> int | None:
    """The time (µs) of the log's first entry: the catalog's order key is taken just before it is written (or is
    the time a copy or an upgrade keeps, which that entry keeps too)."""
    try:
        for e in engine.entries():
            return int(e.time * 1_000_000)
    except ObjstoreError:
        return None
    return None


def _checksum_at(engine: Engine, n: int) -> bytes | None:
    try:
        for e in engine.entries():
            if e.n == n:
                return bytes(e.checksum)
    except ObjstoreError:
        return None
    return None


def verify_logs(log: RunLog, verify_log: OneLogPass, *, check_state: bool, tokens: list[str],
                progress: Callable[[int, int], None] | None, jobs: int | None, runs: set[str] | None = None) -> Report:
    """The report over the store log and every run's log (``runs``: those runs' logs only); ``verify_log`` proves
    one log (objstore.runs.verify's, which stands above this module)."""
    for t in tokens:  # every token parsed before anything is read
        if M.is_manifest_token(t):
            M.parse_manifest_token(t)
        else:
            parse_anchor(t)
    p = _Pass(log, check_state, progress, jobs, verify_log)
    # verify lists what it finds: every log is read to its readable prefix (a damaged one, a forged deletion in it,
    # is named by its own pass), where every other reader stops with CorruptLog
    logs = p.logs
    was = logs.prefix_ok, logs.store_log.prefix_ok
    logs.release()  # run logs opened before this pass open again, reading their readable prefix
    logs.prefix_ok = logs.store_log.prefix_ok = True
    try:
        p.store_log(tokens)
        p.runs(runs)
    finally:
        logs.prefix_ok, logs.store_log.prefix_ok = was
        logs.release()
    return Report(p.problems, p.notes, p.entries, p.objects, p.checksum, p.n_logs)


__all__ = ["verify_logs", "walk_runs"]
