"""Administration: ``init``, ``upgrade``, ``repair``, ``rebuild``, ``demo``, ``backup`` — thin click commands over
Store.init, objstore.lifecycle and objstore.demo."""

from __future__ import annotations

import os
import sys

import click

from .output import echo_json, human_size, progress_bar
from .params import DAMAGED_RUN, RUN, pass_ctx


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Store path, owner key path and public key as JSON.")
@click.option("--create-bucket", is_flag=True, help="On object storage (--store s3://bucket/prefix): create the bucket "
              "if it does not exist (a missing bucket is exit 3 otherwise).")
@pass_ctx
def init(c, as_json, create_bucket):
    """Create an empty store and the owner key (both kept if already there).

    The owner key pair is made outside the store, at $OBJSTORE_KEYS/owner.key
    (default ~/.config/objstore/keys/owner.key, mode 0600); the store keeps only
    its public key (write-once ref keys/owner). The owner key signs grants and is
    the default --key. Running init again is fine while that key matches. A store
    made another way (a library call, ingest) adopts the default owner key the
    first time a signing command runs on it without --key, as init would.

    On object storage the bucket must exist: a missing one is exit 3, unless
    --create-bucket, which creates it (a signed CreateBucket request with the
    AWS_* credentials) and then the store in it.

    \b
    Examples:
      objstore --store ./runs init
      objstore --store s3://bucket/agents init
      objstore --store s3://new-bucket/agents init --create-bucket
      objstore init --json
    """
    from objstore.errors import StoreNotFound
    from objstore.storage import identity
    from objstore.storage.store import Store
    from objstore.storage.storedir import DEFAULT_DIR, is_remote

    if create_bucket and not is_remote(c.path):
        raise click.UsageError("--create-bucket is for a store on object storage (--store s3://bucket/prefix)")
    # never a parent's store: init makes ./.objstore (or the s3://bucket/prefix named)
    target = c.path if is_remote(c.path) else os.path.abspath(c.path or DEFAULT_DIR)
    made_bucket = False
    try:
        s = Store.init(target)
    except StoreNotFound as e:
        from objstore.storage.s3.bucket import BucketNotFound  # a local store loads no S3 module

        if not isinstance(e, BucketNotFound) or not create_bucket:
            raise
        from objstore.storage.s3.client import create_bucket as make_bucket

        made_bucket = make_bucket(target)
        s = Store.init(target)
    key, created = identity.ensure_owner_key(s)
    path = identity.owner_key_path()
    if as_json:
        doc = {"store": s.url or s.root, "owner_key": path, "owner_public": key.public, "created": created}
        if create_bucket:
            doc["bucket_created"] = made_bucket
        echo_json(doc)
        return
    if made_bucket:
        click.echo(f"created bucket {target[len('s3://'):].split('/', 1)[0]}")
    click.echo(f"{'initialised' if s.created else 'already initialised'} objstore store in {s.url or s.root}")
    click.echo(f"owner key {path} ({'created' if created else 'existing, matches the store'}); public {key.public}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="What was done as JSON: status, from/to format, where the old copy is kept, counts.")
@pass_ctx
def upgrade(c, as_json):
    """Convert an older store in place to format 6 (a log per run), or 7 on object storage.

    On disk, step by step: format 1 or 2 becomes format 3, then a store of
    one log (format 3, 4 or 5) becomes format 6. Each step keeps the store it
    converted as PATH.format<N>; an interrupted upgrade leaves the store
    usable, and running upgrade again finishes it. Bodies the old store's gc
    removed (deleted runs and records, redacted blobs) stay removed: each
    such object keeps its row, without its body, in its run's log; the
    deletions that cover them are replayed with them.

    On object storage, a store of one HEAD (format 3, 4 or 5, which this
    objstore reads but does not write) becomes format 7, a HEAD per run:
    the new logs are built beside the old keys and proved against them,
    then one compare-and-swap of the OBJSTORE marker moves the store.
    Killed before that swap, the bucket is the old store as it was; run
    upgrade again. The old keys (HEAD, chunk/, entry/) are left in place.

    \b
    Examples:
      objstore --store ./old-store upgrade
      objstore --store s3://bucket/prefix upgrade
    """
    from objstore.legacy.upgrade import upgrade_all

    steps = upgrade_all(c.store_path())
    if as_json:
        echo_json(_upgrade_json(steps))
        return
    for summary in steps:
        click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@click.command()
@click.argument("run", type=DAMAGED_RUN, required=False, default=None)
@click.option("--cut-after", "cut_after", type=click.IntRange(min=0), required=True, metavar="N",
              help="The last entry to keep: the end of the log's readable prefix (verify names the damage after it).")
@click.option("--reason", required=True, metavar="TEXT", help="Why (recorded in the log with the cut).")
@click.option("--key", "key_file", metavar="FILE", envvar="OBJSTORE_KEY", default=None,
              help="The owner's private key (PEM) that signs the repair (env OBJSTORE_KEY; default: the owner key 'objstore init' made).")
@click.option("--json", "as_json", is_flag=True, help="The cut as JSON: the entry kept last, the bytes removed, the note.")
@pass_ctx
def repair(c, run, cut_after, reason, key_file, as_json):
    """Cut damaged entries off the end of a log, on the record.

    With RUN, the log of that run (a store of a log per run: entry N is an
    entry of the run's own log); without it, the store log (on a store of one
    log, the store's one log).

    For a store that writers refuse because its log is damaged after entry N
    (a bad entry that was acknowledged, an entry that breaks a rule, a head
    witness ahead of the log). Removes every byte after entry N from the last
    segment; the repair's own entry records the cut (offset, length, BLAKE3 of
    the removed bytes) and a note under ref log/repairs (reason, time, signed by
    the owner key where the store has one). Whole segments are never removed.

    Prefer restoring a backup: whatever the cut bytes held is gone, acknowledged
    commits included. Run 'objstore verify' first: it names the damage and the
    last good entry.

    \b
    Arguments:
      RUN  the run whose log to cut (default: the store log); id, prefix or 'latest'

    \b
    Examples:
      objstore verify                     # corrupt-entry …: entry 42 at offset …
      objstore repair --cut-after 41 --reason "bit rot in entry 42, no backup"
      objstore repair RUN --cut-after 7 --reason "torn entry 8 of RUN's log"
    """
    from objstore.lifecycle.repair import repair as run_repair
    from objstore.storage import identity

    store = c.log().store
    store.engine.prefix_ok = store.logs.prefix_ok = True
    key = identity.default_key(key_file) if identity.owner_public(store) is not None else None
    summary = run_repair(store, cut_after, reason, key=key, run=run)
    if as_json:
        echo_json(summary)
        return
    click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@click.command()
@click.argument("run", type=RUN, required=False)
@click.option("--json", "as_json", is_flag=True, help="The runs rebuilt as JSON.")
@pass_ctx
def rebuild(c, run, as_json):
    """Drop and rebuild the materialized state cache from the raw objects.

    The state cache (SQLite tables derived from the records) only speeds reads
    up; rebuilding it loses nothing. Use it after exit 11 (state cache error).

    \b
    Arguments:
      RUN  rebuild only this run (default: every run); id, prefix or 'latest'

    \b
    Examples:
      objstore rebuild
      objstore rebuild RUN
    """
    log = c.log()
    runs_ = log.state.rebuild(log, run)
    if as_json:
        echo_json({"runs": runs_, "count": len(runs_)})
        return
    click.echo(f"rebuilt state for {len(runs_)} run(s)")


def _upgrade_json(steps: list[dict]) -> dict:
    """``upgrade --json``: the library's step summaries in one shape whatever happened — the format the store
    had (``from``; for a finished upgrade, read off the kept copy's suffix), the one it has now (``to``), where the
    old copy is kept (``backup``: the first step's, null when nothing moved) and the counts (summed over steps)."""
    done = [s for s in steps if not s["status"].startswith("already-format-")]
    newest = int(steps[-1]["status"].rpartition("-")[2]) if steps[-1]["status"].startswith("already-format-") else steps[-1].get("to", 6)
    if not done:
        return {"status": steps[-1]["status"], "path": steps[-1]["path"], "from": newest, "to": newest,
                "backup": None, "counts": {}}
    first = done[0]
    if first["status"] == "finished":
        suffix = str(first.get("backup", "")).rpartition(".format")[2]
        frm = int(suffix) if suffix.isdigit() else 1
    else:
        frm = first.get("from", 1)
    counts: dict[str, int] = {}
    for s in done:
        for k, v in s.items():
            if k not in ("status", "path", "from", "to", "backup") and isinstance(v, int) and not isinstance(v, bool):
                counts[k] = counts.get(k, 0) + v
    status = "finished" if any(s["status"] == "finished" for s in done) else "upgraded"
    return {"status": status, "path": first["path"], "from": frm, "to": newest, "backup": first.get("backup"),
            "counts": counts}


def _demo_epoch(at: float | None) -> float | None:
    """``demo --at``: a finite time whose every tick of the demo lies within years 1 to 9999, else a
    usage error (exit 2), before the store is opened or created."""
    if at is None:
        return None
    from objstore.demo import SPAN
    from objstore.runs.records import time_problem

    bad = time_problem(at) or time_problem(at + SPAN)
    if bad is not None:
        raise click.BadParameter(f"{bad} (the demo records {SPAN} s from EPOCH)")
    return at


def _command(ctx, name):
    """A command of the root group, looked up by name: demo shows the output of log, branches and diff
    without this module importing runs.py (no group module imports another)."""
    return ctx.find_root().command.get_command(ctx, name)


@click.command()
@click.option("--run", "run_id", metavar="ID", default=None, help="Record the demo under this run id (default: a new one).")
@click.option("--at", "at", metavar="EPOCH", type=float, default=None, callback=lambda ctx, param, v: _demo_epoch(v),
              help="Record with a fixed clock from EPOCH (1 s per record), so every id is reproducible.")
@click.option("--json", "as_json", is_flag=True, help="What was recorded as JSON: the store, the run id, its branches, the verify result.")
@pass_ctx
def demo(c, run_id, at, as_json):
    """Record an example run, rewind it, and show log, branches, diff and verify.

    Records a six-step run with a deterministic stand-in for a model (step 2
    retried, step 6 failing), rewinds it to step 3 and takes a new path on
    branch 1. Creates the store if absent; each call records a new run, the
    same every time but for ids and times (--at fixes those too).

    \b
    Examples:
      objstore demo
      objstore --store /tmp/demo-store demo
    """
    from objstore.demo import fixed_clock, six_step_run
    from objstore.runs.verify import verify as run_verify

    log = c.log(create=True)
    res = six_step_run(log, run_id, clock=fixed_clock(at) if at is not None else None)
    run = res["run"]
    if as_json:
        from objstore.runs import views

        problems = run_verify(log)
        echo_json({"store": log.store.root, "run": run, "branches": [views.branch(row) for row in log.branches(log.view(run))],
                   "verify": {"ok": not problems, "problems": [views.problem(p) for p in problems]}})
        if problems:
            sys.exit(1)
        return
    click.echo(f"store: {log.store.root}")
    click.echo(f"recorded run {run}: 6 steps on branch 0 (step 2 retried, step 6 failed), rewound to lsn 3, new path on branch 1\n")
    click.echo("$ objstore log --graph " + run)
    ctx = click.get_current_context()
    ctx.invoke(_command(ctx, "log"), run=run, graph=True, no_pager=True)
    click.echo("\n$ objstore branches " + run)
    ctx.invoke(_command(ctx, "branches"), run=run, as_json=False)
    fr = res["fork"]
    if fr.compensation_required:
        click.echo(f"compensation flagged on the fork: {', '.join(x['intent'] + ' (' + x['effect'] + ')' for x in fr.compensation)}")
    click.echo(f"\n$ objstore diff {run} 0 1")
    ctx.invoke(_command(ctx, "diff"), run=run, a=0, b=1, as_json=False)
    problems = run_verify(log)
    click.echo("\n$ objstore verify")
    for p in problems:
        click.echo(p.line())
    click.echo("verify: ok" if not problems else f"verify: {len(problems)} problem(s)")
    if problems:
        sys.exit(1)


@click.command()
@click.argument("dest", metavar="DEST")
@click.option("--json", "as_json", is_flag=True,
              help="What was copied as JSON: entries, anchor, files copied, reused and removed, bytes of log copied.")
@pass_ctx
def backup(c, dest, as_json):
    """Copy a consistent snapshot of the store to DEST while writers keep writing.

    DEST becomes a store of its own: every commit up to the moment the backup
    starts, nothing after it, and its own head witness. Writers never wait for
    a backup; a backup and gc wait for each other (they never overlap). Run it
    again into the same DEST
    and only what is new is copied: sealed segments already there are kept
    without being read, the last one gets only its new bytes, segments gc
    rewrote are replaced. Prints the anchor token of what it copied (as
    'objstore anchor' does) on stdout and what it did on stderr; 'objstore
    --store DEST verify --anchor TOKEN' proves the copy. A kill or a full disk
    leaves DEST a store that verifies clean (the older snapshot); run it again.
    A store with a log per run is copied log by log: the store log (the
    token is its), the catalog, then each run's log, each the same way.

    \b
    Arguments:
      DEST  the backup directory: absent (its parent must exist), empty, or an
            earlier backup of this store; anything else is refused (exit 5)

    \b
    Examples:
      objstore backup /mnt/backups/runs
      objstore backup /mnt/backups/runs --json
      objstore --store /mnt/backups/runs verify --anchor TOKEN
    """
    from objstore.lifecycle.backup import backup as run_backup
    from objstore.storage.store import Store

    with progress_bar("backup", as_json, sizes=True) as bar:  # bytes of log copied of the total
        result = run_backup(Store.open(c.store_path()), dest, progress=bar)  # the store alone: no run model to import
    if as_json:
        echo_json(result.to_json())
        return
    click.echo(result.anchor)
    what = f"{result.entries} entries" if result.logs == 1 else f"{result.logs} logs (the store log's {result.entries} entries and each run's)"
    click.echo(f"backup: {what} in {result.dest}: {result.copied} file(s) copied ({human_size(result.bytes_copied)} of log), "
               f"{result.reused} segment(s) kept, {result.removed} file(s) removed", err=True)
    for seg in result.recopied:
        click.echo(f"backup: segment {seg} of DEST was damaged: copied again from the store", err=True)
