"""Verify (fsck): find every corruption and name the object and the path.

Checks, in order:

1. every stored object (loose and packed) re-hashed and parsed strictly:
   hash mismatch, truncation, garbage after the object, bad header, unknown
   type, non-canonical payload, damaged pack or index, stray files;
2. every id an object names exists and has the right type (missing objects,
   wrong types);
3. every ref: parseable, names an existing object (dangling refs), symbolic
   refs name existing refs, and the ref log agrees with the ref;
4. every run's chains: heads belong to their run and branch, parents chain
   with LSNs contiguous down to 0, each branch ends at ``run_started`` (branch
   0) or at its fork object, and each fork object agrees with its parent
   branch (parent record really is that branch's record at that LSN, and an
   ancestor of the recorded parent head);
5. the state cache: a branch row that claims to reflect the current head must
   equal a cold re-fold (a row that is merely behind is a cache miss, not an
   error).

``verify`` returns a list of ``Problem``; the CLI prints one line each and
exits 1 if there are any.
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

import blake3
import msgspec

from . import codec
from . import records as R
from .errors import CorruptPack, IntegrityError, ObjstoreError, UnknownObjectType
from .fileutil import no_gc
from .objects import check_hash
from .state import refold_branch


class Problem(NamedTuple):
    code: str
    subject: str  # object id (hex), ref name, or pack path
    where: str  # file path, or "" if none
    detail: str

    def line(self) -> str:
        tail = f" [{self.where}]" if self.where else ""
        return f"{self.code} {self.subject}: {self.detail}{tail}"

    def as_dict(self) -> dict:
        return self._asdict()


def _problem(e: IntegrityError, subject: str, where: str) -> Problem:
    """The one mapping from a typed integrity error to a verify line."""
    if isinstance(e, CorruptPack):
        return Problem("corrupt-pack", e.args[0], e.args[0], e.args[1])
    if isinstance(e, UnknownObjectType):
        return Problem("unknown-type", subject, where, f"unknown object type {e.args[2]!r}")
    return Problem("corrupt-object", e.args[0] if subject == "?" else subject, where, e.args[2])


def _scan_problem(item) -> Problem:
    return _problem(item.error, item.oid.hex() if item.oid else "?", item.where)


_EXPECT = {"parent": (codec.RECORD, codec.FORK), "prompt": (codec.BLOB,), "output": (codec.BLOB,), "content": (codec.BLOB,),
           "parent_record": (codec.RECORD,), "parent_head": (codec.RECORD, codec.FORK)}


def verify(log, *, check_state: bool = True, progress: Callable[[int], None] | None = None) -> list[Problem]:
    with no_gc():  # millions of small decoded objects stay alive until the end
        return _verify(log, check_state, progress)


_hash = blake3.blake3
_dec = msgspec.msgpack.Decoder()
_enc = msgspec.msgpack.Encoder(order="sorted")


def _check_batch(batch, types, where, damaged, problems) -> list:
    """Hash and header checks of one batch; returns its structured objects (id, type, payload)."""
    structured = []
    w = batch.where
    for oid, data in batch.items:
        try:
            if _hash(data).digest() != oid:
                check_hash(oid, data, w)  # raises the most precise error
            otype, off = codec.parse_header(data, oid, w)
        except IntegrityError as e:
            problems.append(_problem(e, oid.hex(), w))
            damaged.add(oid)
            continue
        types[oid] = otype
        where[oid] = w
        if otype != codec.BLOB:
            structured.append((oid, otype, data[off:]))
    return structured


def _decode_batch(w, structured, payloads, types, damaged, problems) -> None:
    """Decode and canonical-check many payloads with one decode and one encode call.

    The payloads are framed as one MessagePack array; if it decodes, every value
    is a map, and each value re-encodes to exactly its own payload, then every
    payload is one canonical map. Otherwise fall back to one object at a time
    to name the culprits."""
    parts = [p for _, _, p in structured]
    try:
        values = _dec.decode(b"\xdd" + struct.pack(">I", len(parts)) + b"".join(parts))
        ok = len(values) == len(parts) and all(type(v) is dict for v in values) and [_enc.encode(v) for v in values] == parts
    except (msgspec.DecodeError, TypeError, msgspec.EncodeError):
        ok = False
    if ok:
        for (oid, otype, _), v in zip(structured, values):
            payloads[oid] = (otype, v)
        return
    for oid, otype, p in structured:
        try:
            _, v = codec.decode(codec.header(otype, len(p)) + p, oid)
            payloads[oid] = (otype, v)
        except IntegrityError as e:
            problems.append(_problem(e, oid.hex(), w))
            types.pop(oid, None)
            damaged.add(oid)


def _verify(log, check_state, progress) -> list[Problem]:
    store = log.store
    problems: list[Problem] = []
    types: dict[bytes, str] = {}
    payloads: dict[bytes, tuple] = {}  # structured objects: (type, value), for the reference and chain checks
    where: dict[bytes, str] = {}
    damaged: set[bytes] = set()
    n = 0
    for batch in store.backend.scan_batches():
        for item in batch.errors:
            problems.append(_scan_problem(item))
            if item.oid is not None:
                damaged.add(item.oid)
        n += len(batch.items)
        structured = _check_batch(batch, types, where, damaged, problems)
        if structured:
            _decode_batch(batch.where, structured, payloads, types, damaged, problems)
        if progress:
            progress(n)
    # 2. references between objects
    blob_fields = R.BLOB_FIELDS
    for oid, (otype, value) in payloads.items():
        if otype == codec.RECORD:  # the common case, inlined
            refs = [("parent", value["parent"])] if value.get("parent") is not None else []
            body = value.get("body")
            if type(body) is dict:
                refs += [(f, body[f]) for f in blob_fields if type(body.get(f)) is bytes]
        else:
            refs = R.object_refs(otype, value)
        for field, ref in refs:
            t = types.get(ref)
            if t is None:
                if ref in damaged:
                    continue  # its damage is already reported, with its path
                problems.append(Problem("missing-object", ref.hex(), "", f"referenced by {otype} {oid.hex()} ({field}) but not stored"))
            elif field in _EXPECT and t not in _EXPECT[field]:
                problems.append(Problem("wrong-type", ref.hex(), where.get(ref, ""), f"{field} of {otype} {oid.hex()} should be a {' or '.join(_EXPECT[field])}, is a {t}"))

    # 3. refs and ref logs
    ref_values = {}
    try:
        for name, value in store.refs.list(""):
            ref_values[name] = value
    except IntegrityError as e:
        problems.append(Problem("corrupt-ref", e.args[0], e.args[1], e.args[2]))
    for name, value in ref_values.items():
        if isinstance(value, str):
            target = value[len("ref: "):]
            if target not in ref_values:
                problems.append(Problem("dangling-ref", name, _refpath(store, name), f"symbolic ref to missing ref {target}"))
        elif value in damaged:
            problems.append(Problem("damaged-ref", name, _refpath(store, name), f"points to damaged object {value.hex()}"))
        elif value not in types:
            problems.append(Problem("dangling-ref", name, _refpath(store, name), f"points to missing object {value.hex()}"))
        entries = store.refs.log(name)
        if entries:
            last = entries[-1]
            cur = value.hex() if isinstance(value, bytes) else value
            if "corrupt" in last or (cur != last.get("new") and cur != last.get("old")):
                problems.append(Problem("reflog-mismatch", name, _logpath(store, name), "ref value disagrees with the last ref log entry"))
            if any("corrupt" in e for e in entries):
                problems.append(Problem("reflog-corrupt", name, _logpath(store, name), "unparseable ref log line"))

    # 4. chains
    for run in _runs(ref_values):
        problems.extend(_check_run(log, run, ref_values, payloads))

    # 5. state cache
    if check_state and not problems:
        problems.extend(check_state_cache(log))
    return problems


def _refpath(store, name):
    return store.refs.path(name) if hasattr(store.refs, "path") else ""


def _logpath(store, name):
    return store.refs.log_path(name) if hasattr(store.refs, "log_path") else ""


def _runs(ref_values) -> list[str]:
    runs = set()
    for name in ref_values:
        parts = name.split("/")
        if len(parts) >= 3 and parts[0] == "run":
            runs.add(parts[1])
    return sorted(runs)


def problems_for_ref(out, run, name, value, want, payloads) -> None:
    """A run's journal, segments and grant refs must name objects of their type and run."""
    if not isinstance(value, bytes) or value not in payloads:
        return  # absent, or missing/damaged: reported with the refs
    otype, p = payloads[value]
    if otype != want or p.get("run") != run:
        out.append(Problem("wrong-type", value.hex(), name, f"{name} should name a {want} of run {run}, names a {otype} of run {p.get('run')}"))


