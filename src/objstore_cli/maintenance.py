"""Maintenance: ``gc`` (with retention) and ``stats`` — thin click commands over objstore.lifecycle.gc and
objstore.lifecycle.stats."""

from __future__ import annotations

import click

from .output import echo_json, human_size, progress_bar
from .params import RUN, pass_ctx


@click.command()
@click.option("--delete-runs-older-than", "older_than", metavar="AGE", default=None,
              help="Retention by start: first delete (recorded, signed) every run STARTED more than AGE ago (its run_started "
                   "record's time), even one written to since; then gc. For a run still in use, see --delete-runs-inactive-for.")
@click.option("--delete-runs-inactive-for", "inactive_for", metavar="AGE", default=None,
              help="Retention by last activity: first delete (recorded, signed) every run whose newest entry (newest record or "
                   "fork on any branch, read now) is more than AGE old; then gc. AGE: 90d, 1.5d, 2.days, '2 hours', 1h30m, 2w, "
                   "an ISO date, ... (the forms --since takes).")
@click.option("--reason", metavar="TEXT", default=None, help="Why the runs are deleted (required with either retention option; recorded).")
@click.option("--key", "key_file", metavar="FILE", envvar="OBJSTORE_KEY", default=None,
              help="The key that signs the retention deletions (env OBJSTORE_KEY; default: the owner key).")
@click.option("--dry-run", is_flag=True, help="With a retention option: list the runs it would delete; write nothing.")
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True, metavar="SECONDS",
              help="How long to wait for another gc or a backup to finish.")
@click.option("--prune-unreferenced-older-than", "prune", metavar="AGE", default=None,
              help="Also remove committed blobs that nothing names (no record, ref or journal object), committed more than AGE ago "
                   "(recorded as redactions, so verify stays clean), and on object storage the keys no entry names (a lost commit's).")
@click.option("--run", "only_run", type=RUN, metavar="RUN", default=None,
              help="Collect only the log of run RUN (a store of a log per run, format 6): no other log is read or written.")
@click.option("--json", "as_json", is_flag=True, help="What gc did as JSON.")
@pass_ctx
def gc(c, older_than, inactive_for, reason, key_file, dry_run, timeout, prune, only_run, as_json):
    """Remove the bodies recorded deletions name, and repack sealed segments.

    Never automatic. gc seals the active segment, then rewrites every sealed
    segment that is not packed yet or holds a body a deletion or redaction
    names: the same entries (so every chain checksum and every anchor taken
    before still verifies), the objects merged into large compressed blocks,
    the removed bodies left out. A blob that a live record of another run
    still names is kept; a committed blob no record names is kept too
    (objstore stats counts them), unless --prune-unreferenced-older-than.
    On object storage (--store s3://...), gc rewrites in place the chunks
    and entry keys that hold a body that goes (same entries, same anchors). Writers and readers go on meanwhile; a
    reader that held a file gc replaced reads the new one, or gets exit 13.
    Killed at any point, the store stays readable and verifies clean; run gc
    again to finish. On a store of a log per run (format 6) gc collects the
    store log, then each run's log in turn, each one as above (a segment is
    named LOG:SEGMENT in the output); --run RUN collects only that run's log.

    With --delete-runs-older-than AGE --reason TEXT (retention by start), gc
    first writes the deletion of every run started before now - AGE, signed
    like 'objstore delete', then collects; --delete-runs-inactive-for AGE
    instead deletes the runs whose newest entry is older than that (a
    months-long thread written to today stays).

    \b
    Examples:
      objstore gc
      objstore gc --json
      objstore gc --prune-unreferenced-older-than 1h
      objstore gc --delete-runs-older-than 90d --reason "retention policy" --dry-run
      objstore gc --delete-runs-inactive-for 90d --reason "retention policy" --dry-run
    """
    from objstore.errors import InvalidInput
    from objstore.lifecycle import gc as G

    log = c.log()
    deleted: list[str] = []
    if older_than is not None and inactive_for is not None:
        raise click.UsageError("give one of --delete-runs-older-than (by start) and --delete-runs-inactive-for (by last activity)")
    option, given = ("--delete-runs-older-than", older_than) if older_than is not None else ("--delete-runs-inactive-for", inactive_for)
    if given is not None:
        age = G.parse_age(given)
        if reason is None or not reason.strip():
            raise InvalidInput(f"{option} needs --reason TEXT (it is recorded with each deletion)")
        old = G.runs_older_than(log, age) if older_than is not None else G.runs_inactive_for(log, age)
        if dry_run:
            if as_json:
                echo_json({"dry_run": True, "would_delete": old})
            else:
                for r in old:
                    click.echo(r)
                click.echo(f"{len(old)} run(s) would be deleted")
            return
        if old:
            from objstore.lifecycle import delete as D
            from objstore.storage import identity

            key = identity.default_key(key_file, store=log.store) if identity.owner_public(log.store) is not None else None
            D.delete_runs(log, old, reason=reason, key=key)
            deleted = old
    elif reason is not None or dry_run:
        raise click.UsageError("--reason and --dry-run go with --delete-runs-older-than or --delete-runs-inactive-for")
    prune_age = G.parse_age(prune) if prune is not None else None
    with progress_bar("gc", as_json) as bar:  # segments packed so far (how many gc packs is known as it goes)
        res = G.gc(log.store, timeout=timeout, progress=None if as_json else lambda m: click.echo(m, err=True),
                   prune_unreferenced_older_than=prune_age, step=(lambda n: bar(n, None, "segment(s) packed")) if bar else None,
                   run=only_run)
    if as_json:
        echo_json({**res.to_json(), "deleted_runs": deleted})
        return
    if deleted:
        click.echo(f"deleted {len(deleted)} run(s) {'older than' if older_than is not None else 'inactive for'} {given}")
    before, after = res.bytes_before, res.bytes_after
    click.echo(f"gc: rewrote {len(res.rewritten)} segment(s), removed {res.removed_records} record(s), {res.removed_blobs} blob(s), "
               f"{res.removed_other} other object(s); {human_size(before)} -> {human_size(after)} in the rewritten segments")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Every figure as JSON (docs/CLI.md gives the schema).")
