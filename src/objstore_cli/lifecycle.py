"""Recorded deletion and redaction: ``delete`` and ``redact`` — thin click commands over
objstore.lifecycle.delete (the ``gc`` that removes the bodies afterwards is another command)."""

from __future__ import annotations

import click

from .output import echo_json
from .params import INT64, RUN, key_option, pass_ctx

_LIMITS = """\b
What deletion cannot hide: the id of a deleted object stays in the log and
commits to its content, so a guessable body (a phone number, a 6-digit code)
can be confirmed from its id by hashing each candidate. The bodies stay in the
store's files until the next 'objstore gc' removes them."""


def _key(key_file):
    from objstore.storage import identity

    return identity.load_key(key_file) if key_file else None


@click.command("delete", epilog=_LIMITS)
@click.argument("runs", nargs=-1, required=True, type=RUN, metavar="RUN...")
@click.option("--reason", required=True, help="Why (stored in the deletion, shown to whoever names what it took); not empty.")
@click.option("--branch", type=INT64, default=None, help="Delete records of this branch only (with --from-lsn; one RUN).")
@click.option("--from-lsn", "from_lsn", type=INT64, default=None, help="With --branch: its records from this LSN to its head.")
@click.option("--record", "record_ids", multiple=True, metavar="ID", help="Delete this record of RUN (repeatable; one RUN).")
@key_option
@click.option("--json", "as_json", is_flag=True, help="What was deleted as JSON (docs/CLI.md, 'delete').")
@pass_ctx
def delete(c, runs, reason, branch, from_lsn, record_ids, key_file, as_json):
    """Delete runs, or some records of one run: a signed, recorded deletion.

    The whole RUN (one or many, in one commit) vanishes at once from runs,
    log, latest, episode, diff, export and every listing; naming it gives
    exit 12 with the deletion's id and reason. With --branch N --from-lsn L
    (or --record ID...) those records of RUN fold as header-only records:
    they keep their LSN and kind, show as "deleted" with the deletion's id,
    and contribute nothing else. Every other chain, fork and anchor still
    verifies. Nothing un-deletes.

    Signed by the owner key, or by a key the owner granted 'delete' on the run
    or its subject (--key FILE; env OBJSTORE_KEY; default the owner key); where
    the store has an owner key an unsigned deletion, an ungranted or a revoked
    key is refused (exit 8) and nothing is written. Deleting what is deleted
    already is a no-op.

    \b
    Arguments:
      RUN...  run ids (a unique prefix, 'latest', 'latest~N')

    \b
    Examples:
      objstore delete latest --reason "customer asked"
      objstore delete RUN1 RUN2 --reason "retention" --json
      objstore delete RUN --branch 1 --from-lsn 3 --reason "leaked key"
      objstore delete RUN --record ID --reason "wrong upload"
    """
    from objstore.errors import InvalidInput, ObjstoreError
    from objstore.lifecycle import delete as D
    from objstore.storage import runrefs

    log = c.log()
    store = log.store
    partial = branch is not None or from_lsn is not None or bool(record_ids)
    if partial and len(runs) != 1:
        raise click.UsageError("--branch/--from-lsn and --record delete records of one RUN")
    if (branch is None) != (from_lsn is None):
        raise click.UsageError("--branch and --from-lsn go together")
    if branch is not None and record_ids:
        raise click.UsageError("--branch/--from-lsn or --record, not both")
    if not reason.strip():
        raise InvalidInput("a deletion needs a reason (--reason TEXT, not empty)")
    key = _key(key_file)
    if not partial:
        before = {r: store.run_refs(r).get(runrefs.deleted_ref(r)) for r in runs}
        try:
            ids = D.delete_runs(log, list(runs), reason=reason, key=key)
        except ObjstoreError as e:
            landed = getattr(e, "landed", None)
            if landed:  # one commit per run: these are deleted; running the command again finishes the rest
                click.echo(f"deleted before the failure: {', '.join(landed)}", err=True)
            raise
        written = [r for r, did in zip(runs, ids, strict=True) if did != before[r]]
        out = {"scope": "run", "runs": list(runs), "deletions": [i.hex() for i in ids], "records": 0, "written": bool(written)}
    else:
        run = runs[0]
        if branch is not None:
            did = D.delete_branch_from(log, run, branch, from_lsn, reason=reason, key=key)
        else:
            did = D.delete_records(log, run, [store.resolve_id(i) for i in record_ids], reason=reason, key=key)
        n = len(store.deletion_object(did).get("records") or ()) if did is not None else 0
        dels = [did.hex()] if did is not None else []
        out = {"scope": "records", "runs": [run], "deletions": dels, "records": n, "written": did is not None}
    if as_json:
        echo_json(out)
        return
    if not out["written"]:
        click.echo("nothing to delete: already deleted" + (f" ({', '.join(d[:12] for d in out['deletions'])})" if out["deletions"] else ""))
        return
    if out["scope"] == "run":
        for r, d in zip(out["runs"], out["deletions"], strict=True):
            click.echo(f"deleted run {r} (deletion {d[:12]})")
    else:
        click.echo(f"deleted {n} record{'s' if n != 1 else ''} of run {out['runs'][0]} (deletion {out['deletions'][0][:12]})")
    click.echo("their bodies leave the store's files at the next 'objstore gc'")


@click.command("redact", epilog=_LIMITS)
@click.argument("oid", metavar="ID")
@click.option("--reason", required=True, help="Why (every read of the blob answers with it); not empty.")
@key_option
@click.option("--json", "as_json", is_flag=True, help="The blob and its redaction as JSON (docs/CLI.md, 'redact').")
@pass_ctx
def redact(c, oid, reason, key_file, as_json):
    """Redact one blob: keep its id, withhold its body, record why.

    Every read of the blob (cat, cat --body, show, a view's body, export)
    is refused with exit 12, its redaction's id and the reason; the records
    that name it keep their id and still verify, and verify lists it as a
    note. Signed by the owner key (--key FILE; default the owner key); an
    unsigned redaction where the store has an owner key is refused (exit 8).
    Redacting a redacted blob is a no-op.

    \b
    Arguments:
      ID  a blob id (64 hex digits) or a unique prefix of one

    \b
    Examples:
      objstore redact ID --reason "API key pasted into a prompt"
      objstore redact ID --reason "leak" --json
    """
    from objstore.errors import InvalidInput
    from objstore.lifecycle import delete as D
    from objstore.storage import runrefs

    log = c.log()
    store = log.store
    if not reason.strip():
        raise InvalidInput("a redaction needs a reason (--reason TEXT, not empty)")
    blob = store.resolve_id(oid)
    before = store.read_ref(runrefs.redacted_ref(blob))
    did = D.redact(log, blob, reason=reason, key=_key(key_file))
    out = {"blob": blob.hex(), "deletion": did.hex(), "written": did != before}
    if as_json:
        echo_json(out)
        return
    if not out["written"]:
        click.echo(f"blob {blob.hex()[:12]} is redacted already (deletion {did.hex()[:12]})")
        return
    click.echo(f"redacted blob {blob.hex()} (deletion {did.hex()[:12]})")
    click.echo("its body leaves the store's files at the next 'objstore gc'")
