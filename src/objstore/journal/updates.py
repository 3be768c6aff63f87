"""Writing journal versions as a client: sign the request, send it to a Host, return what landed.

The Host (``objstore.journal.host``) is the one place that authorizes and writes; this module is
what a session's writer calls, over the in-process Host by default or any other (the Backend's
socket client), so the same signed request goes over either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..storage import identity
from ..storage.runrefs import journal_ref
from .host import LocalJournalHost
from .versions import JOURNAL_SCHEMA, check_body, current_journal, journal_body, journal_body_bytes, resolve_record

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..storage.identity import Key
    from .host import JournalHost


def update_journal(log: RunLog, run: str, key: Key, body: dict, *, reflects_through: Any = None, checkpoint: Any = None,
                   enabled: bool | None = None, host: JournalHost | None = None,
                   expect_head: bytes | None | Literal["current"] = "current") -> tuple[bytes, int]:
    """Write the next journal version through a Host (default: the in-process one) as ``key``.

    The request is signed over the body hash and the expected head (default: the head now), so a
    version lands only on the head its writer saw (``Conflict`` otherwise). Returns (id, version)."""
    host = host or LocalJournalHost(log)
    body = check_body(body)
    data = journal_body_bytes(body)
    rt = resolve_record(log, run, reflects_through)
    cp = resolve_record(log, run, checkpoint)
    if expect_head == "current":
        cur = log.store.read_ref(journal_ref(run))
        expect_head = cur if isinstance(cur, bytes) else None
    params = {"reflects_through": rt.hex() if rt else None, "checkpoint": cp.hex() if cp else None, "enabled": enabled}
    req = identity.sign_request(key, "update", run, params=params, body=data,
                                expect_head=expect_head.hex() if expect_head else None)
    out = host.update(req, data)
    return bytes.fromhex(out["journal"]), out["version"]


def set_journal_enabled(log: RunLog, run: str, key: Key, enabled: bool, *, host: JournalHost | None = None) -> tuple[bytes, int]:
    """A new version with the same body and reflection, enabled or disabled."""
    cur = current_journal(log, run)
    if cur is None:
        return update_journal(log, run, key, {}, enabled=enabled, host=host, expect_head=None)
    jid, j = cur
    rt = j.get("reflects_through") if j.get("v") == JOURNAL_SCHEMA else None
    cp = j.get("checkpoint") if isinstance(j.get("checkpoint"), bytes) else None
    # on the head whose body it copies (the head re-read later could be a newer version, whose
    # body this one would silently replace): a version landing in between is a Conflict
    return update_journal(log, run, key, journal_body(log, j), reflects_through=rt, checkpoint=cp, enabled=enabled, host=host,
                          expect_head=jid)
