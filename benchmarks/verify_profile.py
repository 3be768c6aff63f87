"""bench_verify's profile reports: a cProfile dump of one child read as time per phase and the main steps' inclusive time."""

from __future__ import annotations

import io
import os
import pstats


def say(msg):
    print(msg, flush=True)


_PHASES = [
    # (file suffix, function names or None for any, phase)
    ("src/objstore/storage/engine.py", {"parse_entry", "logical_checksum"}, "log scan: read, decompress, entry checksums"),
    ("src/objstore/storage/log/scan.py", {"scan_log", "_entry_objects"}, "log scan: read, decompress, entry checksums"),
    ("src/objstore/storage/log/local.py", {"scan"}, "log scan: read, decompress, entry checksums"),
    ("src/objstore/runs/verify_runmodel.py", {"_object"}, "object checks (dispatch)"),
    ("src/objstore/runs/verify_runmodel.py", {"_record", "_chains_end", "_moves"}, "chain checks"),
    ("src/objstore/runs/verify_runmodel.py", {"_references", "_refs", "_run_refs"}, "ref checks"),
    ("src/objstore/runs/verify.py", {"check_state_cache", "_cold", "_fold", "_check_state", "_initial_state", "_digest"},
     "state check"),
    ("src/objstore/storage/engine.py", {"load", "index_record", "set_ref"}, "store open: checkpoint + log catch-up"),
    ("src/objstore/storage/log/local_state.py", {"__init__"}, "store open: checkpoint + log catch-up"),
    ("src/objstore/storage/log/local_catchup.py", {"refresh", "_read_tail", "_apply"}, "store open: checkpoint + log catch-up"),
    ("src/objstore/storage/log/checkpoint.py", {"_load_checkpoint"}, "store open: checkpoint + log catch-up"),
    ("src/objstore/storage/log/local_index.py", {"_retire_active"}, "store open: checkpoint + log catch-up"),
    ("src/objstore/storage/codec.py", None, "decode (codec)"),
    ("src/objstore/runs/records.py", None, "schema checks (records)"),
    ("src/objstore/runs/state.py", None, "state cache / fold"),
    ("src/objstore/runs/fold.py", None, "state cache / fold"),
    ("src/objstore/runs/api.py", None, "chain walks (runlog)"),
    ("src/objstore/storage/store.py", None, "object reads (store)"),
    ("src/objstore/storage/engine.py", None, "object reads (engine)"),
    ("src/objstore/storage/log/local_objects.py", None, "object reads (engine)"),
    ("src/objstore/storage/log/segindex.py", None, "sealed segment indexes (segindex)"),
    ("src/objstore/runs/verify.py", None, "verify driver"),
]


def _phase_of(key, caller=None):
    fname, _, func = key
    if fname == "~":  # a C function: charged to its caller's phase, hashing split out
        if caller is not None:
            if "blake3" in func and caller[2] == "_object":
                return "hashing objects (BLAKE3)"
            return _phase_of(caller)
        return "other"
    if "importlib" in fname or fname.startswith("<"):
        return "startup / imports"
    for suffix, funcs, phase in _PHASES:
        if fname.endswith(suffix) and (funcs is None or func in funcs):
            return phase
    if "site-packages" in fname or "/lib/python" in fname:
        return "startup / imports / CLI (click, stdlib)"
    return "other"


