"""Format 6's golden vectors (fixtures/make_golden_runlogs.py): every byte is fixed by the format alone, and a
store laid out by hand from them — the store log's segment, run r1's log, its catalog entry — opens and reads as
the format says. A change here is a change of the on-disk format (docs/FORMAT.md "Format 6")."""

import json
import os
import shutil
import sys

from objstore import RunLog, Store
from objstore.storage import codec, runrefs
from objstore.storage.runlogs import catalog as C
from objstore.storage.runlogs.idindex import IdIndex
from objstore.storage.runlogs.logs import run_dir

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")
GOLD = json.load(open(os.path.join(FIX, "golden-runlogs.json"), encoding="utf-8"))


def _make():
    sys.path.insert(0, FIX)
    try:
        import make_golden_runlogs as M
    finally:
        sys.path.remove(FIX)
    return M


def test_the_vectors_are_the_format():
    doc, store, run = _make().golden()
    assert doc == GOLD
    assert store == open(os.path.join(FIX, "golden6-store.seg"), "rb").read()
    assert run == open(os.path.join(FIX, "golden6-run.seg"), "rb").read()
    assert run.startswith(open(os.path.join(FIX, "golden3-raw.seg"), "rb").read())  # a run's log is a format-3 log of one run


def test_a_catalog_entry_decodes_and_reencodes_to_its_bytes():
    raw = bytes.fromhex(GOLD["catalog"]["entry_hex"])
    e = C.decode_entry(raw, "golden")
    assert C.encode_entry(e) == raw
    assert [e.run, e.time_us, e.subject, e.labels, e.copy_of] == [GOLD["catalog"]["entry"][k] for k in
                                                                 ("run", "time_us", "subject", "labels", "copy_of")]
    assert runrefs.parse_cite(GOLD["cite"]) == (GOLD["store_log_heads"][-1][0], bytes.fromhex(GOLD["store_log_heads"][-1][1]))


def test_an_id_index_reads_back(tmp_path):
    path = tmp_path / "ids"
    path.write_bytes(bytes.fromhex(GOLD["id_index"]["file_hex"]))
    idx = IdIndex(str(path))
    for run, ids in GOLD["id_index"]["runs"].items():
        for h in ids:
            assert idx.run_of(bytes.fromhex(h)) == run
    assert idx.run_of(b"\x09" * 32) is None
    idx.close()


def test_a_store_laid_out_from_the_vectors_opens_and_reads(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root, format=6).logs.close()
    shutil.copy(os.path.join(FIX, "golden6-store.seg"), os.path.join(root, "store", "log", "0000000001.seg"))
    d = run_dir(root, "r1")
    os.makedirs(os.path.join(d, "log"))
    open(os.path.join(d, "lock"), "wb").close()
    shutil.copy(os.path.join(FIX, "golden6-run.seg"), os.path.join(d, "log", "0000000001.seg"))
    C.Catalog(os.path.join(root, "catalog"), Store.open(root).policy, os.path.join(root, "tmp")).add(
        C.entry_of("r1", 1700000000500000, "default", None, None))
    log = RunLog(Store.open(root))
    assert log.store.run_names() == ["r1"]
    assert log.view("r1").live == 1
    assert [(r.branch, r.lsn, r.kind) for r in log.iter_records("r1", all_branches=True)] == [(0, 1, "attempt"), (0, 0, "run_started")]
    refs = log.store.run_refs("r1")
    assert refs[runrefs.cite_ref("r1")] == GOLD["cite"]
    sid = log.store.read_ref("schema/x.golden.note")
    assert log.store.get_typed(sid, codec.SCHEMA)["fields"][1][0] == "lang"
    assert log.store.logs.store_log.position().entry == 2 and log.store.logs.run_log("r1").position().entry == 4
