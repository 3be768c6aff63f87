"""Verify's run-model layer: the checks that span entries, over the objects the scan took in.

In log order, as the scan hands each checked object over (``RunModelChecks._object``): every run's
chains (contiguous LSNs, each record naming the previous; branch 0 starting with ``run_started``,
every other branch at its fork object), x. records against their schema objects, every ref move
against what the ref held, and (with the state cache) each record folded into its branch's state.
After the scan: references between objects, the final refs, forks and their compensation flags,
labelled runs' generations, recorded deletions (the authority rule itself is
objstore.storage.authority's: verify only calls it) and the state cache against verify's own fold.
Each finding is a ``Problem``; nothing here reads a log file (objstore.storage.log.fsck does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ObjstoreError
from ..storage import authority, codec, runrefs
from ..storage.log.entry import LogEntry
from ..storage.log.facts import body_refs
from . import kinds as K
from . import labels as RL
from . import records as R
from . import schemas as S
from .fold import apply, empty_state, fold
from .refold import attempt_view
from .verify_objects import BODY_REMOVED, EXPECT, LABELS, REFS, SCHEMA, Checked, record_dict
from .verify_report import Problem

if TYPE_CHECKING:
    from ..storage.log.engine import Engine
    from ..storage.store import Store
    from .api import RunLog

_MOD = 1 << 64


def _digest(step: int, attempt: int, lsn: int, view: bytes) -> int:
    """One attempt view's share of a branch's order-free digest (a sum of hashes). Both sides
    are hashed in this process, so Python's keyed SipHash is enough to tell them apart."""
    return hash((step, attempt, lsn, bytes(view)))


def _show(v: bytes | str | None) -> str:
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else str(v)