def profile_report(prof_path, top=15, title=""):
    """Top functions by tottime and the time per phase."""
    st = pstats.Stats(prof_path)
    total = st.total_tt
    buf = io.StringIO()
    pstats.Stats(prof_path, stream=buf).sort_stats("tottime").print_stats(top)
    lines = buf.getvalue().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("ncalls")), 0)
    say(f"  cProfile {title}(total {total:.2f} s profiled; profiler overhead inflates Python-call-heavy phases)")
    for ln in lines[start:]:
        if ln.strip():
            say("    " + ln.replace(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/", ""))
    phases: dict[str, float] = {}
    for key, (_cc, _nc, tt, _ct, callers) in st.stats.items():
        if key[0] == "~" and callers:
            parts = {ck: (v[2] if isinstance(v, tuple) else 0.0) for ck, v in callers.items()}
            s = sum(parts.values())
            for ck, t in parts.items():
                share = tt * (t / s) if s > 0 else tt / len(parts)
                ph = _phase_of(key, ck)
                phases[ph] = phases.get(ph, 0.0) + share
        else:
            ph = _phase_of(key)
            phases[ph] = phases.get(ph, 0.0) + tt
    say("  time by phase (tottime, C functions charged to their caller):")
    for ph, t in sorted(phases.items(), key=lambda kv: -kv[1]):
        if t >= 0.0005:
            say(f"    {ph:<46} {t:8.3f} s  {100 * t / total:5.1f} %")
    return phases


_STEPS = [  # (file suffix, function, label): inclusive (cumulative) time of the main steps
    ("src/objstore_cli/main.py", "verify", "CLI verify command (everything after imports)"),
    ("src/objstore/storage/log/local_state.py", "__init__", "  store open: LogEngine() (checkpoint + catch-up)"),
    ("src/objstore/storage/log/scan.py", "scan_log", "  log scan: read, parse, entry checksums, decompress"),
    ("src/objstore/storage/log/scan.py", "_entry_objects", "    decompress + slice objects"),
    ("src/objstore/runs/verify_runmodel.py", "_object", "  per-object checks (hash, decode, schema, chain)"),
    ("src/objstore/storage/codec.py", "decode", "    codec.decode (all callers)"),
    ("src/objstore/runs/schemas.py", "schema_problem", "    schemas.schema_problem"),
    ("src/objstore/runs/verify_runmodel.py", "_record", "    chain checks (_record)"),
    ("src/objstore/runs/verify_runmodel.py", "_moves", "  ref moves"),
    ("src/objstore/runs/verify_runmodel.py", "_references", "  references between objects"),
    ("src/objstore/runs/verify_runmodel.py", "_refs", "  final refs"),
    ("src/objstore/runs/verify_runmodel.py", "_chains_end", "  forks / chain ends"),
    ("src/objstore/runs/verify.py", "check_state_cache", "  state cache vs cold re-fold"),
    ("src/objstore/runs/refold.py", "refold_branch", "    refold_branch"),
    ("src/objstore/runs/api.py", "chain", "    runlog.chain (walk back from heads)"),
    ("src/objstore/runs/state.py", "attempt_fragments", "    state.attempt_fragments (SQLite)"),
    ("src/objstore/storage/codec.py", "canonical_json", "    codec.canonical_json"),
    ("src/objstore/runs/api.py", "refold", "log.refold"),
    ("src/objstore/runs/api.py", "lineage_from", "  runlog.lineage_from (chain walk)"),
    ("src/objstore/storage/store.py", "get_decoded", "    store.get_decoded"),
    ("src/objstore/storage/engine.py", "read_block_of", "      engine.read_block_of"),
    ("src/objstore/runs/fold.py", "fold", "  fold.fold"),
    ("src/objstore/runs/api.py", "iter_own", "    runlog.iter_own (records through the chain index)"),
    ("src/objstore/storage/engine.py", "iter_chain", "      engine.iter_chain"),
    ("src/objstore/storage/codec.py", "decode_block", "      codec.decode_block"),
    ("src/objstore/runs/query.py", "episode", "query.episode"),
    ("src/objstore/runs/state.py", "rebuild", "StateCache.rebuild"),
    ("src/objstore/runs/state.py", "_refresh", "  StateCache._refresh (per branch)"),
]


def profile_steps(prof_path):
    st = pstats.Stats(prof_path)
    best: dict = {}
    for key, (_cc, nc, _tt, ct, _callers) in st.stats.items():
        for i, (suffix, func, _label) in enumerate(_STEPS):
            if key[0].endswith(suffix) and key[2] == func:
                if i not in best or ct > best[i][1]:
                    best[i] = (nc, ct)
    if best:
        say("  inclusive time of the main steps (cumtime):")
        for i, (_suffix, _func, label) in enumerate(_STEPS):
            if i in best:
                say(f"    {label:<56} {best[i][1]:8.3f} s  ({best[i][0]:,} calls)")
