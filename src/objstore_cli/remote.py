"""Moving runs between stores: ``push`` and ``clone`` — thin click commands over
objstore.lifecycle.transfer (one function for both directions: local -> S3, S3 -> local, local -> local)."""

from __future__ import annotations

import os
import sys

import click

from .output import echo_json, human_size, progress_bar
from .params import RUN, pass_ctx

_NOTES = """\b
The target's log is its own: its entries are re-chained, so its anchors
differ from the source's ('objstore anchor' on each end); its runs' branch
heads, live branches and every object are the source's, byte for byte.
A record a recorded deletion covers travels with its body while the source
still has it (the target withholds it at once); the target is gc'd
afterwards ('objstore gc' there), which removes it from its files or keys.

\b
Exit codes: 0 every run landed or was there already; 7 a run conflicted
(the others were pushed); 12 a run needs an object the source's gc removed
or a redacted blob (not sent; the others were pushed)."""


def _open_target(url: str):
    from objstore.storage.store import Store

    return Store.open(url, create=True)


def _copy(source, target, runs, verb: str, as_json: bool, fresh: bool = False):
    """transfer, with a progress bar on a terminal (runs done of the total, bytes written so far); ``fresh``: the
    target is the clone this command just made."""
    from objstore.lifecycle.transfer import transfer

    with progress_bar(verb, as_json) as bar:
        step = (lambda done, total, size: bar(done, total, f"runs  {human_size(size)}")) if bar else None
        return transfer(source, target, runs, step=step, fresh=fresh)


def _report(rep, verb: str, as_json: bool) -> None:
    if as_json:
        echo_json(rep.to_json())
    else:
        click.echo(f"{verb}: {rep.source} -> {rep.target}: {len(rep.landed)} run(s) written, {len(rep.already)} already there, "
                   f"{len(rep.conflicts)} conflict(s), {len(rep.erased)} not sendable, {len(rep.deleted)} deleted (not sent); "
                   f"{rep.entries} entr{'y' if rep.entries == 1 else 'ies'}, {rep.objects} object(s), {human_size(rep.bytes)}; store refs {rep.store_refs}")
        for run, ref, detail in rep.conflicts:
            click.echo(f"conflict: {'run ' + run if run else 'store'}: {ref}: {detail}")
        for run, detail in rep.erased:
            click.echo(f"not sent: run {run}: {detail}")
        for run in rep.deleted:
            click.echo(f"deleted in the source, not sent: run {run}")
        if rep.gc is not None:
            click.echo(f"gc of the target: {rep.gc}")
    if rep.conflicts:
        sys.exit(7)
    if rep.erased:
        sys.exit(12)


@click.command("push", epilog=_NOTES)
@click.argument("url", metavar="URL")
@click.option("--run", "runs", multiple=True, type=RUN, metavar="RUN",
              help="Push this run (an id, a unique prefix, latest, or its labels; repeatable); default: every run, and a copy's source run with it.")
@click.option("--json", "as_json", is_flag=True, help="What was pushed as JSON (see docs/CLI.md).")
@pass_ctx
def push(c, url, runs, as_json):
    """Copy this store's runs to another store, fast-forward only.

    Store-level refs first (owner key, schemas, subject grants, redactions),
    then each run in one commit (plus one per further element of its journal,
    segment, grant or deletion chains). A run whose branch the target moved
    elsewhere is a conflict naming the run and the ref: nothing of it is
    written, the other runs go on. A copy's source run is pushed first. A
    second push writes nothing. Between two stores with a log per run on
    disk, a run's log is copied entry for entry: its head (its anchor) is
    the same at both ends.

    \b
    Arguments:
      URL  the target: s3://bucket/prefix or a directory; created if absent

    \b
    Examples:
      objstore push s3://runs/team-a
      objstore push /mnt/mirror/runs --run r20260101-120000000000-0a1b2c3d4e5f
      objstore --store ./runs push s3://runs/team-a --json
    """
    from objstore.storage.store import Store

    source = Store.open(c.store_path())
    target = _open_target(url)
    _report(_copy(source, target, list(runs) or None, "push", as_json), "push", as_json)


@click.command("clone", epilog=_NOTES)
@click.argument("url", metavar="URL")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="What was copied as JSON (the push schema, see docs/CLI.md).")
def clone(url, directory, as_json):
    """Copy a store (s3://bucket/prefix or a directory) into DIR/.objstore, like git clone.

    The same copy as 'objstore push', the other way: every run. DIR is a
    directory holding the new store, as git's holds .git: 'cd DIR' and every
    command finds it ('objstore --store DIR ...' too); its run heads are the
    source's.

    \b
    Arguments:
      URL  the source store: s3://bucket/prefix or a directory
      DIR  the directory to hold the new store (DIR/.objstore): absent or empty (anything else: exit 5)

    \b
    Examples:
      objstore clone s3://runs/team-a ./runs
      objstore clone s3://runs/team-a ./runs --json
    """
    from objstore.errors import InvalidInput
    from objstore.storage.store import Store
    from objstore.storage.storedir import DEFAULT_DIR, is_remote

    if is_remote(directory):
        raise InvalidInput(f"clone makes a local store: {directory} is not a directory (push to it instead)")
    if os.path.lexists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise InvalidInput(f"clone target {directory} exists and is not an empty directory")
    from objstore.lifecycle.delete import check_authority

    source = Store.open(url)  # before DIR is made: a missing source leaves nothing behind
    check_authority(source)  # so does a forged deletion the copy would carry (transfer refuses it too)
    target = Store.init(os.path.join(directory, DEFAULT_DIR))
    _report(_copy(source, target, None, "clone", as_json, fresh=True), "clone", as_json)
