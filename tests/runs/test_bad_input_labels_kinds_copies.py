"""Bad input at the API (issue 18): labels, declared kinds, field lists, listing and copies.

Every bad call raises a typed error of objstore.errors (exit code 4 or 5) and writes nothing: the segment bytes
are compared before and after. Labels are any text (NUL and ``&``/``=``/``%`` included: they are escaped), so
those are accepted and found again; lone surrogates, empty names, non-strings, more than 16 labels and names or
values over 1 024 characters are refused. (The field names that are accepted and then crash are in
tests/adv18_failing.py.)"""

from __future__ import annotations

import os

import pytest
from helpers import log_engine_of, log_files, run_log_root

import objstore
from objstore.errors import InvalidInput, InvalidRecord, ObjstoreError


def _segs(root):
    """What a commit may write: every file of every log (the store log, each run's log) and of the catalog, and
    every directory under them (a refused call must not leave an empty run directory or catalog entry)."""
    dirs = sorted(os.path.relpath(d, root) for part in ("store", "runs", "catalog", "log")
                  for d, _, _ in os.walk(os.path.join(root, part)))
    return log_files(root), dirs


@pytest.fixture
def store(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    src = log.start_run("src")
    log.record_attempt(src, 0, 0, "succeeded")
    log.register_kind("x.t.k", [["a", "str", True, False]])
    return root, log, src


ATT = {"step": 1, "attempt": 0, "state": "running"}
BAD_LABELS = {
    "lone surrogate value": {"a": "\ud800"},
    "lone surrogate name": {"\udfff": "v"},
    "10k-character value": {"a": "x" * 10000},
    "1025-character name": {"n" * 1025: "x"},
    "17 labels": {f"k{i}": "v" for i in range(17)},
    "int value": {"a": 1},
    "int name": {1: "a"},
    "bytes value": {"a": b"x"},
    "None value": {"a": None},
    "empty map": {},
    "empty name": {"": "b"},
    "a list of pairs": [("a", "b")],
    "a string": "a=b",
}


@pytest.mark.parametrize("case", list(BAD_LABELS))
def test_bad_labels_are_refused_everywhere_and_write_nothing(store, case):
    root, log, src = store
    labels = BAD_LABELS[case]
    before = _segs(root)
    calls = [lambda: log.start_run(labels=labels), lambda: log.append(src, "attempt", ATT, labels=labels),
             lambda: log.append(src, "x.t.k", {"a": "v"}, labels=labels), lambda: log.fork_run(src, labels=labels),
             lambda: list(log.iter_records(src, labels=labels))]
    if isinstance(labels, dict) and labels and all(isinstance(k, str) for k in labels):
        calls += [lambda: log.find_run(**labels), lambda: log.find_runs(**labels), lambda: log.find_records(src, **labels),
                  lambda: log.find_record(src, **labels)]
    for call in calls:
        with pytest.raises(InvalidInput) as e:
            call()
        assert e.value.exit_code == 5 and "\n" not in str(e.value)
    assert _segs(root) == before
    assert objstore.verify(objstore.open_store(root)) == []


def test_any_text_is_a_label_nul_and_the_escape_characters_included(store):
    root, log, src = store
    labels = {"a\x00b": "v\x00", "c": "&=%", "é": "日本", "k=v&": "%41"}
    run = log.start_run(labels=labels)
    assert log.find_run(**labels) == run and log.run_labels(run) == labels
    assert log.find_runs(c="&=%") == [run] and log.find_runs(**{"a\x00b": "v\x00"}) == [run]
    assert log.find_runs(a="b\x00v") == [] and log.find_runs(**{"a": "v"}) == []  # the NUL is not a separator
    rec = log.append(run, "attempt", {"step": 0, "attempt": 0, "state": "running"}, labels={"k\x00": "\x00", "x": "a&b=c"})
    assert log.find_record(run, **{"k\x00": "\x00"}).id == rec.id
    assert log.find_record(run, x="a") is None and log.find_record(run, x="a&b=c").id == rec.id
    assert log.record_labels(rec.id) == {"k\x00": "\x00", "x": "a&b=c"}
    assert objstore.verify(objstore.open_store(root)) == []


BAD_KINDS = ["x..a", "x.a.b.c", "x.a", "x.A.b", "x.a.b-c", "x.é.a", "y.a.b", "x.a.b\n", "x." + "a" * 65 + ".b", 5, None, b"x.a.b"]
BAD_FIELDS = {
    "bool as a type": [["a", True, True, False]],
    "int as required": [["a", "str", 1, False]],
    "str as is_ref": [["a", "str", True, "no"]],
    "unknown type": [["a", "date", True, False]],
    "a type in a list": [["a", ["str"], True, False]],
    "three elements": [["a", "str", True]],
    "five elements": [["a", "str", True, False, 1]],
    "a NUL in a name": [["a\x00", "str", True, False]],
    "a name starting with a digit": [["1a", "str", True, False]],
    "an empty name": [["", "str", True, False]],
    "a 65-character name": [["a" * 65, "str", True, False]],
    "a ref that is a str": [["a", "str", True, True]],
    "a name twice": [["a", "str", True, False], ["a", "int", False, False]],
    "no fields": [],
    "65 fields": [[f"f{i}", "str", True, False] for i in range(65)],
    "a string": "a str",
    "a map": {"a": "str"},
    "None": None,
}


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_kinds_are_refused_and_write_nothing(store, kind):
    root, log, src = store
    before = _segs(root)
    with pytest.raises((InvalidRecord, InvalidInput)) as e:
        log.register_kind(kind, [["a", "str", True, False]])
    assert e.value.exit_code == 5
    with pytest.raises((InvalidRecord, InvalidInput)):
        log.append(src, kind, {"a": "v"})
    assert _segs(root) == before


@pytest.mark.parametrize("case", list(BAD_FIELDS))
def test_bad_field_lists_are_refused_and_write_nothing(store, case):
    root, log, src = store
    before = _segs(root)
    with pytest.raises(InvalidRecord) as e:
        log.register_kind("x.t.new", BAD_FIELDS[case])
    assert e.value.exit_code == 5 and "\n" not in str(e.value)
    assert _segs(root) == before


@pytest.mark.parametrize("body", [{"a": 5}, {"a": "v", "b": 1}, {}, {"a": None}, {"a": b"v"}, "a", None, [("a", "v")]])
def test_bodies_that_do_not_fit_are_refused_and_write_nothing(store, body):
    root, log, src = store
    before = _segs(root)
    with pytest.raises(InvalidRecord):
        log.append(src, "x.t.k", body)
    assert _segs(root) == before


BAD_LISTING = {
    "limit -1": ({"limit": -1}, InvalidInput),
    "limit True": ({"limit": True}, InvalidInput),
    "limit 1.5": ({"limit": 1.5}, InvalidInput),
    "before b'x'": ({"before": b"x"}, InvalidInput),
    "before hex text": ({"before": "ab" * 32}, InvalidInput),
    "before an unknown id": ({"before": b"\x01" * 32}, ObjstoreError),
    "branch and all_branches": ({"branch": 0, "all_branches": True}, InvalidInput),
    "branch -1": ({"branch": -1}, ObjstoreError),
    "a branch it does not have": ({"branch": 7}, ObjstoreError),
}


@pytest.mark.parametrize("case", list(BAD_LISTING))
def test_bad_listing_arguments_are_typed_errors(store, case):
    root, log, src = store
    opts, err = BAD_LISTING[case]
    before = _segs(root)
    with pytest.raises(err) as e:
        list(log.iter_records(src, **opts))
    assert e.value.exit_code in (4, 5)
    assert _segs(root) == before
    with pytest.raises(ObjstoreError):
        list(log.iter_records("nosuch"))


def test_bad_copies_and_forks_at_a_record_are_typed_errors_and_write_nothing(store):
    root, log, src = store
    blob = log.put_blob(b"not a record")
    other = log.start_run("other")
    fork_obj = log.fork(src, 0, 0, make_live=False).fork_id
    head = log.view(src).heads[0]
    before = _segs(root)
    calls = [lambda: log.fork_run("nosuch"), lambda: log.fork_run(src, record=b"x"), lambda: log.fork_run(src, record=blob),
             lambda: log.fork_run(src, record=fork_obj), lambda: log.fork_run(src, record=log.run_started(other).id),
             lambda: log.fork_run(src, reason=5), lambda: log.fork_run(src, reason="\ud800"), lambda: log.fork_run(src, run="l-abc"),
             lambda: log.fork_run(src, run="a/b"), lambda: log.fork_run(src, run="src"),
             lambda: log.fork_run(src, run="zz", labels={"a": "b"}), lambda: log.fork_run(other),  # a run_started only: nothing to copy? it is LSN 0
             lambda: log.fork(src, None, at_record=b"x"), lambda: log.fork(src, 0, 1, at_record=head),
             lambda: log.fork(src, None), lambda: log.fork(other, None, at_record=head), lambda: log.fork(src, 1, at_record=head)]
    outcomes = []
    for call in calls:
        try:
            outcomes.append(("ok", call()))
        except ObjstoreError as e:
            assert e.exit_code in (4, 5, 7), e
            outcomes.append(("err", type(e).__name__))
    # copying a run that has only its run_started is allowed (its LSN 0 is a record): the one call that writes
    assert [o for o in outcomes if o[0] == "ok"] == [("ok", outcomes[11][1])] and outcomes[11][0] == "ok"
    copy = outcomes[11][1]
    assert [r.run for r in log.iter_lineage(log.view(copy), 0)] == ["other", copy]
    after = objstore.open_store(root)
    assert sorted(after.runs()) == sorted(["src", "other", copy])
    # only the copy's one entry was appended: every file and directory that was there is unchanged, the new files
    # are the copy's own log (one entry) and its create-once catalog entries, nothing else
    (files_before, dirs_before), (files_after, dirs_after) = before, _segs(root)
    assert {p: files_after.get(p) for p in files_before} == files_before and set(dirs_before) <= set(dirs_after)
    new = sorted(set(files_after) - set(files_before))
    copy_dir = os.path.relpath(run_log_root(root, copy), root)
    assert sorted(p for p in new if not p.startswith("catalog" + os.sep)) == sorted(
        os.path.join(copy_dir, f) for f in ("lock", "sync", os.path.join("log", "0000000001.seg"), os.path.join("log", "witness")))
    new_catalog = [p for p in new if p.startswith("catalog" + os.sep)]
    assert new_catalog and all(os.path.basename(p).endswith(copy) for p in new_catalog)
    assert log_engine_of(after.store, copy).refresh().entry == 1
    assert objstore.verify(after) == []
