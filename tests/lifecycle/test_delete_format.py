"""The deletion object's bytes are pinned (issue 17; docs/FORMAT.md "Deletion and redaction objects"):
fixtures/golden-deletion.json holds deletion objects with their canonical bytes and ids. Re-encoding each
must give exactly those bytes and that id, its signature must verify against ``by``, and the schema must
accept it and name what is wrong with a damaged copy.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from objstore.runs import records as R
from objstore.runs import schemas as S
from objstore.storage import codec, identity

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-deletion.json")
_IDS = ("blob", "grant", "previous")


def load() -> dict:
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def from_json(v: dict) -> dict:
    """A vector's value as stored: id fields (and each covered record's id) as 32 bytes."""
    obj = dict(v)
    for k in _IDS:
        if obj[k] is not None:
            obj[k] = bytes.fromhex(obj[k])
    if obj["records"] is not None:
        obj["records"] = [[bytes.fromhex(r[0]), r[1], r[2], r[3]] for r in obj["records"]]
    return obj


VECTORS = load()["vectors"]


@pytest.mark.parametrize("vec", VECTORS, ids=[v["name"] for v in VECTORS])
def test_golden_deletion_bytes_id_and_signature(vec):
    obj = from_json(vec["value"])
    canon = codec.encode(codec.DELETION, obj)
    assert canon.hex() == vec["canonical_hex"]
    assert codec.object_id(canon).hex() == vec["id"]
    assert codec.decode(canon, codec.object_id(canon)) == (codec.DELETION, obj)
    assert S.schema_problem(R.DELETION_TYPE, obj) is None
    if obj["by"] is not None:
        assert identity.verify_sig(obj["by"], obj["sig"], identity.object_message(obj))
        edited = dict(obj, reason=obj["reason"] + "!")
        assert not identity.verify_sig(obj["by"], obj["sig"], identity.object_message(edited))


BAD = [
    ("v", 2, "unknown deletion schema version 2 (known: 1)"),
    ("scope", "branch", "field 'scope' must be one of run, records, blob, is 'branch'"),
    ("reason", "", "field 'reason' must be a non-empty string, is ''"),
    ("extra", 1, "unknown field 'extra'"),
    ("records", [], "a run deletion covers the whole run: its records field is nil"),
    ("blob", b"\x01" * 32, "a run deletion names a run, and no blob"),
    ("previous", b"\x01" * 32, "a run deletion has no previous deletion (only the records chain of a run has one)"),
    ("sig", None, "a deletion is signed (by and sig) or unsigned (neither)"),
]


@pytest.mark.parametrize("field,value,problem", BAD, ids=[b[0] for b in BAD])
def test_the_schema_names_what_is_wrong(field, value, problem):
    obj = from_json(VECTORS[0]["value"])
    obj[field] = value
    assert S.schema_problem(R.DELETION_TYPE, obj) == problem


def test_records_rows_must_be_sorted_places_of_known_kinds():
    obj = from_json(VECTORS[1]["value"])
    for rows in ([], [[b"\x01" * 32, 0, 2, "attempt"], [b"\x02" * 32, 0, 1, "attempt"]], [[b"\x01" * 32, 0, 2, "nonsense"]],
                 [[b"\x01" * 32, 0, 2, "attempt"], [b"\x01" * 32, 0, 3, "attempt"]], [[b"\x01" * 31, 0, 2, "attempt"]]):
        bad = copy.deepcopy(obj)
        bad["records"] = rows
        assert S.schema_problem(R.DELETION_TYPE, bad).startswith("field 'records' must be a non-empty list"), rows
