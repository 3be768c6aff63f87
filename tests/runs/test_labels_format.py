"""Format 5's bytes are pinned (issue 18; docs/FORMAT.md "Labels, record kinds the core does not know,
copies"): fixtures/golden-labels.json holds labelled records, a schema object, an x. record and a copy's
cross-run fork object with their canonical bytes and ids, and the escaped label set, run ids and label-row
keys. Each is recomputed here from the documented rules with blake3 alone (percent-encoding spelled out,
not objstore's), then through objstore, and both must give the file's bytes."""

from __future__ import annotations

import json
import os

import blake3
import pytest
from test_codec import from_json  # the golden vectors' one JSON form ({"$bytes": hex} for bytes)

from objstore.runs import labels as L
from objstore.runs import schemas as S
from objstore.storage import codec
from objstore.storage import labels as SL

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-labels.json")
GOLD = json.load(open(FIXTURE, encoding="utf-8"))
UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def esc(s: str) -> str:
    return "".join(chr(b) if b in UNRESERVED else f"%{b:02X}" for b in s.encode())


def test_the_escaped_set_run_ids_and_keys_follow_the_documented_rules():
    labels = GOLD["labels"]
    text = "&".join(f"{esc(k)}={esc(v)}" for k, v in sorted(labels.items()))
    assert text == GOLD["escaped_set"] == SL.set_text(SL.canonical(labels))
    run = "l-" + blake3.blake3(text.encode()).hexdigest()[:48]
    assert run == GOLD["run_id"] == L.run_id(labels)
    assert GOLD["run_id_generation_2"] == run + "-2" == L.run_id(labels, 2)

    def key(scope, k, v):
        return blake3.blake3(("L\x00" + scope + "\x00" + esc(k) + "=" + esc(v)).encode()).digest()[:16].hex()

    keys = GOLD["keys"]
    assert keys["record scope thread_id"] == key(run, "thread_id", labels["thread_id"]) == SL.key(run, "thread_id", labels["thread_id"]).hex()
    assert keys["store scope thread_id"] == key("", "thread_id", labels["thread_id"])
    assert keys["record scope checkpoint_id"] == key(run, "checkpoint_id", "c-1")


@pytest.mark.parametrize("vec", GOLD["vectors"], ids=[v["name"] for v in GOLD["vectors"]])
def test_golden_format5_objects(vec):
    value = from_json(vec["value"])
    canon = codec.encode(vec["type"], value)
    assert canon.hex() == vec["canonical_hex"]
    assert blake3.blake3(canon).hexdigest() == vec["id"]
    assert codec.decode(canon, bytes.fromhex(vec["id"])) == (vec["type"], value)
    assert S.schema_problem(vec["type"], value) is None


def test_the_schema_the_x_record_names_is_the_golden_schema():
    by = {v["name"]: v for v in GOLD["vectors"]}
    rec = from_json(by["x. record with a record label"]["value"])
    assert rec["schema"].hex() == by["schema object"]["id"]


def test_escape_is_quote_with_the_unreserved_characters_safe():
    """``escape`` returns a text of unreserved characters as it is, without calling ``quote``: the
    same bytes either way (the label keys, hence the log's index rows, depend on them)."""
    import random
    from urllib.parse import quote

    from objstore.storage import labels as SL

    rng = random.Random(16)
    alphabet = "AZaz09-._~ /%&=+?#é€\x00\n" + "".join(map(chr, range(32, 127)))
    texts = ["", "thread-1", "1ef2c0d3-aa.b_c~d", "a b", "é", "%41", "~" * 5]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(5000)]
    for t in texts:
        assert SL.escape(t) == quote(t, safe="-._~"), t
