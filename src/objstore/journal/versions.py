"""Journal versions: the versioned document about a session's work.

Each version is an immutable ``journal`` object (schema 2) behind the forward-only ref
``run/<run>/journal``. A version names the record it reflects through (``reflects_through``:
a turn is reflected when it is that record or one of its ancestors, following parent links
through fork objects), carries the canonical-JSON body as a blob and, as its proof of
authorship, the writer's signed request. This module owns the document: its body rules, reading
the current version, and what a version reflects. Writing one is a Host's job
(``objstore.journal.host`` decides from signed grants whether the key may write;
``objstore.journal.updates`` is the client side that signs and sends the request).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from ..errors import InvalidInput, NotFound
from ..runs.records import JOURNAL_SCHEMA
from ..storage import codec
from ..storage.runrefs import journal_ref

if TYPE_CHECKING:
    from ..runs.chain import ChainReader


MAX_BODY_DEPTH = codec.MAX_JSON_DEPTH  # nesting levels of a journal body: the limit of every JSON input


# -- journal versions --------------------------------------------------------------------------------

def journal_body_bytes(body: dict) -> bytes:
    """A journal body as stored: canonical JSON (sorted keys, no spaces, non-ASCII kept)."""
    return codec.canonical_json(body)


def check_body(body: object) -> dict:
    """A journal body is a JSON object; its ``entries`` (what a bounded projection keeps or omits
    whole) are an ordered list of objects with unique string ids and an optional ``status``."""
    if not isinstance(body, dict):
        raise InvalidInput("a journal body is a JSON object")
    # The one rule set of every JSON input (codec.check_json_value): iterative, so a body nested
    # ~500 deep is refused rather than a RecursionError; NaN / Infinity, integers outside
    # int64/uint64 and lone surrogates are refused, not stored as null or crashing the encoder.
    codec.check_json_value(body, "journal body", InvalidInput, MAX_BODY_DEPTH)
    entries = body.get("entries")
    if entries is not None:
        if not isinstance(entries, list):
            raise InvalidInput("journal body: entries must be a list")
        seen = set()
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not e["id"]:
                raise InvalidInput(f"journal body: entries[{i}] must be an object with a non-empty string id")
            if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in e["id"]):  # the omitted: line is one line
                raise InvalidInput(f"journal body: entries[{i}].id must not hold control characters")
            if e["id"] in seen:
                raise InvalidInput(f"journal body: entry id {e['id']!r} appears twice")
            seen.add(e["id"])
            if "status" in e and not isinstance(e["status"], str):
                raise InvalidInput(f"journal body: entries[{i}].status must be a string")
    return body


def parse_body(data: bytes) -> dict:
    """A journal body from JSON text (a file, stdin) through the one input parser
    (``codec.parse_json``: no duplicate keys, finite numbers, int64/uint64, nesting within
    bounds); then ``check_body``."""
    body = codec.parse_json(data, "journal body", InvalidInput, MAX_BODY_DEPTH)
    return check_body(body)


def current_journal(log: ChainReader, run: str) -> tuple[bytes, dict] | None:
    jid = log.store.read_ref(journal_ref(run))
    return (jid, log.store.get_typed(jid, codec.JOURNAL)) if isinstance(jid, bytes) else None


def journal_body(log: ChainReader, j: dict) -> dict:
    return json.loads(log.store.get_blob(j["body"]))


def version_view(log: ChainReader, jid: bytes, j: dict) -> dict:
    """A journal version as ``objstore journal show`` prints it: its fields, the body parsed, and —
    for a legacy (schema 1) version — its bare ``source_end`` in place of ``reflects_through``."""
    legacy = j.get("v") != JOURNAL_SCHEMA
    out = {"id": jid, "run": j.get("run"), "version": j.get("version"), "schema": j.get("v", 1),
           "enabled": j.get("enabled", True), "writer": j.get("writer"), "previous": j.get("previous"),
           "reflects_through": None if legacy else j.get("reflects_through"), "checkpoint": j.get("checkpoint"),
           "body_sha256": j.get("body_sha256") or sha256_hex(log.store.get_blob(j["body"])),
           "body": journal_body(log, j)}
    if legacy:
        out["source_end"] = j.get("source_end")
    return out


def show(log: ChainReader, run: str) -> dict:
    """The newest journal version of ``run``, read from the store (no Host, no key): ``version_view``.
    ``RunNotFound`` for an unknown run, ``NotFound`` when it has no journal yet."""
    log.subject(run)  # the run exists
    cur = current_journal(log, run)
    if cur is None:
        raise NotFound(f"journal of run {run} (no version recorded)")
    return version_view(log, *cur)


def resolve_record(log: ChainReader, run: str, ref: object) -> bytes | None:
    """``reflects_through`` / ``checkpoint`` as given: None, ``latest`` (the live head record), an
    LSN on the live branch, or a record id (prefix) of this run."""
    if ref is None:
        return None
    if isinstance(ref, bytes):
        oid = ref
    elif isinstance(ref, int) and not isinstance(ref, bool):
        view = log.view(run)
        return log.record_at(view, view.live, ref)
    elif ref == "latest":
        view = log.view(run)
        head = view.head(view.live)
        otype, _ = log.store.get(head)
        if otype != codec.RECORD:
            raise InvalidInput(f"run {run}'s live branch has no record of its own yet")
        return head
    else:
        oid = log.store.resolve_id(str(ref))
    rec = log.record(oid)
    if rec.run != run:
        raise InvalidInput(f"record {oid.hex()[:12]} belongs to run {rec.run}, not {run}")
    return oid


def reflected_ids(log: ChainReader, j: dict | None) -> set[bytes]:
    """The records a journal version reflects: ``reflects_through`` and its ancestors, through
    fork objects. A legacy version (a bare ``source_end`` LSN) reflects nothing."""
    if not j or j.get("v") != JOURNAL_SCHEMA or not isinstance(j.get("reflects_through"), bytes):
        return set()
    return reflected_through(log, j["reflects_through"])


def reflected_through(log: ChainReader, rid: bytes | None) -> set[bytes]:
    if rid is None:
        return set()
    return {r.id for r in log.lineage_from(rid)}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
