"""Shared helpers for the benchmarks: timing, sizes, the SQLite peer, output."""

import os
import time


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t, out


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
