"""``objstore repair``: cut damaged entries off the end of the log, on purpose and on the record.

The one way an entry leaves the log other than a torn write. ``repair(store, cut_after=N,
reason=…)`` is for a log whose readable prefix ends at entry N because of damage after it (a bad
entry at or below the head witness, an entry that breaks a rule, a witness ahead of the log):
writers refuse such a store, so nothing can be appended until someone decides. Repair removes every
byte after entry N from the last segment, and its own commit entry records the cut in the log
(``cut``: segment, offset, length, BLAKE3 of the removed bytes) together with a blob under the ref
``log/repairs`` saying who cut what and why — signed by the store's owner key where the store has
one (an unsigned repair is refused there, as is a key that is not the owner's). The note also
records the head witness the repair found (``witness``: entry, checksum hex), and the head witness
then names the repair entry: a repair killed between its entry and the witness leaves the old
witness, which the note explains, so writers and verify accept the repaired log (a kill at any
point of a repair leaves the store as it was, or repaired and writable).

Prefer restoring a backup: repair discards whatever the removed bytes held, acknowledged commits
included. Whole segments are never removed (restore from a backup instead), and entries before the
damage are never cut. On a store of a log per run, ``repair RUN`` cuts that run's log; a cut of the store
log below a position some run's entries cite (``run/<R>/cite``, read from the entries on disk) is refused,
naming the runs: those entries were judged there.
"""

from __future__ import annotations

import os
import time
from typing import cast

from ..errors import InvalidInput, Refused, RunNotFound, Unauthenticated
from ..storage import codec, identity, runrefs
from ..storage.log.local import LogEngine
from ..storage.log.witness import REPAIRS_REF
from ..storage.store import Store


def repair(store: Store, cut_after: int, reason: str, key: identity.Key | None = None, run: str | None = None) -> dict:
    """Cut the log after entry ``cut_after`` (see the module docstring); returns what was done. ``run``: cut
    that run's log (a store of a log per run); None: the store log (a store of one log: its log)."""
    if type(cut_after) is not int or cut_after < 0:
        raise InvalidInput(f"--cut-after must be an entry number (>= 0), got {cut_after!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("a repair needs a reason (--reason TEXT)")
    codec.check_text(reason, "repair reason")
    store.require_local("repair cuts the log of", "restore its objects from the bucket's versions or a clone")
    store.engine.prefix_ok = store.logs.prefix_ok = True  # the store is damaged: read what can be read (every log)
    engine = _log_to_cut(store, run)
    if run is None and store.logs.per_run:
        _refuse_cited_cut(store, cut_after)
    stale = engine.tables.adopted > cut_after
    if engine.tables.adopted:
        # A checkpoint's tables may be past an entry no reader applied (a forged deletion behind it,
        # found only where a read obeys it): what is readable is what a replay from the first entry reads.
        engine = LogEngine(engine.root, engine.policy, checkpoint=False, entry_view=engine.entry_view, run=engine.run)
        if run is None:
            store.engine = engine
    engine.prefix_ok = True
    owner = identity.owner_public(store)
    if owner is not None:
        if key is None:
            raise Unauthenticated("this store has an owner key: a repair must be signed by it (--key, or $OBJSTORE_KEYS/owner.key)")
        if key.public != owner:
            raise Refused(f"a repair is signed by the store's owner key ({owner[:16]}…), not {key.public[:16]}…")
    with engine.transaction(repair_after=cut_after) as txn:
        torn = engine.torn
        removed = [] if torn is None else [{"segment": torn[0], "offset": torn[1], "length": torn[2]}]
        note = {"repair": 1, "cut_after": cut_after, "removed": removed, "reason": reason, "time": time.time()}
        found = engine.witness()
        if found is not None:  # what the witness said before this cut: a kill before the new one is explained
            note["witness"] = [found[0], found[1].hex()]
        if key is not None:
            note = identity.sign_object(key, note)
        canonical = codec.encode(codec.BLOB, codec.canonical_json(note))
        oid = codec.object_id(canonical)
        txn.put(oid, codec.BLOB, canonical)
        txn.set_ref(REPAIRS_REF, txn.read_ref(REPAIRS_REF), oid, f"repair: cut after entry {cut_after}: {reason}")
    engine.prefix_ok = False
    if stale:  # the checkpoint (derived) names a position the cut removed: the next reader replays and writes one
        try:
            os.unlink(os.path.join(engine.dir, "checkpoint"))
        except FileNotFoundError:
            pass
    return {**({"run": run} if run is not None else {}), "cut_after": cut_after, "entry": engine.position().entry, "removed": removed, "note": oid.hex(), "signed": key is not None}


def _log_to_cut(store: Store, run: str | None) -> LogEngine:
    """The log a repair cuts: run ``run``'s (RunNotFound if it has none), else the store log."""
    if run is not None:
        if not store.logs.per_run:
            raise InvalidInput("this store has one log (format 3 to 5): repair it without naming a run")
        from ..runs.records import check_run_id

        check_run_id(run)
        if os.path.isdir(os.path.join(run_dir_of(store, run), "log")):
            return cast(LogEngine, store.logs.run_log(run))
        raise RunNotFound(run)
    engine = store.engine
    if not engine.log_files:
        raise InvalidInput("only a store on disk has a log to repair")
    return cast(LogEngine, engine)


def _refuse_cited_cut(store: Store, cut_after: int) -> None:
    """Refused: a cut of the store log below a position a run's entries cite (``run/<R>/cite``). Those entries were
    judged at that position; with it gone, every reader of those runs would find them citing nothing (``bad-cite``)
    and refuse the runs. Restoring the store from a backup keeps the store log and the runs together."""
    cited = []
    for run in store.logs.run_ids():
        # every cite the run's entries on disk make: an entry citing a damaged store-log position is past the run's
        # readable prefix (its refs do not show it), and it is exactly what the cut would orphan
        name, most = runrefs.cite_ref(run), 0
        for e in store.logs.run_log(run).entries():
            for ref, _old, new, _why in e.moves:
                got = runrefs.parse_cite(new) if ref == name else None
                if got is not None:
                    most = max(most, got[0])
        if most > cut_after:
            cited.append((most, run))
    if cited:
        cited.sort(reverse=True)
        names = ", ".join(f"{r} (entry {n})" for n, r in cited[:3]) + (f" and {len(cited) - 3} more" if len(cited) > 3 else "")
        raise Refused(f"the store log is cited past entry {cut_after} by run {names}: cutting it would leave "
                      "their entries judged at positions that no longer exist; restore the store from a backup instead")


def run_dir_of(store: Store, run: str) -> str:
    from ..storage.runlogs.logs import run_dir

    assert store.root is not None
    return run_dir(store.root, run)
