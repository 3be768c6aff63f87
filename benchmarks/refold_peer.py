"""The cold re-fold peer of issue 15: a SQLite table of one run's records and FIXED decode and fold code.

Nothing here imports objstore: the decode (msgspec's msgpack decoder into plain dicts) and the fold (``apply``,
copied from src/objstore/runs/fold.py at commit 564f51c and rewritten to read a decoded payload dict instead of a Record) are
frozen in benchmarks/, so the peer does not get faster or slower as objstore changes.

The table is ``rec(id INTEGER PRIMARY KEY, h BLOB, body BLOB)``: each row a record's canonical bytes
(``record <len> NUL <msgpack payload>``) in LSN order and ``h`` its BLAKE3. A re-fold reads every row in order,
checks the BLAKE3 and the header, decodes the payload and folds it.

    python benchmarks/refold_peer.py DB      # prints {"seconds", "records", "digest"} (one JSON line)

``digest`` is BLAKE3 of the folded state as JSON with sorted keys (``state_digest``), so a caller can compare the
peer's state with objstore's ``log.refold`` (same function over its dict).
"""

import json
import sqlite3
import sys
import time

import blake3
import msgspec


def empty_state():
    return {"run": None, "subject": None, "workflow_version": None, "meta": None, "status": "running", "error": None,
            "records": 0, "attempts": 0, "failed_attempts": 0, "steps": {}, "intents": {}, "turns": 0}


def apply(state, rec):
    """Fold one decoded record payload ({run, kind, body, ...}) into state, in place (src/objstore/runs/fold.py's rules)."""
    b = rec["body"]
    k = rec["kind"]
    state["records"] += 1
    if k == "run_started":
        state["run"] = rec["run"]
        state["subject"] = b["subject"]
        state["workflow_version"] = b["workflow_version"]
        state["meta"] = b["meta"]
    elif k == "attempt":
        state["attempts"] += 1
        if b["state"] == "failed":
            state["failed_attempts"] += 1
        key = str(b["step"])
        step = state["steps"].get(key)
        if step is None:
            step = state["steps"][key] = {"attempts": 0, "state": None, "last_attempt": None}
        step["attempts"] += 1
        step["state"] = b["state"]
        step["last_attempt"] = b["attempt"]
    elif k == "intent":
        state["intents"][b["intent"]] = {"step": b["step"], "effect": b["effect"], "idempotent": b["idempotent"],
                                         "committed": False}
    elif k == "intent_committed":
        it = state["intents"].get(b["intent"])
        if it is not None:
            it["committed"] = True
    elif k == "run_finished":
        state["status"] = b["status"]
        state["error"] = b["error"]
    elif k == "turn":
        state["turns"] += 1
    return state


def state_digest(state):
    return blake3.blake3(json.dumps(state, sort_keys=True, separators=(",", ":"), default=repr).encode()).hexdigest()


def build(db_path, raws):
    """The peer table from (id, canonical bytes) pairs in LSN order."""
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE rec(id INTEGER PRIMARY KEY, h BLOB NOT NULL, body BLOB NOT NULL)")
    with db:
        db.executemany("INSERT INTO rec(h, body) VALUES(?, ?)", raws)
    db.execute("VACUUM")
    db.close()


def refold(db_path):
    """(folded state, records) of the table: every row read in order, hash and header checked, decoded, folded."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    decode = msgspec.msgpack.Decoder().decode
    h3 = blake3.blake3
    state = empty_state()
    n = 0
    for h, body in db.execute("SELECT h, body FROM rec ORDER BY id"):
        if h3(body).digest() != h:
            raise SystemExit(f"row {n}: hash mismatch")
        nul = body.find(b"\x00", 0, 40)
        if body[:7] != b"record " or int(body[7:nul]) != len(body) - nul - 1:
            raise SystemExit(f"row {n}: bad header")
        apply(state, decode(memoryview(body)[nul + 1:]))
        n += 1
    db.close()
    return state, n


def main(argv):
    t0 = time.perf_counter()
    state, n = refold(argv[0])
    t1 = time.perf_counter()
    print(json.dumps({"seconds": t1 - t0, "records": n, "digest": state_digest(state)}))


if __name__ == "__main__":
    main(sys.argv[1:])
