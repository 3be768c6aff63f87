"""Objects and refs: ``cat``, ``show``, ``refs``, ``put-blob`` — thin click commands over the Store."""

from __future__ import annotations

import json
import sys

import click

from .output import echo_json
from .params import RUN, pass_ctx


def _raw_option(f):
    return click.option("--raw", is_flag=True,
                        help="Write binary bytes even to a terminal (by default a terminal gets a one-line summary instead).")(f)


@click.command()
@click.argument("oid")
@click.option("--body", is_flag=True, help="A blob's body only, without the object header (streamed; how callers fetch the prompt or output a view refers to).")
@_raw_option
@pass_ctx
def cat(c, oid, body, raw):
    """Write an object's raw canonical bytes (header included) to stdout.

    On a terminal, bytes that are not text print a one-line summary instead
    (--raw overrides); into a pipe or a file they go out as they are.

    \b
    Arguments:
      OID  an object id (64 hex digits) or a unique prefix of one

    \b
    Examples:
      objstore cat ID > object.bin
      objstore cat --body ID | less
    """
    from objstore.runs import views
    from objstore.storage import codec

    store = c.log().store
    key = store.resolve_id(oid)
    if not raw and sys.stdout.isatty():  # never dump binary bytes on a terminal
        data = store.get_blob(key) if body else store.get_raw(key)
        if views.text_or_none(data) is None:
            click.echo(views.binary_line(store.get(key)[0] if not body else codec.BLOB, len(data)))
            return
        sys.stdout.buffer.write(data)
    elif body:
        store.copy_blob_to(key, sys.stdout.buffer)
    else:
        sys.stdout.buffer.write(store.get_raw(key))
    sys.stdout.buffer.flush()


@click.command()
@click.argument("oid")
@click.option("--json", "as_json", is_flag=True, help="Print the object as JSON (docs/CLI.md, 'object').")
@_raw_option
@pass_ctx
def show(c, oid, as_json, raw):
    """Show one object: its type, id and fields (blobs: their text).

    A LangGraph checkpoint record also shows its metadata decoded and a summary of each channel
    value (messages as type and content), read through the saver's serializer.

    A binary blob shows a one-line summary on a terminal (--raw overrides).

    \b
    Arguments:
      OID  an object id (64 hex digits) or a unique prefix of one

    \b
    Examples:
      objstore show ID
      objstore show ID --json
    """
    from objstore.runs import views
    from objstore.storage import codec

    log = c.log()
    store = log.store
    key = store.resolve_id(oid)
    otype, value = store.get(key)
    log.check_object(key, otype, value)  # what verify calls forged is not shown (exit 6)
    if as_json:
        echo_json(views.object_(key, otype, value))
        return
    click.echo(f"{otype} {key.hex()}")
    if otype == codec.BLOB:
        click.echo(f"size {len(value)}")
        click.echo("")
        if views.text_or_none(value) is None and not raw and sys.stdout.isatty():
            click.echo(views.binary_line(otype, len(value)))
        else:  # text, or bytes going to a pipe (or --raw): as they are
            sys.stdout.flush()
            sys.stdout.buffer.write(value + b"\n")
            sys.stdout.buffer.flush()
    else:
        click.echo(json.dumps(codec.to_jsonable(value), indent=2, sort_keys=True))
        if otype == codec.RECORD and value.get("kind") == "x.langgraph.checkpoint":
            _langgraph_lines(log, value)


def _langgraph_lines(log, value) -> None:
    """A LangGraph checkpoint decoded through the saver's serializer (its allow-list), when LangGraph is here."""
    try:
        from objstore.integrations.langgraph.present import describe
    except ImportError:
        click.echo("\n(LangGraph is not installed: the checkpoint's metadata and values are not decoded)")
        return
    for line in describe(log, value):
        click.echo(line)


@click.command()
@click.argument("prefix", required=False, default="")
@click.option("--json", "as_json", is_flag=True, help="Print the refs as JSON (docs/CLI.md, 'ref').")
@click.option("--log", "with_log", is_flag=True, help="Also print each ref's moves, read from the log's commit entries.")
@pass_ctx
def refs(c, prefix, as_json, with_log):
    """List refs (optionally under PREFIX) with their values.

    Refs are the named pointers of the store: run/RUN/branch/N (a branch's head
    record), run/RUN/live (which branch is live), journals, grants, keys.

    \b
    Arguments:
      PREFIX  only refs whose name starts with it (default: all)

    \b
    Examples:
      objstore refs run/
      objstore refs --log --json
    """
    store = c.log().store
    # one position per log for both: the refs as of a snapshot, and the moves of the entries up to it
    rows = []
    for name, value, moves in store.refs_snapshot(prefix, with_moves=with_log):
        row = {"name": name, "value": value.hex() if isinstance(value, bytes) else value}
        if with_log:
            row["log"] = moves
        rows.append(row)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo(f"{row['value']}  {row['name']}")
        for e in row.get("log", []):
            click.echo(f"    entry {e['entry']}: {e['old']} -> {e['new']}  {e['reason']}")


@click.command("put-blob")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="The blob's id and size (bytes stored) as JSON.")
@click.option("--run", "run", type=RUN, default=None, metavar="RUN",
              help="Store it in this run's log (a store with a log per run); default: the store log.")
@pass_ctx
def put_blob(c, path, as_json, run):
    """Store a file (or - for stdin) as a blob and print its id.

    The input is read once and the id is the hash of exactly the bytes stored.
    On a store with a log per run (format 6) the blob is stored in the store
    log, or with --run in that run's log; a record that names it later
    stores a copy in its own run's log (each run holds the bodies it names).

    \b
    Arguments:
      PATH  the file to store, or - to read standard input

    \b
    Examples:
      objstore put-blob prompt.txt
      echo hello | objstore put-blob -
    """
    log = c.log()
    store = log.store
    if path == "-":
        counted = _Counted(sys.stdin.buffer)
        with store.batch_in(run):
            oid = store.put_blob_stream(counted)
    else:
        from objstore.errors import StorageOSError

        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below, after the store read it once
        except OSError as e:
            raise StorageOSError(f"read {path!r}", e) from None
        with f, store.batch_in(run):
            counted = _Counted(f)
            oid = store.put_blob_stream(counted)
    if as_json:
        echo_json({"id": oid, "size": counted.size})
        return
    click.echo(oid.hex())


class _Counted:
    """A binary stream that counts what is read from it: the size of the blob put-blob stored, known
    without reading the input twice (it may be stdin) or the stored blob back."""

    def __init__(self, f):
        self.f, self.size = f, 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.f.read(n)
        self.size += len(chunk)
        return chunk