@pass_ctx
def stats(c, as_json):
    """What the store holds and what it costs on disk.

    Segments (sealed, packed by gc, active) and their bytes against the
    canonical bytes of every object; runs (and deleted runs), records, blobs,
    the committed blobs no record names (gc keeps them), redacted blobs,
    deleted records and bodies gc removed; derived files (indexes, checkpoint,
    witness) and the state cache (state.db and its WAL) apart; the anchor of
    the log's head. Counts come from the log's index rows: no body is read.
    On object storage (--store s3://...) the bucket's keys and bytes by kind
    (HEAD, marker, chunks, large entries; one LIST) stand for segments and
    derived files.

    \b
    Examples:
      objstore stats
      objstore stats --json
    """
    from objstore.lifecycle.stats import stats as run_stats

    st = run_stats(c.log().store)
    if as_json:
        echo_json(st)
        return
    seg, bucket = st["segments"], st["bucket"]
    ratio = f"{st['stored_ratio']:.2f}x" if st["stored_ratio"] is not None else "-"
    d, sc = st["derived_bytes"], st["state_cache_bytes"]
    if bucket is not None:  # a store on object storage: its keys stand for segments and derived files
        kinds = ", ".join(f"{k} {v['keys']} ({v['bytes']} bytes)" for k, v in bucket["by_kind"].items() if v["keys"])
        where = [f"bucket           {bucket['keys']} keys, {bucket['bytes']} bytes = {ratio} the canonical {st['canonical_bytes']}",
                 f"bucket keys      {kinds}"]
    else:
        where = [f"segments         {seg['count']} ({seg['packed']} packed), {seg['bytes']} bytes = {ratio} the canonical {st['canonical_bytes']}"]
    for line in (
        f"store            {st['store']}",
        f"entries          {st['entries']}",
        *where,
        f"runs             {st['runs']} (+{st['deleted_runs']} deleted)",
        f"records          {st['records']} ({st['deleted_records']} deleted in runs that remain)",
        f"blobs            {st['blobs']} ({st['unreferenced_blobs']} named by no record, {st['redacted_blobs']} redacted)",
        f"removed bodies   {st['removed_bodies']}",
        *([f"derived files    indexes {d['indexes']}, checkpoint {d['checkpoint']}, witness {d['witness']} bytes"] if d is not None else []),
        f"state cache      state.db {sc['state.db']}, -wal {sc['state.db-wal']}, -shm {sc['state.db-shm']} bytes",
        f"anchor           {st['anchor']}",
    ):
        click.echo(line)


@click.command("index")
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON: {built, runs, ids}.")
@pass_ctx
def index_cmd(c, as_json):
    """Build the id -> run index, so a bare object id is found fast.

    On a store with a log per run (format 6) an id printed as RUN:ID
    opens that run's log alone; a bare id (show ID, cat ID) names no run,
    and without this index finding it opens every run's log, newest
    first. The index lists every object id with the run holding it
    (index/ids, 36 bytes per id); a look-up confirms each hit against the
    run's log, and runs started after the index are searched first, so a
    stale or edited index costs time, never a wrong answer. gc rebuilds it.
    A store with one log finds every id in that log: nothing to build.

    \b
    Examples:
      objstore index
      objstore index --json
    """
    got = c.log().store.build_id_index()
    if as_json:
        echo_json(got)
    elif got["built"]:
        click.echo(f"index: {got['ids']} ids of {got['runs']} runs")
    else:
        click.echo("index: this store has one log, which finds every id itself; nothing to build")