def _check_run(log, run, ref_values, payloads) -> list[Problem]:
    out = []
    prefix = f"run/{run}/branch/"
    heads = {int(k[len(prefix):]): v for k, v in ref_values.items() if k.startswith(prefix) and k[len(prefix):].isdigit()}
    live = ref_values.get(f"run/{run}/live")  # absent: branch 0 is live
    if 0 not in heads and any(k.startswith(f"run/{run}/") for k in ref_values):
        out.append(Problem("broken-run", run, "", "run has refs but no branch 0"))
    if live is not None and not (isinstance(live, str) and live[len("ref: "):] in ref_values):
        out.append(Problem("broken-run", run, "", f"live ref does not name a branch of the run: {live!r}"))
    for suffix, want in (("journal", codec.JOURNAL), ("segments", codec.SEGMENT)):
        problems_for_ref(out, run, f"run/{run}/{suffix}", ref_values.get(f"run/{run}/{suffix}"), want, payloads)
    for name, value in ref_values.items():
        if name.startswith(f"run/{run}/grant/"):
            problems_for_ref(out, run, name, value, codec.GRANT, payloads)
    chains: dict[int, dict[int, bytes]] = {}  # branch -> lsn -> id
    forks: dict[int, tuple[bytes, dict]] = {}
    for b, head in sorted(heads.items()):
        ref = prefix + str(b)
        lsns: dict[int, bytes] = {}
        oid, expect = head, None
        while True:
            got = payloads.get(oid)
            if got is None:
                break  # missing or corrupt object: already reported
            otype, p = got
            if otype == codec.FORK:
                if p.get("run") != run or p.get("branch") != b:
                    out.append(Problem("broken-chain", oid.hex(), ref, f"fork object belongs to run {p.get('run')} branch {p.get('branch')}, not {run} branch {b}"))
                elif b == 0:
                    out.append(Problem("broken-chain", oid.hex(), ref, "branch 0 cannot start at a fork object"))
                elif expect not in (None, -1):
                    out.append(Problem("lsn-gap", oid.hex(), ref, f"branch {b} reaches its fork object at LSN {expect + 1}, not 0"))
                forks[b] = (oid, p)
                break
            if otype != codec.RECORD:
                out.append(Problem("broken-chain", oid.hex(), ref, f"chain reaches a {otype} object"))
                break
            if p["run"] != run or p["branch"] != b:
                out.append(Problem("broken-chain", oid.hex(), ref, f"record of run {p['run']} branch {p['branch']} on the chain of run {run} branch {b}"))
                break
            if expect is not None and p["lsn"] != expect:
                out.append(Problem("lsn-gap", oid.hex(), ref, f"LSN {p['lsn']} where {expect} was expected (branch {b})"))
                break
            lsns[p["lsn"]] = oid
            expect = p["lsn"] - 1
            if p["parent"] is None:
                if p["lsn"] != 0:
                    out.append(Problem("broken-chain", oid.hex(), ref, f"chain ends at LSN {p['lsn']}, not 0"))
                elif b == 0 and p["kind"] != R.RUN_STARTED:
                    out.append(Problem("broken-chain", oid.hex(), ref, "branch 0 does not start with run_started"))
                elif b != 0:
                    out.append(Problem("broken-chain", oid.hex(), ref, f"branch {b} has no fork object at its root"))
                break
            oid = p["parent"]
        chains[b] = lsns
    for b, (fid, fk) in forks.items():
        pb, pl = fk["parent_branch"], fk["parent_lsn"]
        subject = fid.hex()
        if pb not in chains:
            out.append(Problem("bad-fork", subject, f"run/{run}/branch/{b}", f"parent branch {pb} does not exist"))
            continue
        rec = payloads.get(fk["parent_record"])
        if rec is None:
            continue  # missing, reported above
        otype, p = rec
        if otype != codec.RECORD or p["run"] != run or p["branch"] != pb or p["lsn"] != pl:
            got = f"{p.get('run')} branch {p.get('branch')} LSN {p.get('lsn')}" if otype == codec.RECORD else otype
            out.append(Problem("bad-fork", subject, f"run/{run}/branch/{b}", f"fork says parent branch {pb} LSN {pl}, but its parent record is {got}"))
            continue
        # parent_record must be an ancestor of the recorded parent head on the parent branch
        oid = fk["parent_head"]
        ok = False
        while oid is not None:
            got = payloads.get(oid)
            if got is None or got[0] != codec.RECORD or got[1]["branch"] != pb:
                break
            if oid == fk["parent_record"]:
                ok = True
                break
            if got[1]["lsn"] < pl:
                break
            oid = got[1]["parent"]
        if not ok:
            out.append(Problem("bad-fork", subject, f"run/{run}/branch/{b}", f"parent record (branch {pb} LSN {pl}) is not an ancestor of the recorded parent head"))
    return out


def check_state_cache(log, runs: list[str] | None = None) -> list[Problem]:
    """Cached branches that claim the current head must serialize like a cold re-fold."""
    out = []
    if not log.state.exists():
        return out  # no cache: nothing can disagree with the log
    for run in runs if runs is not None else log.runs():
        try:
            view = log.view(run)
        except ObjstoreError:
            continue
        for b, (head, tip, state) in log.state.cached(run).items():
            if view.heads.get(b) != head:
                continue  # behind: a cache miss, refreshed on the next query
            cold = _cold(log, view, b)
            if codec.canonical_json(cold[0]) != codec.canonical_json(state):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, "cached folded state differs from the cold re-fold"))
            elif cold[1] != log.state.attempt_fragments(run, b):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, "cached attempt views differ from the cold re-fold"))
    return out


def _cold(log, view, b):
    state, _, views = refold_branch(log, view, b)
    return state, [codec.canonical_json(v) for v in views]


def assert_refold_identical(log, run: str, branches=None) -> None:
    """Raise AssertionError unless the cached state of each branch equals a cold re-fold."""
    view = log.view(run)
    log.state.refresh(log, view, branches)
    bad = check_state_cache(log, [run])
    if bad:
        raise AssertionError("; ".join(p.line() for p in bad))