class RunModelChecks:
    """The state and checks of the run model, over one pass of verify (``_Verifier`` drives it)."""

    def __init__(self, log: RunLog, engine: Engine | None = None, run: str | None = None) -> None:
        self.log = log
        self.store = log.store
        self.engine = log.store.engine if engine is None else engine
        # the run whose own log this pass reads (a store of format 6), None: the store's one log or its store log;
        # what such a log names of another run (a copy's source) is read from that run's log
        self.own_run = run
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []
        self.upto = 0  # the snapshot: the last entry this pass reads (set as the pass starts)
        self.types: dict[bytes, str] = {}  # every good object's type
        self.where: dict[bytes, str] = {}
        self.damaged: set[bytes] = set()
        self.refs: dict = {}
        self.last: dict[tuple, tuple] = {}  # (run, branch) -> (id, lsn) of the chain's newest record
        self.forks: dict[tuple, tuple[bytes, dict, str]] = {}  # (run, branch) -> (fork id, payload, where)
        self.facts: dict[str, list] = {}  # run -> intent facts
        self.later_refs: list = []  # (referrer type, referrer id, field, id) checked once every object is known
        self.rejected: set[bytes] = set()  # records already reported as off their chain
        self.unfoldable: set[tuple] = set()  # branches whose fold could not start
        self.fold_failures: list[Problem] = []  # why: reported only if no damage explains it
        self.states: dict[tuple, list] = {}  # (run, branch) -> [folded state, attempt view digest]
        self.folding = False
        self.entry_ids: set[bytes] = set()  # good objects of the entry being read
        self.entry_types: dict[bytes, str] = {}
        self.known_blobs: set[bytes] = set()  # blobs already found stored and good
        self.schemas: dict[bytes, tuple[str, list]] = {}  # schema object id -> (kind, fields), for x. records (runs.kinds)
        self.labelled: dict[str, tuple] = {}  # labelled run -> (labels, run_started id hex, where)
        self.erased: dict[bytes, bytes] = {}  # record id -> the deletion covering it (header-only in the fold)
        self.deleted_runs: set[str] = set()  # runs whose run/<R>/deleted is set at the snapshot
        self.removed: dict[bytes, tuple] = {}  # id -> (type, where, slim record or None) of bodies gc removed
        self.dead_refs: set[bytes] = set()  # blobs named by deleted records (their bodies may go at gc)
        self.dead_objs: set[bytes] = set()  # objects a deleted run's refs moved to (its forks, journal and segment objects)
        self.live_removed: dict[bytes, bytes] = {}  # removed blob -> a live record naming it

    def add(self, code: str, subject: str, where: str, detail: str) -> None:
        self.problems.append(Problem(code, subject, where, detail))

    # -- objects ----------------------------------------------------------------------
    def _object(self, c: Checked, where: str, linked: bool = True) -> None:
        """Take in one checked object: its own problems, then (``linked``: the entry is part of the
        unbroken log) what the checks that span entries need of it."""
        oid, _otype, _readable, problems, damaged, t, value = c
        h = oid.hex()
        if oid in self.removed and not any(p[0] == BODY_REMOVED for p in problems):
            del self.removed[oid]  # committed again after gc removed its body: this copy is the one read
        for code, detail, *subject in problems:
            if code == BODY_REMOVED:
                self.removed[oid] = (_otype, where, value)
                continue
            self.add(code, subject[0] if subject else h, where, detail)
        if damaged:
            self.damaged.add(oid)
        if t is None or t == codec.BLOB:
            return  # blobs and records are found again through the log's index (_type), not kept here
        if t != codec.RECORD:
            self.types[oid] = t
            self.where[oid] = where
        if damaged or not linked:
            return
        if t == codec.RECORD:
            self._record(oid, value if type(value) is dict else record_dict(value), where)
        elif t == codec.FORK:
            key = (value["run"], value["branch"])
            if key in self.forks or key in self.last:
                self.add("broken-chain", h, where, f"a second root for run {key[0]} branch {key[1]}")
            else:
                self.forks[key] = (oid, value, where)
            if self.own_run is None or "parent_run" not in value:  # a copy's parent is in its source's log (_cross_fork)
                for f in ("parent_record", "parent_head"):
                    self.later_refs.append((t, oid, f, value[f]))
        else:
            for f, ref in value:
                self.later_refs.append((t, oid, f, ref))

    def _type(self, oid: bytes) -> str | None:
        """The type of a good object stored at or before the snapshot, else None."""
        t = self.types.get(oid)
        if t is not None:
            return t
        if oid in self.damaged:
            return None
        try:
            loc = self.engine.loc(oid)
        except ObjstoreError:
            loc = None
        if loc is None and oid in self.entry_ids:
            return self.engine_type_fallback(oid)
        if loc is None or (self.engine.loc_entry(oid) or 0) > self.upto:  # loc found: so is its entry
            return None
        return loc.otype if hasattr(loc, "otype") else loc[1]

    def engine_type_fallback(self, oid: bytes) -> str | None:
        """Type of an object of the entry being read that the engine's tables do not know (a log
        the engine stopped short of): read it from the entry itself."""
        return self.entry_types.get(oid)

    def _where(self, oid: bytes) -> str:
        return self.where.get(oid) or getattr(self.engine, "where", lambda _o: "")(oid)

    def _ext_record(self, oid: bytes, kind: str, body: dict, schema: object, where: str) -> None:
        """A record of an x. kind: its schema object is stored (before it, in the snapshot), is a
        schema of its kind, and its body fits it; its ref fields are followed like blob refs."""
        sid = body.get(SCHEMA, schema)  # the slim row carries it in the body; a full payload beside it
        body = {k: v for k, v in body.items() if k != SCHEMA}
        bad = K.ext_record_problem(kind, body, sid, self._schema_object)
        if bad is not None:
            self.add("malformed-object", oid.hex(), where, bad)
        got = self._schema_object(sid) if type(sid) is bytes else None
        if not isinstance(got, tuple) or got[0] != kind:
            return
        fields = got[1]
        for field, ref in K.ref_ids(fields, body):
            if ref not in self.known_blobs:
                self.later_refs.append((codec.RECORD, oid, field, ref))

    def _schema_object(self, sid: bytes) -> tuple[str, list] | str:
        """(kind, fields) of a stored schema object, or why it is not one (``kinds.schema_fields``),
        read once per pass."""
        known = self.schemas.get(sid)
        if known is not None:
            return known
        t, log = self._type(sid), self.engine
        if t is None and self.own_run is not None:
            # a run's log on a store of format 6: schemas are the store log's (schema/<kind>), read as it stands
            # (a run entry does not yet name the store-log position it read)
            log = self.store.logs.store_log
            t = self._type_in(sid, log)
        value = None
        if t == codec.SCHEMA:
            try:
                t, value = codec.decode(log.read(sid), sid, False)
            except ObjstoreError as e:
                return f"its schema {sid.hex()} does not read: {e}"
        got = K.schema_fields(sid, t, value)
        if isinstance(got, tuple):  # only a schema is remembered: an id not stored yet may be by a later entry
            self.schemas[sid] = got
        return got

    def _record(self, oid: bytes, p: dict, where: str) -> None:
        run, branch, lsn, parent = p["run"], p["branch"], p["lsn"], p["parent"]
        key = (run, branch)
        h = oid.hex()
        body = p["body"]
        ext = K.is_ext(p["kind"])
        if oid in self.erased or run in self.deleted_runs or oid in self.removed:
            refs = body.get(REFS) if oid in self.removed else [body.get(f) for f in R.BLOB_FIELDS]
            if ext and oid not in self.removed:
                refs = body_refs({k: v for k, v in body.items() if k != SCHEMA})
            self.dead_refs.update(r for r in refs or () if type(r) is bytes)
        elif ext:
            self._ext_record(oid, p["kind"], body, p.get("schema"), where)
        elif self.removed:
            for f in R.BLOB_FIELDS:
                ref = body.get(f)
                if type(ref) is bytes and ref in self.removed:
                    self.live_removed.setdefault(ref, oid)
        for f in R.BLOB_FIELDS:
            ref = body.get(f)
            if type(ref) is bytes and ref not in self.known_blobs:
                if self.entry_types.get(ref) == codec.BLOB and ref not in self.damaged or self._type(ref) == codec.BLOB:
                    if len(self.known_blobs) > 65536:
                        self.known_blobs.clear()  # a bounded memo: prompts shared by many records stay cheap
                    self.known_blobs.add(ref)
                else:
                    self.later_refs.append((codec.RECORD, oid, f, ref))  # missing or mistyped: named at the end
        last = self.last.get(key)
        if parent in self.damaged and lsn > (last[1] + 1 if last else 0):
            # Its parent is damaged (reported already): let it stand in for LSN lsn - 1, so one damaged
            # record or block is one report, not one more for every record after it.
            last = self.last[key] = (parent, lsn - 1)
        if last is None:
            if lsn != 0:
                self.add("lsn-gap", h, where, f"run {run} branch {branch} starts at LSN {lsn}, not 0")
                self.rejected.add(oid)
                return
            if branch == 0:
                fk = self.forks.get(key)
                copied = fk is not None and "parent_run" in fk[1] and parent == fk[0]  # a cross-run fork (fork_run)
                if (parent is not None and not copied) or p["kind"] != R.RUN_STARTED:
                    self.add("broken-chain", h, where, "branch 0 must start with a run_started record with no parent "
                             "(or, in a copy, its cross-run fork object)")
                    self.rejected.add(oid)
                    return
            else:
                fk = self.forks.get(key)
                if fk is None and run in self.deleted_runs and parent in self.removed and (
                        parent in self.dead_objs or self.removed[parent][0] == codec.FORK):
                    # The fork object of a deleted run's branch: gc removed its body, its row stays. gc
                    # finds it as this record's parent, so verify covers it so too: no ref of the run need
                    # ever have named it (a copy, or a fork made in one batch with its first records,
                    # moves the branch's ref straight to a record).
                    self.dead_objs.add(parent)
                elif fk is None or parent != fk[0]:
                    self.add("broken-chain", h, where, f"LSN 0 of branch {branch} does not name its fork object as parent")
                    self.rejected.add(oid)
                    return
        else:
            if parent != last[0]:
                if lsn == last[1] + 1:
                    self.add("broken-chain", h, where, f"parent is not the previous record of run {run} branch {branch} (LSN {last[1]})")
                else:
                    self.add("lsn-gap", h, where, f"LSN {lsn} where {last[1] + 1} was expected (run {run} branch {branch})")
                self.rejected.add(oid)
                return
            if lsn != last[1] + 1:
                self.add("lsn-gap", h, where, f"LSN {lsn} where {last[1] + 1} was expected (run {run} branch {branch})")
                self.rejected.add(oid)
                return
        self.last[key] = (oid, lsn)
        labels = p.get("labels", body.get(LABELS)) if lsn == 0 and branch == 0 else None
        if labels is not None:
            self.labelled[run] = (labels, h, where)
        if self.folding:
            self._fold(key, oid, p)
        # (the chain rows of the segment's index are made where the segment is checked: check_segment)
        if p["kind"] in (R.INTENT, R.INTENT_COMMITTED):
            self.facts.setdefault(run, []).append((branch, lsn, p["kind"], body, oid))

    # -- the state cache, checked against the fold verify makes as it reads -------------------
    def _fold(self, key: tuple[str, int], oid: bytes, p: dict) -> None:
        """Fold each record into its branch's state in log order (a branch's records arrive in
        LSN order), and add its attempt view to an order-free digest of the branch's views."""
        if key in self.unfoldable or key[0] in self.deleted_runs:
            return
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = [self._initial_state(key), 0]
            if key in self.unfoldable:
                return
        gone = self.erased.get(oid)
        if gone is None and oid in self.removed:
            self.unfoldable.add(key)  # its body is gone and no deletion covers it: named as missing-body
            return
        if gone is not None:  # a covered record folds header-only, as the cache and a re-fold fold it
            apply(st[0], R.header_only(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], gone))
            return
        rec = R.Record(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], p.get("time"), p["body"])
        apply(st[0], rec)
        if rec.kind == R.ATTEMPT:
            view = codec.canonical_json_plain(attempt_view(rec, st[0]["workflow_version"]))
            st[1] = (st[1] + _digest(rec.body["step"], rec.body["attempt"], rec.lsn, view)) % _MOD

    def _initial_state(self, key: tuple[str, int]) -> dict:
        """Empty for branch 0; for a fork, the fold of its parent up to the fork point (those
        records are all earlier in the log than the fork object, so they can be read now)."""
        fk = self.forks.get(key)
        if fk is None or (key[1] == 0 and "parent_run" not in fk[1]):
            return empty_state()
        p = fk[1]
        try:
            view = self.log.view(key[0])
            return fold(self.log.fork_base(view, p))
        except ObjstoreError as err:  # a parent record it needs is damaged or missing: named, never an abort
            self.unfoldable.add(key)
            self.fold_failures.append(Problem("verify-incomplete", f"{key[0]}/{key[1]}", "", f"the parent branch {p['parent_branch']} up to "
                                              f"LSN {p['parent_lsn']} cannot be folded: {str(err).splitlines()[0] if str(err) else type(err).__name__}"))
            return empty_state()

    def _check_state(self) -> None:
        """A cache row that claims the head verify saw must be what the cache would serve
        (``StateCache.diverged``: rows confirmed against the log's chain index and fork object)
        and equal verify's own fold, state and attempt views alike; rows behind (a cache miss)
        or beyond this snapshot are skipped."""
        from .chain import View

        cache = self.log.state
        runs = sorted({k[0] for k in self.last} | {k[0] for k in self.forks})
        for run in runs:
            if run in self.deleted_runs:
                continue  # never served (every read stops at its deleted ref); gc drops the rows
            try:
                cached = cache.cached(run)
                reflects = cache.cached_deletions(run)
            except ObjstoreError:
                continue
            dels = self.refs.get(runrefs.deletions_ref(run))
            dels = dels if isinstance(dels, bytes) else None
            for b, (head, _tip, state) in cached.items():
                if reflects.get(b) != dels:
                    continue  # rows from before a deletion (or after this snapshot's): behind, a cache miss
                key = (run, b)
                last = self.last.get(key)
                mine = last[0] if last else (self.forks[key][0] if key in self.forks else None)
                if head != mine or mine is None:
                    continue
                if state is None:
                    self.add("state-diverged", f"{run}/{b}", cache.path_of(run), "cached folded state is damaged (not a folded state)")
                    continue
                try:
                    why = cache.diverged(self.log, View(run, b, {b: mine}, dels), b)
                except ObjstoreError:
                    continue
                if why is not None:
                    self.add("state-diverged", f"{run}/{b}", cache.path_of(run), f"cached rows disagree with the log: {why}")
                    continue
                st = self.states.get(key) or [self._initial_state(key), 0]
                if codec.canonical_json_plain(st[0]) != codec.canonical_json_plain(state):
                    self.add("state-diverged", f"{run}/{b}", cache.path_of(run), "cached folded state differs from the cold re-fold")
                    continue
                digest = 0
                for step, attempt, lsn, view in cache.attempt_rows(run, b):
                    digest = (digest + _digest(step, attempt, lsn, view)) % _MOD
                if digest != st[1]:
                    self.add("state-diverged", f"{run}/{b}", cache.path_of(run), "cached attempt views differ from the cold re-fold")

    # -- recorded deletions (issue 17) ------------------------------------------------------
    def _erasures(self) -> None:
        """What the snapshot's deletions cover, read before the scan so the fold is header-only
        where the cache's is (a deletion's entry comes after the records it covers)."""
        for name, value in list(self.engine.tables.refs.items()):
            run = runrefs.run_of(name) if isinstance(value, bytes) else None
            if run is None:
                continue
            if runrefs.is_deleted_ref(name):
                self.deleted_runs.add(run)
                try:  # the blobs its journal and segment objects named, listed by the deletion (gc removes them)
                    listed = self.store.deletion_object(value).get("blobs") or ()
                    self.dead_refs.update(b for b in listed if type(b) is bytes)
                except ObjstoreError:
                    pass  # a damaged deletion object: named where its entry is checked
            elif runrefs.is_deletions_ref(name):
                try:
                    self.erased.update((oid, hit[0]) for oid, hit in self.store.covered_records(run, value).items())
                except ObjstoreError:
                    pass  # a damaged deletion object: named where its entry is checked

    def _deletions(self) -> None:
        """Each deletion object: ``deletion_problems`` (schema, signature, authority, covered rows),
        and the refs that name one name a deletion of their own run and scope; each redacted blob
        is a note, with the reason."""
        names = list(self.refs)
        if self.own_run is not None:  # a run's log (format 6): redactions are in the store log
            names += list(self.store.logs.store_log.tables.refs)
        redacted = {name[len(runrefs.REDACTED_PREFIX):] for name in names if name.startswith(runrefs.REDACTED_PREFIX)}
        for oid, (otype, where, value) in self.removed.items():
            if otype == codec.RECORD and value is not None:
                run = value["run"] if isinstance(value, dict) else value[0]
                ok = oid in self.erased or run in self.deleted_runs
            elif otype == codec.BLOB:
                ok = oid.hex() in redacted or (oid in self.dead_refs and oid not in self.live_removed)
            else:
                ok = otype in (codec.FORK, "journal", "segment") and oid in self.dead_objs
            if not ok:
                why = (f"a live record ({self.live_removed[oid].hex()}) names it" if oid in self.live_removed
                       else "no recorded deletion or redaction covers it")
                self.add("missing-body", oid.hex(), where, f"gc removed the body of this {otype}, but {why}")
        for oid, t in sorted(self.types.items()):
            if t != codec.DELETION or oid in self.damaged or self.engine.loc_entry(oid) is None:
                continue  # (not in the tables: past an entry readers refuse, named as that entry)
            try:
                value = self.store.deletion_object(oid)
                found = deletion_problems(self.store, oid, value, self.engine.loc_entry(oid), self._authority_view())
            except ObjstoreError as e:
                found = [f"cannot be read: {e}"]
            for what in found:
                self.add("bad-deletion", oid.hex(), self._where(oid), what)
        for name, value in sorted(self.refs.items()):
            if not isinstance(value, bytes) or value in self.damaged or self._type(value) != codec.DELETION:
                continue
            wants = authority.ref_wants(name)  # the scope and run the rule wants behind this ref
            if wants is None:
                continue
            want = wants[:2]
            did: bytes | None = value
            while isinstance(did, bytes):
                v = self.store.deletion_object(did)
                if (v.get("scope"), v.get("run")) != want:
                    self.add("bad-deletion", did.hex(), name, f"{name} names a {v.get('scope')} deletion of run {v.get('run')}")
                    break
                if want[0] == R.SCOPE_BLOB and runrefs.redacted_ref(v.get("blob") or b"") != name:
                    self.add("bad-deletion", did.hex(), name, f"{name} names the redaction of another blob")
                    break
                if want[0] == R.SCOPE_BLOB:
                    self.notes.append(Problem("redacted", name[len(runrefs.REDACTED_PREFIX):], "", str(v.get("reason"))))
                did = v.get("previous") if want[0] == R.SCOPE_RECORDS else None

    def _moves(self, e: LogEntry, where: str) -> None:
        for name, old, new, _reason in e.moves:
            if isinstance(new, bytes) and self.deleted_runs and runrefs.run_of(name) in self.deleted_runs:
                self.dead_objs.add(new)
            cur = self.refs.get(name)
            if cur != old:
                self.add("ref-log-mismatch", name, where, f"entry {e.n} moves it from {_show(old)}, but it held {_show(cur)}")
            if new is None:
                self.refs.pop(name, None)
            else:
                self.refs[name] = new
            # an object of this very entry (a branch ref moved to the entry's last record: nearly every move) is
            # stored in it, read and hashed above: no look-up through the sealed segments' index files for it
            if isinstance(new, bytes) and new not in self.damaged and new not in self.entry_ids and self._type(new) is None:
                self.add("dangling-ref", name, where, f"entry {e.n} points it at {new.hex()}, not stored in or before that entry")

    # -- after the scan -------------------------------------------------------------------
    def _references(self) -> None:
        for otype, oid, field, ref in self.later_refs:
            t = self._type(ref)
            if t is None and self.own_run is not None:  # a store-log object a run's entry names (a subject grant)
                t = self._type_in(ref, self.store.logs.store_log)
            if t is None and otype == codec.DELETION and field == "blob" and self.store.logs.per_run and self.own_run is None:
                continue  # a redaction (store log, format 6): the blob is in the logs of the runs naming it, or none yet
            if t is None:
                if ref in self.damaged:
                    continue
                self.add("missing-object", ref.hex(), "", f"referenced by {otype} {oid.hex()} ({field}) but not stored")
            elif field in EXPECT and t not in EXPECT[field]:
                self.add("wrong-type", ref.hex(), self._where(ref), f"{field} of {otype} {oid.hex()} should be a {' or '.join(EXPECT[field])}, is a {t}")

    def _refs(self) -> None:
        refs = self.refs
        runs: dict[str, dict] = {}
        for name, value in refs.items():
            if runrefs.is_cite_ref(name):
                if runrefs.parse_cite(value) is None:
                    self.add("bad-cite", name, "", f"is not a store-log position (store@<entry>:<checksum>): {value!r:.80}")
                continue  # the position itself is checked against the store log (verify_logs)
            if isinstance(value, str):
                target = runrefs.parse_symref_value(value)
                if target is None or target not in refs:
                    self.add("dangling-ref", name, "", f"symbolic ref to missing ref {target if target is not None else value!r}")
            elif value in self.damaged:
                self.add("damaged-ref", name, self._where(value), f"points to damaged object {value.hex()}")
            elif self._type(value) is None:
                self.add("dangling-ref", name, "", f"points to missing object {value.hex()}")
            run = runrefs.run_of(name)
            if run is not None:
                runs.setdefault(run, {})[name] = value
        for run, rr in sorted(runs.items()):
            self._run_refs(run, rr)

    def _run_refs(self, run: str, rr: dict) -> None:
        prefix = runrefs.run_prefix(run)
        if runrefs.branch_ref(run, 0) not in rr:
            self.add("broken-run", run, "", "run has refs but no branch 0")
        live = rr.get(runrefs.live_ref(run))
        target = runrefs.parse_symref_value(live)
        if live is not None and not (target is not None and runrefs.branch_of(run, target) is not None and target in rr):
            self.add("broken-run", run, "", f"live ref does not name a branch of the run: {live!r}")
        for name, value in rr.items():
            rest = name[len(prefix):]
            want = {runrefs.JOURNAL: codec.JOURNAL, runrefs.SEGMENTS: codec.COMPACTION_SEGMENT, runrefs.DELETIONS: codec.DELETION,
                    runrefs.DELETED: codec.DELETION}.get(rest)
            if rest.startswith("grant/"):
                want = codec.GRANT
            vt = self._type(value) if isinstance(value, bytes) else None
            if want is not None and vt is not None and vt != want:
                self.add("wrong-type", value.hex(), name, f"{name} should name a {want} of run {run}, names a {vt}")
            b = runrefs.branch_of(run, name)
            if b is not None and vt is not None:
                key = (run, b)
                last = self.last.get(key)
                fk = self.forks.get(key)
                expect = last[0] if last else (fk[0] if fk else None)
                if expect is None and run in self.deleted_runs and value in self.dead_objs and value in self.removed:
                    continue  # a deleted run's branch with no record: its fork object's body went at gc
                if value != expect and value not in self.rejected:
                    self.add("broken-chain", name, "", f"head {value.hex()} is not the newest record of run {run} branch {b}")

    def _chains_end(self) -> None:
        for (run, b), (fid, fk, _where) in sorted(self.forks.items()):
            subject = fid.hex()
            ref = runrefs.branch_ref(run, b)
            pb, pl = fk["parent_branch"], fk["parent_lsn"]
            if b == 0 or "parent_run" in fk:
                self._cross_fork(run, b, fid, fk, ref)
                continue
            last = self.last.get((run, pb))
            if last is None:
                self.add("bad-fork", subject, ref, f"parent branch {pb} does not exist")
                continue
            # LSN -> id from the log's chain index (its files are compared with the entries above)
            at = self.engine.record_at(run, pb, pl) if 0 <= pl <= last[1] else None
            bad = R.fork_place_problem(fk, at, self._describe)
            if bad is not None:
                self.add("bad-fork", subject, ref, bad)
                continue
            if run in self.deleted_runs:
                continue  # a deleted run's records are withheld (and gc drops their bodies): its chain rows were checked above
            head = fk["parent_head"]
            hl = self._lsn_on(run, pb, head)
            if hl is None or hl < pl:
                self.add("bad-fork", subject, ref, f"parent record (branch {pb} LSN {pl}) is not an ancestor of the recorded parent head")
                continue
            forks = {bb: (f[1]["parent_branch"], f[1]["parent_lsn"]) for (r, bb), f in self.forks.items() if r == run}
            want = R.compensation_for(self.facts.get(run, []), forks, pb, pl, hl)
            if codec.canonical_json(want) != codec.canonical_json(fk["compensation"]):
                self.add("bad-fork", subject, ref, f"compensation flags disagree with the committed non-idempotent intents of branch {pb} "
                         f"after LSN {pl} (records say {[c['intent'] for c in want]}, fork says {[c.get('intent') for c in fk['compensation']]})")

    def _generations(self) -> None:
        """A labelled run of generation g ≥ 1 stands only beside deleted runs of generations 0 … g−1:
        otherwise one label set would name two live runs (runs.labels)."""
        for run, (labels, h, where) in sorted(self.labelled.items()):
            k = RL.live_earlier_generation(run, labels, self._is_deleted_run) if isinstance(labels, dict) else None
            if k is not None:
                self.add("bad-labels", h, where, f"run {run} is generation {RL.generation_of(run, labels)} of its labels, but generation {k} "
                         f"({RL.run_id(labels, k)}) is not a deleted run")

    def _authority_view(self) -> authority.View | None:
        """What a deletion in this pass's log is judged by: on a run's log (format 6), that log with the store log
        as its entries cited it (``RunLogs.entry_view``: a store-log object dates to the first run entry citing a
        position that holds it), so entry numbers compare within the run's log; else the store as it stands."""
        if self.own_run is None:
            return None
        make = getattr(self.store.logs, "entry_view", None)
        return None if make is None else make(self.engine, self.upto + 1, [], {}, lambda _oid: None, [])

    def _is_deleted_run(self, run: str) -> bool:
        """Whether ``run`` is deleted at this snapshot (of another run on a store of format 6: at its log's head)."""
        if self.own_run is None or run == self.own_run:
            return run in self.deleted_runs
        return isinstance(self.store.logs.run_log(run).tables.refs.get(runrefs.deleted_ref(run)), bytes)

    def _cross_fork(self, run: str, b: int, fid: bytes, fk: dict, ref: str) -> None:
        """A cross-run fork (``fork_run``): the root of branch 0 of a copy, naming a record of
        another run; nothing of the source is copied, so the source record must be where it says."""
        subject = fid.hex()
        src, pb, pl = fk.get("parent_run"), fk["parent_branch"], fk["parent_lsn"]
        if b != 0 or not isinstance(src, str) or src == run:
            self.add("bad-fork", subject, ref, "branch 0 starts at a fork object only in a copy of another run (parent_run)"
                     if b == 0 else "a fork object of branch > 0 names a parent branch of its own run, not parent_run")
            return
        if fk["compensation"]:
            self.add("bad-fork", subject, ref, "a copy's fork object carries no compensation flags")
            return
        if self.own_run is not None:  # the source is another run's log: its chain is read there
            src_log = self.store.logs.run_log(src)
            at = src_log.record_at(src, pb, pl) if pl >= 0 else None
        else:
            src_log = self.engine
            last = self.last.get((src, pb))
            at = self.engine.record_at(src, pb, pl) if last is not None and 0 <= pl <= last[1] else None
        gone = self._is_deleted_run(src)
        bad = R.fork_place_problem(fk, at, lambda oid: "a record of a deleted run" if gone else self._describe(oid, src_log))
        if bad is not None:
            self.add("bad-fork", subject, ref, bad)
            return
        if gone:
            return  # the source was deleted since: its bodies are withheld from reads (gc keeps what the copy reaches)
        hl = self._lsn_on(src, pb, fk["parent_head"], src_log)
        if hl is None or hl < pl:
            self.add("bad-fork", subject, ref, f"parent record (run {src} branch {pb} LSN {pl}) is not an ancestor of the recorded parent head")

    def _type_in(self, oid: bytes, log: Engine | None) -> str | None:
        """The type of ``oid`` in this pass's log, or (``log``: another run's) as that log stands."""
        if log is None or log is self.engine:
            return self._type(oid)
        loc = log.loc(oid)
        return None if loc is None else (loc.otype if hasattr(loc, "otype") else loc[1])

    def _lsn_on(self, run: str, branch: int, oid: bytes, log: Engine | None = None) -> int | None:
        """The LSN of ``oid`` if it is a record on (run, branch)'s chain, else None."""
        engine = self.engine if log is None else log
        if self._type_in(oid, log) != codec.RECORD:
            return None
        hit = self.store.erased_records.get(oid)
        if hit is not None:  # a covered record: its place is its deletion's row (its body is withheld)
            return hit[3] if hit[1:3] == (run, branch) and engine.record_at(run, branch, hit[3]) == oid else None
        try:
            p = self.store.get(oid)[1]
        except ObjstoreError:
            return None
        if p.get("run") != run or p.get("branch") != branch or type(p.get("lsn")) is not int:
            return None
        return p["lsn"] if engine.record_at(run, branch, p["lsn"]) == oid else None

    def _describe(self, oid: bytes, log: Engine | None = None) -> str:
        t = self._type_in(oid, log)
        if t != codec.RECORD:
            return t or "missing"
        hit = self.store.erased_records.get(oid)
        if hit is not None:
            return f"{hit[1]} branch {hit[2]} LSN {hit[3]} (deleted)"
        try:
            p = self.store.get(oid)[1]
        except ObjstoreError:
            return "unreadable"
        return f"{p.get('run')} branch {p.get('branch')} LSN {p.get('lsn')}"


# -- recorded deletions (issue 17) ------------------------------------------------------------
#
def deletion_problems(store: Store, did: bytes, value: dict, at_entry: int | None, view: authority.View | None = None) -> list[str]:
    """What is wrong with a deletion object (each one ``bad-deletion <id>: <what>``): its schema, then
    the authority rule every reader applies to its entry (objstore.storage.authority: the signature,
    the owner or a live delete grant at its entry, a redaction by the owner only, covered rows that
    are the run's records there), as of the deletion's entry."""
    bad = S.schema_problem(R.DELETION_TYPE, value)
    if bad is not None:
        return [bad]
    return authority.deletion_problems(authority.StoreView(store) if view is None else view, value, at_entry)
