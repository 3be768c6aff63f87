"""Shared helpers for the benchmarks: timing, log-like payloads, output."""

import os
import random
import time


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t, out


def log_like_payloads(n, seed=7, refs=False):
    """~300-byte record payloads shaped like agent attempt records (dict form).

    With refs=False the id fields are hex text instead of ids, so the objects
    stand alone (verify then has no dangling references to report)."""
    rnd = random.Random(seed)
    tools = ["search", "fetch_order", "send_email", "sql", "python"]
    states = ["succeeded", "succeeded", "succeeded", "failed", "running"]
    out = []
    for i in range(n):
        out.append({
            "run": f"r{i // 1000:05d}",
            "branch": 0,
            "lsn": i % 1000,
            "parent": rnd.randbytes(32) if refs else None,
            "kind": "attempt",
            "time": 1764400000.0 + i * 0.137,
            "body": {
                "step": i % 97, "attempt": i % 3, "state": rnd.choice(states), "workflow_version": None,
                "context": {"path": rnd.choice("ABC"), "order": rnd.randint(1000, 9999)},
                "prompt": rnd.randbytes(32) if refs else None, "output": rnd.randbytes(32) if refs else None,
                "trace": rnd.randbytes(24).hex(),
                "tools": {"calls": rnd.sample(tools, 2)},
                "usage": {"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)},
                "error": None,
            },
        })
    return out


def dir_bytes(path):
    total = 0
    for dp, _, fs in os.walk(path):
        for f in fs:
            total += os.path.getsize(os.path.join(dp, f))
    return total


def row(name, rate, unit="obj/s", extra=""):
    print(f"  {name:<48} {rate:>12,.0f} {unit}  {extra}")


def sqlite_peer(path, schema):
    """The SQLite peer as every benchmark runs it: WAL, synchronous=FULL (durable commits)."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(schema)
    return db
