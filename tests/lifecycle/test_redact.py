"""Redaction of one blob (issue 17): every read of its body is the typed ``Redacted`` error (exit 12) with
the redaction's id and reason, from the library and from every command; the records naming it keep its
id and the run still verifies, with the redaction as a note; and what redaction cannot hide: a guessable
body is confirmed from its id by hashing the candidates.
"""

from __future__ import annotations

import io
import json
import os

import pytest
from helpers import is_per_run, run_cli, snapshot_tree, store_log_root

from objstore import RunLog, Store
from objstore.errors import Redacted
from objstore.lifecycle import delete as D
from objstore.runs import export, query
from objstore.runs.verify import verify_report
from objstore.storage import codec, identity


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    env = {"OBJSTORE_KEYS": str(tmp_path / "keys")}
    monkeypatch.setenv("OBJSTORE_KEYS", env["OBJSTORE_KEYS"])
    log = RunLog(Store.init(root))
    identity.ensure_owner_key(log.store)
    log.start_run("R")
    secret = log.put_blob(b"sk-live-0123456789abcdef: an API key pasted into a prompt")
    other = log.put_blob(b"an ordinary answer")
    for i in range(3):
        log.record_attempt("R", i, 0, "succeeded", prompt=secret if i == 1 else other, output=other)
    return root, env, log, secret, other


@pytest.mark.slow
def test_every_read_of_a_redacted_blob_is_the_typed_error(store):
    root, env, log, secret, other = store
    did = D.redact(log, secret, reason="leaked API key")
    want = f"blob {secret.hex()} is redacted ({did.hex()}): leaked API key"
    fresh = RunLog(Store.open(root))
    for read in (lambda s: s.get_blob(secret), lambda s: s.get(secret), lambda s: s.get_raw(secret),
                 lambda s: s.copy_blob_to(secret, io.BytesIO()), lambda s: s.get_decoded(secret)):
        for s in (log.store, fresh.store):
            with pytest.raises(Redacted) as e:
                read(s)
            assert (str(e.value), e.value.exit_code) == (want, 12)
    assert fresh.store.get_blob(other) == b"an ordinary answer"
    # the records naming it keep its id; queries carry the id and never read it
    ep = query.episode(fresh, "R")
    assert [a["prompt"] for a in ep.attempts()][1] == secret.hex()
    out = json.dumps(export.export(fresh, "R"))
    assert secret.hex() in out and "sk-live" not in out
    # at the command line: cat, cat --body, show, show --json
    line = f"objstore: error: {want}\n"
    for args in (("cat", secret.hex()), ("cat", "--body", secret.hex()), ("cat", "--raw", secret.hex()[:12]), ("show", secret.hex())):
        _, out, err = run_cli(*args, store=root, env_extra=env, exit_code=12)
        assert (out, err) == ("", line), args
    _, out, err = run_cli("show", secret.hex(), "--json", store=root, env_extra=env, exit_code=12)
    assert json.loads(err) == {"error": "redacted", "message": want, "exit": 12}
    # the run and its chain verify; the redaction is a note, not a problem
    report = verify_report(fresh)
    assert report.problems == []
    # the redaction is in the store log: the note names it (a store of one log: no path)
    where = f" [{os.path.join(store_log_root(root), 'log')}]" if is_per_run(root) else ""
    assert [n.line() for n in report.notes if n.code == "redacted"] == [f"redacted {secret.hex()}: leaked API key{where}"]
    _, out, err = run_cli("verify", store=root, env_extra=env, exit_code=0)
    assert f"note: redacted {secret.hex()}: leaked API key{where}" in err.splitlines()


def test_redact_at_the_command_line_and_again_is_a_no_op(store):
    root, env, log, secret, _other = store
    _, out, _ = run_cli("redact", secret.hex()[:10], "--reason", "leak", "--json", store=root, env_extra=env, exit_code=0)
    got = json.loads(out)
    assert got["blob"] == secret.hex() and got["written"] is True
    before = snapshot_tree(os.path.join(root, "log"))
    _, out, _ = run_cli("redact", secret.hex(), "--reason", "again", "--json", store=root, env_extra=env, exit_code=0)
    assert json.loads(out) == dict(got, written=False)
    assert snapshot_tree(os.path.join(root, "log")) == before
    v = log.store.get_typed(bytes.fromhex(got["deletion"]), codec.DELETION)
    assert (v["scope"], v["blob"], v["run"], v["reason"], v["by"]) == ("blob", secret, None, "leak", identity.owner_public(log.store))


def test_a_redacted_guessable_secret_is_confirmed_from_its_id(store):
    """The limit, stated: redaction withholds the body, never the id, and the id is the BLAKE3 hash of
    the canonical bytes. A body drawn from a small space — here a 6-digit code, 10**6 candidates — is
    found by hashing every candidate until one gives the id. objstore cannot prevent this; docs/FORMAT.md
    and 'objstore delete --help' say so."""
    root, env, log, _secret, _other = store
    code = log.put_blob(b"402719")
    D.redact(log, code, reason="a one-time code")
    with pytest.raises(Redacted):
        log.store.get_blob(code)
    head = codec.header(codec.BLOB, 6)
    import blake3

    found = next(c for c in (b"%06d" % n for n in range(10**6)) if blake3.blake3(head + c).digest() == code)
    assert found == b"402719"
