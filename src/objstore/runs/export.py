"""Export (the outbox): entries for downstream consumers, from the live branch only.

The live-branch rule is enforced where an entry is built (``build_entry``), not
by filtering at the relay: asking it to build an entry for a record of any other
branch raises ``Refused``. A forked live branch exports its fork object first
(``kind: "fork"``, the same fork shape ``objstore log --json`` prints,
``objstore.runs.views.fork``: a consumer that saw the parent learns where the timeline
turned), then its own records; never the parent's records again.

Each entry is ``{"schema": 1}`` plus the record or fork view of
``objstore.runs.views`` (the layout of ``log --json``). Each entry's ``id`` is the id of the object it describes, so entries are stable
across calls and relaying one twice is recognisably the same entry. Derived
material (summaries, journal context: docs/JOURNAL.md) is never public: such records
are not exported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Refused
from . import records as R
from . import views

if TYPE_CHECKING:
    from .chain import ChainReader, View

EXPORT_SCHEMA = 1


def build_entry(view: View, obj: R.Record | dict) -> dict:
    """One outbox entry; refuses anything not on the view's live branch."""
    if isinstance(obj, dict):  # a fork object
        if obj["branch"] != view.live:
            raise Refused(f"export of branch {obj['branch']} of run {view.run}: only the live branch ({view.live}) is exported")
        return views.export_entry(EXPORT_SCHEMA, views.fork(obj))
    if obj.branch != view.live:
        raise Refused(f"export of branch {obj.branch} of run {view.run}: only the live branch ({view.live}) is exported")
    if obj.kind == R.TURN and obj.body.get("origin") != R.ORIGIN_SOURCE:
        raise Refused(f"record {obj.id.hex()} is derived material and is never exported")
    body = obj.body
    if obj.kind == R.RUN_STARTED and R.startup_of(body) is not None:
        # the startup journal context is derived material: consumers learn it existed, not its text
        ev = R.startup_of(body)
        assert ev is not None
        body = dict(body, meta=dict(body["meta"], startup={"type": R.STARTUP_EVENT, "answer_sha256": ev.get("answer_sha256"),
                                                            "exported": False}))
    return views.export_entry(EXPORT_SCHEMA, views.record(obj, body))


def export(log: ChainReader, run: str, view: View | None = None) -> list[dict]:
    """Outbox entries of the live branch, oldest first."""
    view = view or log.view(run)
    own, fk = log.chain(view.head(view.live))
    entries = [build_entry(view, fk)] if fk else []
    entries.extend(build_entry(view, r) for r in own)
    return entries
