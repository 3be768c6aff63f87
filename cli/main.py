"""The ``objstore`` command line: thin click commands over the library.

Each command parses arguments, calls one library function and prints. Any
``ObjstoreError`` becomes one line on stderr and its documented exit code (see
``objstore.errors``); no traceback reaches the user for bad input.

Imports on demand (issue 15): at module level only click, the stdlib and ``objstore.errors``, so
building the click app (``--help``, completion, a usage error) loads no storage engine, codec,
zstandard, SQLite, rich, cryptography or T-745 module. Each command imports what it uses in its
body; tests/test_startup.py pins the list of modules that must stay out.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import TYPE_CHECKING

import click

import objstore
from objstore.errors import Interrupted, InvalidInput, ObjstoreError, StateCacheError, StorageOSError, StoreNotFound

if TYPE_CHECKING:
    from objstore.runlog import RunLog

INT64_MAX = 2**63 - 1


class Int64(click.ParamType):
    """An integer option or argument: what is not an integer is a usage error (exit 2); an integer
    the store cannot hold (outside int64) or below ``min`` is invalid input (exit 5), as in JSON
    input — never a traceback from deeper down."""

    name = "integer"

    def __init__(self, min: int = -(2**63)) -> None:
        self.min = min

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            try:
                n = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{value!r} is not an integer", param, ctx)
        if not self.min <= n <= INT64_MAX:
            name = param.get_error_hint(ctx) if param is not None else "value"
            raise InvalidInput(f"{name} must be an integer in {self.min}..{INT64_MAX}, got {n}")
        return n


INT64 = Int64()

EXIT_CODES_HELP = """\b
Exit codes: 0 ok; 1 verify found problems; 2 usage; 3 no store;
4 not found; 5 invalid input (incl. a bad key file); 6 integrity error;
7 conflict; 8 refused (not the owner key, unauthenticated, job,
revoked, never granted, stale or replayed request); 9 limit exceeded;
10 operating-system error (incl. a journal host that cannot be reached);
11 state cache error (run 'objstore rebuild'); 130 interrupted (Ctrl-C).
Under --json an error is one JSON object on stderr: {"error", "message", "exit"}."""


def _echo_json(value) -> None:
    from objstore import codec

    click.echo(codec.canonical_json(value).decode())


def _table_classes():
    """(Console, Table): rich's when stdout is a terminal; plain stand-ins otherwise, so rich (some
    30 ms of imports) loads only when a table goes to a TTY (issue 15) and a pipe gets one line per
    row that grep and cut can read, instead of rich's boxes wrapped at 80 columns."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        return Console, Table
    return _PlainConsole, _PlainTable


class _PlainTable:
    """The part of rich.table.Table the commands use: a title, columns, rows (styles ignored)."""

    def __init__(self, title: str | None = None):
        self.title = title
        self.columns: list[str] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, header: str) -> None:
        self.columns.append(header)

    def add_row(self, *cells: str, style: str | None = None) -> None:
        self.rows.append(cells)

    def lines(self):
        """The title, the header and one line per row, columns two spaces apart (the last unpadded)."""
        # a row has one cell per column (rich's rule too); zip(strict=True) says so if one does not
        widths = [max(len(r[i]) for r in [self.columns, *self.rows]) for i in range(len(self.columns))]
        if self.title:
            yield self.title
        for r in [self.columns, *self.rows]:
            yield "  ".join([c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]).rstrip()


class _PlainConsole:
    """The part of rich.console.Console the commands use: print a line of text or a table."""

    def print(self, what) -> None:
        if isinstance(what, _PlainTable):
            for line in what.lines():
                click.echo(line)
        else:  # the only markup the commands write: [bold]...[/]
            click.echo(str(what).replace("[bold]", "").replace("[/]", ""))


class Ctx:
    def __init__(self, path: str | None):
        self.path = path
        self._log = None

    def store_path(self, create: bool = False) -> str:
        """--store / OBJSTORE_DIR, else the .objstore found in the current directory or a parent
        (``store.discover``); with ``create``, ./.objstore when none is found."""
        from objstore.store import DEFAULT_DIR, discover

        if self.path:
            return self.path
        try:
            return discover()
        except StoreNotFound:
            if create:
                return os.path.abspath(DEFAULT_DIR)
            raise

    def log(self, create: bool = False) -> RunLog:
        if self._log is None:
            from objstore.runlog import RunLog
            from objstore.store import Store

            self._log = RunLog(Store.open(self.store_path(create), create=create))
            problem = self._log.store.engine.witness_problem
            if problem is not None:  # readers still answer from the log; writers refuse (exit 6)
                click.echo(f"objstore: warning: {problem[0]}: {problem[1]} (run 'objstore verify')", err=True)
        return self._log


pass_ctx = click.make_pass_decorator(Ctx)


class RunType(click.ParamType):
    """A RUN argument: an exact id, a unique prefix of an id or of its short id, 'latest' or
    'latest~N' (``objstore.resolve.resolve_run``); the command receives the full run id."""

    name = "run"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        c = ctx.find_object(Ctx) if ctx is not None else None
        if c is None:  # no store context (e.g. completion): leave it as given
            return value
        from objstore.resolve import resolve_run

        return resolve_run(c.log(), value)

    def shell_complete(self, ctx, param, incomplete):
        """Run ids of the store the command line names (and 'latest'): objstore.completion."""
        from click.shell_completion import CompletionItem

        from objstore import completion

        return [CompletionItem(r) for r in completion.runs(_completion_store(ctx), incomplete)]


RUN = RunType()


def _completion_store(ctx):
    """The store a command line being completed would use (--store, OBJSTORE_DIR, discovery), or None."""
    from objstore import completion

    return completion.open_store(ctx.find_root().params.get("store"))


def _completing_run(ctx):
    """The RUN given earlier on the line being completed. click leaves the params empty while an
    option still waits for its value ('log RUN --branch <TAB>'), so the words before it are parsed
    again without that option."""
    run = ctx.params.get("run")
    if run is not None:
        return run
    import shlex

    try:
        words = shlex.split(os.environ.get("COMP_WORDS", ""))
        words = words[: int(os.environ.get("COMP_CWORD", len(words)))]
        at = len(words) - 1 - words[::-1].index(ctx.info_name)
        rest = words[at + 1:]
        if rest and rest[-1].startswith("-"):
            rest = rest[:-1]
        return ctx.command.make_context(ctx.info_name, rest, parent=ctx.parent, resilient_parsing=True).params.get("run")
    except Exception:  # completion never fails loudly
        return None


def _complete_branch(ctx, param, incomplete):
    """Branch numbers of the RUN given earlier on the line being completed."""
    from objstore import completion

    return completion.branches(_completion_store(ctx), _completing_run(ctx), incomplete)


def _json_wanted(args) -> bool:
    """--json anywhere on the command line (before a '--' that ends the options)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def _fail(payload: dict, line: str, as_json: bool):
    """Report one error on stderr (one line, or one JSON object under --json) and exit with its code.
    Control characters (a newline in a path, say) are escaped, so the line stays one line."""
    if as_json:
        from objstore import codec

        click.echo(codec.canonical_json(payload).decode(), err=True)
    else:
        line = "".join(ch if ch >= " " and ch != "\x7f" else repr(ch)[1:-1] for ch in line)
        click.echo(f"objstore: error: {line}", err=True)
    sys.exit(payload["exit"])


def _usage_message(e: click.UsageError) -> str:
    path = e.ctx.command_path if e.ctx is not None else "objstore"
    return f"{e.format_message()} (see '{path} --help')"


def _views():
    """objstore.views, for the error shapes: imported only when there is an error to report."""
    from objstore import views

    return views


def _is_sqlite_error(e: Exception) -> bool:
    """A sqlite3 error (from the state cache)? sqlite3 is imported only by commands that open the
    cache, so where it was never imported no sqlite3 error can have been raised."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(e, sqlite3.Error)


class Group(click.Group):
    """The root group: every error becomes one line on stderr (one JSON object under --json)
    and its documented exit code; Ctrl-C is exit 130; never a traceback for bad input."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None  # before click turns it into Abort (and a blank line)
        except BrokenPipeError:  # the reader went away (| head): not an error
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - swallow the final flush
            except OSError:
                pass
            sys.exit(0)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        as_json = _json_wanted(argv)
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except ObjstoreError as e:
            _fail(_views().error(e), str(e), as_json)
        except (KeyboardInterrupt, click.Abort):
            e = Interrupted()
            _fail(_views().error(e), str(e), as_json)
        except click.UsageError as e:
            msg = _usage_message(e)
            _fail(_views().usage_error(msg), msg, as_json)
        except click.ClickException as e:
            msg = e.format_message()
            _fail({"error": "usage-error" if e.exit_code == 2 else "error", "message": msg, "exit": e.exit_code}, msg, as_json)
        except OSError as e:  # a net: the library wraps the OS errors it meets as StorageOSError
            err = StorageOSError(f"run objstore {' '.join(argv[:1])}".rstrip(), e)
            _fail(_views().error(err), str(err), as_json)
        except Exception as e:
            if not _is_sqlite_error(e):
                raise
            err = StateCacheError("use it", e)  # the state cache; `objstore rebuild` remakes it from the objects
            _fail(_views().error(err), str(err), as_json)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=Group, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", "store", metavar="PATH", envvar="OBJSTORE_DIR", help="Store directory (env OBJSTORE_DIR; default: the .objstore in this directory or the nearest parent, like git; OBJSTORE_CEILING_DIRECTORIES stops the search).")
@click.version_option(objstore.__version__, package_name="objstore")
@click.pass_context
def cli(ctx, store):
    """objstore: a content-addressed, append-only store for AI-agent run histories.

    Every record is an immutable object named by its BLAKE3 hash; rewinds fork
    a new branch and delete nothing; `verify` proves the history by hashing.

    \b
    Words used in this help:
      run          one agent run; its records form numbered branches (0, 1, ...)
      LSN          a record's position on its branch: 0, 1, 2, ...
      live branch  the branch that queries, appends and export use by default
      fork         the object at the root of a new branch: where it left its parent
      compensation a committed side effect that is not idempotent (a refund, an
                   email) that a rewind went back past: flagged on the fork,
                   because it happened and may need undoing by hand

    \b
    Examples:
      objstore demo
      objstore runs
      objstore log latest
      objstore --store ./runs verify --json
    """
    ctx.obj = Ctx(store)


# -- core --------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Store path, owner key path and public key as JSON.")
@pass_ctx
def init(c, as_json):
    """Create an empty store and the owner key (both kept if already there).

    The owner key pair is made outside the store, at $OBJSTORE_KEYS/owner.key
    (default ~/.config/objstore/keys/owner.key, mode 0600); the store keeps only
    its public key (write-once ref keys/owner). The owner key signs grants and is
    the default --key. Running init again is fine while that key matches. A store
    made another way (a library call, ingest) adopts the default owner key the
    first time a signing command runs on it without --key, as init would.

    \b
    Examples:
      objstore --store ./runs init
      objstore init --json
    """
    from objstore import identity
    from objstore.store import DEFAULT_DIR, Store

    target = os.path.abspath(c.path or DEFAULT_DIR)  # never a parent's store: init makes ./.objstore
    s = Store.init(target)
    key, created = identity.ensure_owner_key(s)
    path = identity.owner_key_path()
    if as_json:
        _echo_json({"store": s.root, "owner_key": path, "owner_public": key.public, "created": created})
        return
    click.echo(f"{'initialised' if s.created else 'already initialised'} objstore store in {s.root}")
    click.echo(f"owner key {path} ({'created' if created else 'existing, matches the store'}); public {key.public}")


def _raw_option(f):
    return click.option("--raw", is_flag=True,
                        help="Write binary bytes even to a terminal (by default a terminal gets a one-line summary instead).")(f)


@cli.command()
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
    from objstore import codec, views

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


@cli.command()
@click.argument("oid")
@click.option("--json", "as_json", is_flag=True, help="Print the object as JSON (docs/CLI.md, 'object').")
@_raw_option
@pass_ctx
def show(c, oid, as_json, raw):
    """Show one object: its type, id and fields (blobs: their text).

    A binary blob shows a one-line summary on a terminal (--raw overrides).

    \b
    Arguments:
      OID  an object id (64 hex digits) or a unique prefix of one

    \b
    Examples:
      objstore show ID
      objstore show ID --json
    """
    from objstore import codec, views

    store = c.log().store
    key = store.resolve_id(oid)
    otype, value = store.get(key)
    if as_json:
        _echo_json(views.object_(key, otype, value))
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


@cli.command()
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
    # one log position for both: the refs as of a snapshot, and the moves of the entries up to it
    snap = store.engine.snapshot()
    refs_now = store.engine.refs_at(prefix, snap)
    rows = [{"name": name, "value": value.hex() if isinstance(value, bytes) else value} for name, value in sorted(refs_now.items())]
    if with_log:
        moves: dict = {}
        for m in store.ref_log(upto=snap.entry):
            if m["name"].startswith(prefix):
                moves.setdefault(m["name"], []).append(m)
        for row in rows:
            row["log"] = moves.get(row["name"], [])
    if as_json:
        _echo_json(rows)
        return
    for row in rows:
        click.echo(f"{row['value']}  {row['name']}")
        for e in row.get("log", []):
            click.echo(f"    entry {e['entry']}: {e['old']} -> {e['new']}  {e['reason']}")


@cli.command("put-blob")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@pass_ctx
def put_blob(c, path):
    """Store a file (or - for stdin) as a blob and print its id.

    The input is read once and the id is the hash of exactly the bytes stored.

    \b
    Arguments:
      PATH  the file to store, or - to read standard input

    \b
    Examples:
      objstore put-blob prompt.txt
      echo hello | objstore put-blob -
    """
    store = c.log().store
    if path == "-":
        oid = store.put_blob_stream(sys.stdin.buffer)
    else:
        oid = store.put_blob_file(path)
    click.echo(oid.hex())


class _VerifyBar:
    """verify's progress on stderr (a terminal only): objects and bytes done of the total, a rate."""

    def __init__(self, store):
        from rich.console import Console
        from rich.filesize import decimal
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

        from objstore.verify import progress_totals

        self.objects, self.bytes = progress_totals(store)
        self._size = decimal
        self.bar = Progress(TextColumn("verify"), BarColumn(), TextColumn("{task.fields[what]}"), TransferSpeedColumn(),
                            TimeRemainingColumn(), console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task("verify", total=self.bytes, what=self._what(0, 0))
        self.bar.start()

    def _what(self, n: int, b: int) -> str:
        tot_o = "?" if self.objects is None else f"{self.objects:,}"
        tot_b = "?" if self.bytes is None else self._size(self.bytes)
        return f"objects {min(n, self.objects or n):,}/{tot_o}  bytes {self._size(b)}/{tot_b}"

    def update(self, objects_done: int, bytes_done: int) -> None:
        self.bar.update(self.task, completed=bytes_done, what=self._what(objects_done, bytes_done))

    def stop(self) -> None:
        self.bar.stop()


def _verify_bar(store):
    return _VerifyBar(store)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the problems as a JSON list (docs/CLI.md, 'problem'); no progress bar.")
@click.option("--no-state", is_flag=True, help="Skip comparing the state cache (derived SQLite tables) with a re-fold of the records.")
@click.option("--anchor", "anchor", metavar="TOKEN", help="Also prove the log still holds the history this anchor (from 'objstore anchor') names.")
@click.option("--jobs", "-j", "jobs", type=click.IntRange(min=1, max=1024), default=None, metavar="N",
              help="Processes that check segments in parallel (default: $OBJSTORE_VERIFY_JOBS, else one per core once the log "
                   "passes 8 MiB); 1: all in this process. The report is the same.")
@pass_ctx
def verify(c, as_json, no_state, anchor, jobs):
    """Re-read the whole log: entries, checksums, objects, refs, chains, forks, the state cache.

    Prints one line per problem (code, object or ref, detail, path) and exits 1
    if any were found, 0 if the store is clean. Torn tails left by a crash and
    past cuts of them are printed as notes on stderr: they do not fail verify.

    \b
    Examples:
      objstore verify
      objstore verify --json
      objstore verify --anchor TOKEN
      objstore verify --jobs 1
    """
    from objstore import views
    from objstore.verify import verify_report

    log = c.log()
    bar = _verify_bar(log.store) if not as_json and sys.stderr.isatty() else None
    try:
        report = verify_report(log, check_state=not no_state, anchor=anchor, progress=bar.update if bar else None, jobs=jobs)
    finally:
        if bar:
            bar.stop()
    problems = report.problems
    if as_json:
        _echo_json([views.problem(p) for p in problems])
    else:
        for p in problems:
            click.echo(p.line())
    for note in report.notes:
        click.echo(f"note: {note.line()}", err=True)
    if not problems and not as_json:
        click.echo(f"verify: ok ({report.entries} entries, {report.objects} objects)", err=True)
    sys.exit(1 if problems else 0)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the token with its version, entry, segment, offset, checksum and time as JSON.")
@pass_ctx
def anchor(c, as_json):
    """Print an anchor of the log's current head; writes nothing.

    Keep the token elsewhere; 'objstore verify --anchor TOKEN' later proves the
    log still holds that exact history (no truncation, rollback or rewrite).

    \b
    Examples:
      objstore anchor > anchor.txt
      objstore anchor --json
    """
    from objstore.verify import anchor_info

    info = anchor_info(c.log().store)
    if as_json:
        _echo_json(info)
    else:
        click.echo(info["token"])


@cli.command()
@pass_ctx
def upgrade(c):
    """Convert a format-1 or format-2 store in place to format 3 (the current one).

    The old store is kept as PATH.format1 or PATH.format2; an interrupted upgrade
    leaves it usable, and running upgrade again finishes it.

    \b
    Examples:
      objstore --store ./old-store upgrade
    """
    from objstore.upgrade import upgrade as run_upgrade

    summary = run_upgrade(c.store_path())
    click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@cli.command()
@click.option("--cut-after", "cut_after", type=click.IntRange(min=0), required=True, metavar="N",
              help="The last entry to keep: the end of the log's readable prefix (verify names the damage after it).")
@click.option("--reason", required=True, metavar="TEXT", help="Why (recorded in the log with the cut).")
@click.option("--key", "key_file", metavar="FILE", envvar="OBJSTORE_KEY", default=None,
              help="The owner's private key (PEM) that signs the repair (env OBJSTORE_KEY; default: the owner key 'objstore init' made).")
@pass_ctx
def repair(c, cut_after, reason, key_file):
    """Cut damaged entries off the end of the log, on the record.

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
    Examples:
      objstore verify                     # corrupt-entry …: entry 42 at offset …
      objstore repair --cut-after 41 --reason "bit rot in entry 42, no backup"
    """
    from objstore import identity
    from objstore.repair import repair as run_repair

    store = c.log().store
    store.engine.prefix_ok = True
    key = identity.default_key(key_file) if identity.owner_public(store) is not None else None
    summary = run_repair(store, cut_after, reason, key=key)
    click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


# -- runs ----------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON (docs/CLI.md, 'run').")
@pass_ctx
def runs(c, as_json):
    """List runs with their live branch and branch count.

    The live branch is the one queries, appends and export use by default (a
    rewind makes its new branch live). A unique prefix of a run id, or its
    short id, works wherever a RUN is asked for.

    \b
    Examples:
      objstore runs
      objstore runs --json
    """
    from objstore import views
    from objstore.resolve import short_ids

    log = c.log()
    rows = [views.run(log.view(run)) for run in log.runs()]
    if as_json:
        _echo_json(rows)
        return
    short = short_ids(r["run"] for r in rows)
    for r in rows:
        n = r["branch_count"]
        name = r["run"] if short[r["run"]] == r["run"] else f"{short[r['run']]}  {r['run']}"
        click.echo(f"{name}  live branch {r['live_branch']}  ({n} branch{'es' if n != 1 else ''})")


def _out(lines, no_pager: bool) -> None:
    """Print lines; through a pager ($PAGER, default 'less -FRX') only when stdout is a terminal."""
    if not no_pager and sys.stdout.isatty():
        os.environ.setdefault("PAGER", "less -FRX")
        click.echo_via_pager(line + "\n" for line in lines)
        return
    for line in lines:
        click.echo(line)


def _grouped(run, view, first, all_branches, entries):
    """The default layout: a header per branch group, one line per record or fork."""
    from objstore import history

    shown = None
    for b, r, fk in entries:
        if b != shown:
            shown = b
            tag = " (live)" if b == view.live else ""
            upto = f" up to lsn {r.lsn}" if r is not None and b != first and not all_branches else ""
            yield f"== run {run} branch {b}{tag}{upto}"
        yield history.record_line(r) if r is not None else history.fork_line(fk)


@cli.command("log")
@click.argument("run", type=RUN)
@click.option("--branch", type=INT64, default=None, shell_complete=_complete_branch, help="Show this branch instead of the live one.")
@click.option("--all-branches", is_flag=True, help="Every branch, each with its own records only.")
@click.option("-n", "--max-count", type=Int64(min=1), default=None, help="Show at most N entries (reads only those).")
@click.option("--since", metavar="WHEN", default=None,
              help="Only entries at or after WHEN: 2026-12-01, '2026-12-01 05:20', @EPOCH, today, yesterday, 2h, 3d, 1w, '2 hours ago'.")
@click.option("--until", metavar="WHEN", default=None, help="Only entries at or before WHEN (same forms as --since).")
@click.option("--format", "fmt", type=click.Choice(["oneline", "full", "json"]), default=None,
              help="oneline: one short line per entry; full: every field; json: one JSON object per line.")
@click.option("--graph", is_flag=True, help="Draw every branch as a tree with fork points, reasons and compensation flags.")
@click.option("--no-pager", is_flag=True, help="Never page (output is paged only on a terminal, with $PAGER or 'less -FRX').")
@click.option("--json", "as_json", is_flag=True, help="The entries as one JSON list.")
@pass_ctx
def log_cmd(c, run, branch, all_branches, max_count, since, until, fmt, graph, no_pager, as_json):
    """Show a run's history, newest first, like git log.

    By default the live branch (the one queries and appends use): its own
    records, its fork point, then the parent's records up to the fork point.
    Each record shows its LSN (its position on its branch: 0, 1, 2, ...), kind
    and id; a fork line shows where a branch left its parent and any
    COMPENSATION REQUIRED flag (a committed side effect, such as a refund,
    that the fork went back past).

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore log latest
      objstore log RUN --all-branches -n 20
      objstore log RUN --format oneline --since yesterday
      objstore log RUN --graph
      objstore log RUN --json
    """
    from objstore import history, views

    log = c.log()
    view = log.view(run)
    if graph:
        if as_json or fmt or since or until or branch is not None or all_branches:
            raise click.UsageError("--graph draws every branch whole; it takes only -n and --no-pager")
        _out(itertools.islice(history.graph(log, view), max_count), no_pager)
        return
    if branch is not None and all_branches:
        raise click.UsageError("--branch N shows one branch, --all-branches every branch: give one of them")
    t0 = history.parse_time(since) if since is not None else None
    t1 = history.parse_time(until) if until is not None else None
    first = view.live if branch is None else branch
    entries = itertools.islice(history.entries(log, view, branch, all_branches=all_branches, since=t0, until=t1), max_count)
    if as_json:
        _echo_json([views.log_entry(r, fk) for _b, r, fk in entries])
        return
    if fmt == "json":
        for _b, r, fk in entries:
            _echo_json(views.log_entry(r, fk))
        return
    if fmt == "oneline":
        lines = (history.oneline(e) for e in entries)
    elif fmt == "full":
        lines = (line for e in entries for line in history.full_lines(e, view.live))
    else:
        lines = _grouped(run, view, first, all_branches, entries)
    _out(lines, no_pager)


@cli.command()
@click.argument("run", type=RUN)
@click.option("--json", "as_json", is_flag=True, help="Print the branches as JSON (docs/CLI.md, 'branch').")
@pass_ctx
def branches(c, run, as_json):
    """List a run's branches with fork points read from the fork objects.

    '*' marks the live branch (the one used by default). A fork point is the
    parent branch and LSN (position on that branch) the branch starts after;
    COMPENSATION REQUIRED means the fork went back past a committed side effect
    that is not idempotent, which may need undoing by hand.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore branches RUN
      objstore branches latest --json
    """
    from objstore import views

    log = c.log()
    rows = [views.branch(row) for row in log.branches(log.view(run))]
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        fk = r["fork"]
        where = f"forked from branch {fk['parent_branch']} at lsn {fk['parent_lsn']}" if fk else "root"
        comp = "  COMPENSATION REQUIRED" if fk and fk["compensation"] else ""
        click.echo(f"{'*' if r['live'] else ' '} branch {r['branch']}  head {r['head'][:12]}  {where}{comp}")


def _print_fork(log, fr, as_json):
    from objstore import views

    if as_json:
        _echo_json(views.fork_result(log, fr))
        return
    click.echo(f"branch {fr.branch} forked from branch {fr.parent_branch} at lsn {fr.parent_lsn} (fork {fr.fork_id.hex()[:12]})")
    for x in fr.compensation:
        click.echo(f"COMPENSATION REQUIRED: intent {x['intent']} ({x['effect']}, step {x['step']}) was committed at lsn {x['committed_lsn']} and is not idempotent", err=True)


@cli.command()
@click.argument("run", type=RUN)
@click.option("--to-lsn", type=INT64, required=True,
              help="Last LSN (position on the live branch, from 0) to keep in the new branch's history.")
@click.option("--reason", default="rewind", show_default=True, help="Why; recorded in the fork object.")
@click.option("--expect-branch", type=INT64, default=None, shell_complete=_complete_branch, help="Only if this branch is the live one; otherwise exit 7 and create nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the new fork object as JSON (docs/CLI.md, 'fork').")
@pass_ctx
def rewind(c, run, to_lsn, reason, expect_branch, as_json):
    """Rewind the live branch: fork it at --to-lsn; the new branch becomes live.

    Nothing is deleted: the old branch stays, byte-identical. Rewinding past a
    committed non-idempotent intent (a side effect that must not happen twice,
    such as a refund) flags compensation on the fork and warns: it happened
    and may need undoing by hand.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore rewind RUN --to-lsn 3 --reason "step 6 failed"
      objstore rewind RUN --to-lsn 3 --expect-branch 0 --json
    """
    log = c.log()
    _print_fork(log, log.rewind(run, to_lsn, reason=reason, expect_live=expect_branch), as_json)


@cli.command()
@click.argument("run", type=RUN)
@click.option("--from-branch", type=INT64, required=True, shell_complete=_complete_branch, help="The branch (number) to fork from.")
@click.option("--at-lsn", type=INT64, required=True, help="Last LSN (position on --from-branch, from 0) the new branch keeps.")
@click.option("--reason", default="fork", show_default=True, help="Why; recorded in the fork object.")
@click.option("--live/--no-live", default=True, show_default=True, help="Make the new branch live (the default branch of queries and appends).")
@click.option("--json", "as_json", is_flag=True, help="Print the new fork object as JSON (docs/CLI.md, 'fork').")
@pass_ctx
def fork(c, run, from_branch, at_lsn, reason, live, as_json):
    """Fork a new branch from any branch at any LSN.

    Like rewind, but from any branch, and optionally without making the new
    branch live. Compensation is flagged the same way.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore fork RUN --from-branch 0 --at-lsn 4 --no-live
      objstore fork RUN --from-branch 1 --at-lsn 2 --json
    """
    log = c.log()
    _print_fork(log, log.fork(run, from_branch, at_lsn, reason=reason, make_live=live), as_json)


@cli.command()
@click.argument("run", type=RUN)
@click.argument("a", type=INT64, shell_complete=_complete_branch)
@click.argument("b", type=INT64, shell_complete=_complete_branch)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (docs/CLI.md, 'diff').")
@pass_ctx
def diff(c, run, a, b, as_json):
    """Compare branches A and B: fork point, records unique to each, state difference.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'
      A    one branch number
      B    the other branch number

    \b
    Examples:
      objstore diff RUN 0 1
      objstore diff latest 0 1 --json
    """
    from objstore.query import diff as run_diff

    d = run_diff(c.log(), run, a, b)
    if as_json:
        _echo_json(d)
        return
    cm = d["common"]
    click.echo(f"run {run}: branch {a} vs branch {b}; shared history: branch {cm['branch']} up to lsn {cm['lsn'] if cm['lsn'] is not None else 'its head'}")
    for side, key in ((a, "only_a"), (b, "only_b")):
        click.echo(f"only in branch {side}: {len(d[key])} record(s)")
        for r in d[key]:
            click.echo(f"  {'-' if key == 'only_a' else '+'} b{r['branch']} lsn {r['lsn']:<4} {r['kind']:<16} {r['id'][:12]}")
    click.echo("folded state:")
    for ch in d["state"]:
        click.echo(f"  {ch['path']}: {json.dumps(ch['a'])} -> {json.dumps(ch['b'])}")


@cli.command()
@click.argument("run", type=RUN)
@pass_ctx
def export(c, run):
    """Print the outbox entries of the live branch as JSON Lines (only the live branch is exported).

    A forked live branch exports its fork object first, then its own records
    (docs/CLI.md, 'export-entry').

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore export RUN > outbox.jsonl
      objstore export latest
    """
    from objstore import codec
    from objstore.export import export as run_export

    for e in run_export(c.log(), run):
        click.echo(codec.canonical_json(e).decode())


@cli.command()
@click.argument("run", type=RUN, required=False)
@pass_ctx
def rebuild(c, run):
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
    click.echo(f"rebuilt state for {len(runs_)} run(s)")


@cli.command()
@click.argument("source", type=click.File("rb"))
@click.option("--json", "as_json", is_flag=True, help="Print what was ingested as JSON (docs/CLI.md, 'ingest').")
@pass_ctx
def ingest(c, source, as_json):
    """Ingest JSON Lines events (schema v1, docs/INGEST.md) from FILE or - (stdin).

    All or nothing: a bad line is reported with its number and no line lands.
    Creates the store if absent.

    \b
    Arguments:
      SOURCE  the JSON Lines file, or - to read standard input

    \b
    Examples:
      objstore ingest events.jsonl
      cat events.jsonl | objstore ingest - --json
    """
    from objstore import views
    from objstore.ingest import apply_events, read_events

    events = read_events(source)  # every line checked before the store is opened, or created
    log = c.log(create=True)
    summary = apply_events(log, events)
    if as_json:
        _echo_json(views.ingest_summary(log, summary))
        return
    click.echo(f"ingested {summary['events']} event(s): {summary['records']} record(s), {len(summary['runs'])} new run(s), {len(summary['forks'])} fork(s)")
    for f in summary["forks"]:
        if f["compensation_required"]:
            click.echo(f"COMPENSATION REQUIRED on run {f['run']} branch {f['branch']} (line {f['line']})", err=True)


@cli.command()
@click.argument("run", type=RUN)
@click.option("--all-branches", is_flag=True, help="Every branch (grading); default is the live branch.")
@click.option("--json", "as_json", is_flag=True, help="Print the EpisodeView as canonical JSON (docs/CLI.md, 'episode').")
@click.option("--source", type=click.Choice(["state", "refold"]), default="state", show_default=True, help="Materialized state, or a cold re-fold of the raw log.")
@pass_ctx
def episode(c, run, all_branches, as_json, source):
    """Every attempt of a run (failed ones included) with blob refs, never bodies.

    An attempt is one try of one step; its prompt and output are blob ids
    (fetch a body with 'objstore cat --body ID').

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore episode RUN
      objstore episode RUN --all-branches --json
      objstore episode RUN --source refold --json
    """
    from objstore.query import episode as run_episode
    from objstore.query import iter_episode_json

    if as_json:  # streamed: the attempts are never all in memory (the bytes of EpisodeView.to_json())
        out = click.get_binary_stream("stdout")
        for chunk in iter_episode_json(c.log(), run, all_branches=all_branches, source=source):
            out.write(chunk)
        out.write(b"\n")
        out.flush()
        return
    ep = run_episode(c.log(), run, all_branches=all_branches, source=source)
    Console, Table = _table_classes()  # rich only for a terminal (issue 15)
    con = Console()
    con.print(f"run [bold]{ep.run}[/] subject {ep.subject} workflow {ep.workflow_version} live branch {ep.live_branch}")
    for b in ep.branches:
        title = f"branch {b.branch}{' (live)' if b.live else ''}"
        if b.fork:
            title += f" forked from {b.parent_branch}@{b.parent_lsn}"
        if b.compensation_required:
            title += " COMPENSATION REQUIRED"
        t = Table(title=title)
        for col in ("step", "attempt", "state", "prompt", "output", "usage"):
            t.add_column(col)
        for a in ep.attempts(b.branch):
            style = "red" if a["state"] == "failed" else None
            t.add_row(str(a["step"]), str(a["attempt"]), a["state"], (a["prompt"] or "")[:12], (a["output"] or "")[:12], json.dumps(a["usage"]) if a["usage"] else "", style=style)
        con.print(t)


# -- sessions and journals (T-745) ---------------------------------------------------------
# Every command here signs as the caller's key (--key, env OBJSTORE_KEY, default the owner key
# made by `objstore init`) and goes through a journal Host: the in-process one, or with --socket
# the Backend Host served by `objstore journal-serve`. The Host decides; these commands only print.

def _key_option(f):
    return click.option(
        "--key", "key_file", metavar="FILE", envvar="OBJSTORE_KEY", default=None,
        help="Private key (PEM) that signs the request (env OBJSTORE_KEY; default: the owner key 'objstore init' made).")(f)


def _socket_option(f):
    return click.option(
        "--socket", "socket_path", metavar="PATH", default=None,
        help="Go through the Backend Host listening on this Unix socket ('objstore journal-serve'); default: the in-process Host.")(f)


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print canonical JSON.")(f)


def _caller_key(key_file, log):
    from objstore import identity

    return identity.default_key(key_file, store=log.store)


def _host(log, socket_path):
    from objstore.backend import connect

    return connect(log, socket_path)


def _short(h) -> str:
    return h.hex()[:12] if isinstance(h, bytes) else str(h)


def _record_arg(value):
    """--reflects-through / --checkpoint: 'none' is None; anything else goes to J.resolve_record."""
    return None if value is None or value.lower() == "none" else value


def _scope_args(run, subject):
    if (run is None) == (subject is None):
        raise click.UsageError("name exactly one of RUN or --subject SUBJECT")
    return run, subject


def _scope_text(run, subject):
    return f"run {run}" if run is not None else f"subject {subject}"


# -- keys --------------------------------------------------------------------------------------
@cli.group("key")
def key_group():
    """ed25519 keys: make a worker's or job's key pair, show a key's public half.

    Private keys live outside the store; the store only ever holds public keys
    (the owner's, and the grantees' named in grants).

    \b
    Examples:
      objstore key new ./worker.key
      objstore key show ./worker.key
    """


@key_group.command("new")
@click.argument("path", metavar="FILE")
@_json_option
def key_new(path, as_json):
    """Generate an ed25519 key: FILE (private, mode 0600) and FILE.pub; print the public key.

    \b
    Arguments:
      FILE  where to write the private key (FILE.pub gets the public key)

    \b
    Examples:
      objstore key new ./worker.key     # then: journal grant RUN --pubkey ./worker.key.pub
    """
    import os

    from objstore import identity

    k = identity.generate()
    identity.save_key(path, k)
    full = os.path.abspath(path)
    if as_json:
        _echo_json({"private_key": full, "public_key_file": full + ".pub", "public": k.public})
        return
    click.echo(k.public)


@key_group.command("show")
@click.argument("path", metavar="FILE")
@_json_option
def key_show(path, as_json):
    """Print the public key (64 hex digits) of a private or public key FILE.

    \b
    Arguments:
      FILE  a private key (PEM) or a public key file

    \b
    Examples:
      objstore key show ~/.config/objstore/keys/owner.key
    """
    import os

    from objstore import identity

    public = identity.load_public(path)
    if as_json:
        _echo_json({"file": os.path.abspath(path), "public": public})
        return
    click.echo(public)


# -- journal -------------------------------------------------------------------------------------
@cli.group()
def journal():
    """A session's journal: show, update, enable/disable, grants.

    Writes are signed requests to a journal Host: --key FILE (env OBJSTORE_KEY,
    default the owner key) and, with --socket PATH, the Backend Host of
    'objstore journal-serve'. The Host decides from the signature and the
    owner-signed grants; a key without a live write grant is refused (exit 8).

    \b
    Examples:
      objstore key new w.key
      objstore journal grant RUN --pubkey w.key.pub --name w1
      echo '{"entries": []}' | objstore journal update RUN - --reflects-through latest --key w.key
    """


@journal.command("show")
@click.argument("run", type=RUN)
@_json_option
@pass_ctx
def journal_show(c, run, as_json):
    """Show the newest journal version of RUN (reads the store; no Host, no key).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal show RUN --json
    """
    from objstore import journal as J

    v = J.show(c.log(), run)
    if as_json:
        _echo_json(v)
        return
    click.echo(f"journal {v['id'].hex()}  version {v['version']}  {'enabled' if v['enabled'] else 'DISABLED'}")
    if "source_end" in v:
        click.echo(f"legacy version: source_end {v['source_end']}  checkpoint {v['checkpoint']}  writer {v['writer']}")
    else:
        rt = v["reflects_through"].hex() if v["reflects_through"] else "none"
        cp = v["checkpoint"].hex() if isinstance(v["checkpoint"], bytes) else "none"
        click.echo(f"reflects_through {rt}  checkpoint {cp}")
        click.echo(f"writer {v['writer']}")
    click.echo(f"body sha256 {v['body_sha256']}")
    click.echo(json.dumps(v["body"], indent=2, sort_keys=True, ensure_ascii=False))


def _print_version(run, jid, ver, as_json, what="is now"):
    if as_json:
        _echo_json({"run": run, "journal": jid, "version": ver})
    else:
        click.echo(f"journal of {run} {what} version {ver} ({jid.hex()[:12]})")


@journal.command("update")
@click.argument("run", type=RUN)
@click.argument("source", metavar="FILE|-", type=click.File("rb"))
@click.option("--reflects-through", "reflects_through", required=True, metavar="ID|latest|none",
              help="The record this version reflects through (with its ancestors): a record id or unique prefix, "
                   "'latest' (the live head), or 'none'.")
@click.option("--checkpoint", metavar="ID|latest", default=None, help="Processing checkpoint record (id, prefix or 'latest'); default none.")
@_key_option
@_socket_option
@_json_option
@pass_ctx
def journal_update(c, run, source, reflects_through, checkpoint, key_file, socket_path, as_json):
    """Write the next journal version of RUN from a JSON object in FILE (or - for stdin).

    The request is signed by --key over the body and the journal head seen now;
    if another version lands first the update is a conflict (exit 7).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'
      FILE|-  the JSON object of the new body, or - to read standard input

    \b
    Examples:
      objstore journal update RUN notes.json --reflects-through latest --key w.key
    """
    from objstore import journal as J

    body = J.parse_body(source.read())
    log = c.log()
    key = _caller_key(key_file, log)
    jid, ver = J.update_journal(log, run, key, body, reflects_through=_record_arg(reflects_through),
                                checkpoint=_record_arg(checkpoint), host=_host(log, socket_path))
    _print_version(run, jid, ver, as_json)


def _enable_cmd(c, run, enabled, key_file, socket_path, as_json):
    from objstore import journal as J

    log = c.log()
    key = _caller_key(key_file, log)
    jid, ver = J.set_journal_enabled(log, run, key, enabled, host=_host(log, socket_path))
    if as_json:
        _echo_json({"run": run, "journal": jid, "version": ver, "enabled": enabled})
    else:
        click.echo(f"journal of {run} {'enabled' if enabled else 'disabled'} (version {ver}, {jid.hex()[:12]})")


@journal.command("enable")
@click.argument("run", type=RUN)
@_key_option
@_socket_option
@_json_option
@pass_ctx
def journal_enable(c, run, key_file, socket_path, as_json):
    """Enable RUN's journal: a new version with the same body and reflection.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal enable RUN
    """
    _enable_cmd(c, run, True, key_file, socket_path, as_json)


@journal.command("disable")
@click.argument("run", type=RUN)
@_key_option
@_socket_option
@_json_option
@pass_ctx
def journal_disable(c, run, key_file, socket_path, as_json):
    """Disable RUN's journal (reads then answer outcome 'disabled').

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal disable RUN --key w.key
    """
    _enable_cmd(c, run, False, key_file, socket_path, as_json)


@journal.command("grant")
@click.argument("run", type=RUN, required=False)
@click.option("--subject", default=None, help="Grant on every session of SUBJECT instead of one RUN.")
@click.option("--pubkey", "pubkey_file", required=True, metavar="FILE", help="The grantee's public key (PEM or 64 hex digits; a private key file gives its public half).")
@click.option("--role", type=click.Choice(["worker", "job"]), default=None, help="worker (default) or job; jobs are refused every journal read and write.")
@click.option("--read-only", is_flag=True, help="Grant read only (default read and write).")
@click.option("--name", default="", help="A label for the grantee in messages (never used to decide anything).")
@click.option("--reason", default="", help="Why; recorded in the grant.")
@click.option("--supersedes", "supersedes_file", metavar="OLDPUBFILE", default=None,
              help="A new worker takes over: revoke this old key and grant --pubkey, in one commit.")
@_key_option
@_json_option
@pass_ctx
def journal_grant(c, run, subject, pubkey_file, role, read_only, name, reason, supersedes_file, key_file, as_json):
    """Grant a key rights on RUN's journal (or, with --subject, on every session of a subject).

    Grants are objects signed by the owner key (--key must be it; default it
    is) and only ever appended: a revocation or supersession is a new grant.

    \b
    Arguments:
      RUN  the session (a run) to grant on; omit it with --subject

    \b
    Examples:
      objstore journal grant RUN --pubkey w.key.pub --name w1
      objstore journal grant --subject alice --pubkey w.key.pub --read-only
      objstore journal grant RUN --pubkey w2.key.pub --supersedes w.key.pub
    """
    from objstore import identity
    from objstore import journal as J

    run, subject = _scope_args(run, subject)
    if supersedes_file is not None and (role is not None or read_only):
        raise click.UsageError("--supersedes grants the new key as a read-write worker; drop --role/--read-only")
    log = c.log()
    public = identity.load_public(pubkey_file)
    owner = _caller_key(key_file, log)
    if supersedes_file is not None:
        old = identity.load_public(supersedes_file)
        rid, gid = J.supersede(log, owner, run, old, public, subject=subject, name=name, reason=reason)
        if as_json:
            _echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "superseded": old, "revocation": rid})
        else:
            click.echo(f"{name or public[:16] + '…'} supersedes {old[:16]}… on {_scope_text(run, subject)} "
                       f"(grant {gid.hex()[:12]}, revocation {rid.hex()[:12]})")
        return
    role = role or "worker"
    rights = ("read",) if read_only else ("read", "write")
    gid = J.grant(log, owner, run, public, subject=subject, role=role, rights=rights, name=name, reason=reason)
    if as_json:
        _echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "role": role, "rights": list(rights)})
    else:
        click.echo(f"granted {name or public[:16] + '…'} {','.join(rights)} as {role} on {_scope_text(run, subject)} (grant {gid.hex()[:12]})")


@journal.command("revoke")
@click.argument("run", type=RUN, required=False)
@click.option("--subject", default=None, help="Revoke a subject-wide grant instead of a RUN's.")
@click.option("--pubkey", "pubkey_file", required=True, metavar="FILE", help="The grantee's public key (PEM or 64 hex digits).")
@click.option("--reason", default="revoked", show_default=True, help="Why; recorded in the revocation.")
@_key_option
@_json_option
@pass_ctx
def journal_revoke(c, run, subject, pubkey_file, reason, key_file, as_json):
    """Revoke a key's grant on RUN (or --subject): a new signed grant; the old one stays.

    \b
    Arguments:
      RUN  the session (a run) whose grant to revoke; omit it with --subject

    \b
    Examples:
      objstore journal revoke RUN --pubkey w.key.pub --reason "worker retired"
    """
    from objstore import identity
    from objstore import journal as J

    run, subject = _scope_args(run, subject)
    log = c.log()
    public = identity.load_public(pubkey_file)
    gid = J.revoke(log, _caller_key(key_file, log), run, public, subject=subject, reason=reason)
    if as_json:
        _echo_json({"run": run, "subject": subject, "grantee": public, "grant": gid, "action": "revoke", "reason": reason})
    else:
        click.echo(f"revoked {public[:16]}… on {_scope_text(run, subject)} (grant {gid.hex()[:12]})")


@journal.command("grants")
@click.argument("run", type=RUN)
@_json_option
@pass_ctx
def journal_grants(c, run, as_json):
    """List the grants on RUN and on its subject, each key with its whole chain (oldest first).

    'signed' says whether the owner key signed a grant object, 'counts' whether the Host counts it
    (owner-signed and about this key and scope); 'effective' is the chain's state as the Host judges it.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore journal grants RUN --json
    """
    from objstore import journal as J

    log = c.log()
    rows = J.LocalJournalHost(log).grant_table(run)
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        click.echo(f"no grants on run {run} or subject {log.subject(run)}")
    for r in rows:
        eff = r["effective"]
        now = f"{eff['action']} {eff['role']} {','.join(eff['rights'] or [])}" if eff else "nothing (no counting grant)"
        click.echo(f"{r['grantee']}  ({r['scope']})  now: {now}")
        for g in r["chain"]:
            click.echo(f"  seq {g['seq']}  {g['action']:<6} {g['role']:<6} {','.join(g['rights'] or []):<10}  "
                       f"name {g['name']!r}  reason {g['reason']!r}  {g['id'].hex()[:12]}"
                       + ("" if g["counts"] else "  DOES NOT COUNT (not owner-signed, or not about this key/scope)"))


# -- compaction ------------------------------------------------------------------------------------
@cli.command()
@click.argument("run", type=RUN)
@click.option("--keep", type=INT64, default=4, show_default=True, help="Turns kept verbatim as the retained tail.")
@click.option("--budget", type=INT64, default=65536, show_default=True,
              help="Journal byte budget; a larger journal comes as the Host's bounded projection (outcome over_budget).")
@_socket_option
@_key_option
@_json_option
@pass_ctx
def compact(c, run, keep, budget, socket_path, key_file, as_json):
    """Compact a session: one signed journal read, frozen, rendered once, one new segment.

    The compactor is the deterministic stub (no model here): it proves
    transport and storage, not summary quality. A Host that cannot be reached
    is recorded as outcome 'unavailable'; a refusal (exit 8) writes nothing.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore compact RUN --keep 2
      objstore compact RUN --socket /tmp/journal.sock --key w.key --json
    """
    from objstore import journal as J

    log = c.log()
    key = _caller_key(key_file, log)
    res = J.compact(log, run, J.StubCompactor(), host=_host(log, socket_path), key=key, keep_tail=keep, budget_bytes=budget)
    snap = res.snapshot
    if as_json:
        _echo_json({"run": run, "segment": res.segment_id, "seq": res.segment["seq"], "journal_outcome": snap.outcome,
                    "journal_reason": snap.reason, "journal_host": snap.answer.get("host"), "answer_sha256": snap.sha256,
                    "retained": len(res.segment["retained"]), "summary": res.summary})
        return
    click.echo(f"segment {res.segment['seq']} {res.segment_id.hex()[:12]}: journal {snap.outcome}"
               + (f" ({snap.reason})" if snap.reason else "")
               + f", {len(res.segment['retained'])} turn(s) retained, answer sha256 {snap.sha256}")
    click.echo(res.summary)


@cli.command("segments")
@click.argument("run", type=RUN)
@_json_option
@pass_ctx
def segments_cmd(c, run, as_json):
    """List a session's compaction segments, oldest first, with each one's frozen journal snapshot.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore segments RUN --json
    """
    from objstore import compaction as C
    from objstore import journal as J

    log = c.log()
    log.subject(run)
    rows = []
    for sid, seg in J.segments(log, run):
        f = C.frozen_of(log, seg)
        rows.append({"id": sid, "seq": seg["seq"], "schema": seg.get("v", 1), "branch": seg["branch"],
                     "covered_through": seg.get("covered_through"), "outcome": f["outcome"], "session": f["session"],
                     "version": f["version"], "body_sha256": f["body_sha256"], "answer_sha256": f["answer_sha256"],
                     "projection": f["projection"], "retained": len(seg.get("retained", [])),
                     "open_tasks": len(seg.get("tasks", [])), "compactor": seg.get("compactor")})
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        click.echo(f"run {run} has no segments")
    for r in rows:
        click.echo(f"segment {r['seq']} {r['id'].hex()[:12]}  branch {r['branch']}  journal {r['outcome']}"
                   + (f" v{r['version']}" if r["version"] is not None else "")
                   + (f" body sha256 {r['body_sha256'][:12]}" if r["body_sha256"] else "")
                   + f"  retained {r['retained']}  open tasks {r['open_tasks']}")


# -- sessions and tasks ------------------------------------------------------------------------------
@cli.group()
def session():
    """Sessions: runs of conversation turns, with a typed startup journal event.

    \b
    Examples:
      objstore session start --subject alice --json
    """


@session.command("start")
@click.option("--subject", required=True, help="The subject (owner) of the session.")
@click.option("--predecessor", metavar="RUN", type=RUN, default=None, help="The session this one continues; its journal is preferred at startup.")
@click.option("--run", "run_id", metavar="ID", default=None, help="Run id to use (default: a new one).")
@click.option("--budget", type=INT64, default=65536, show_default=True, help="Startup journal byte budget (bounded projection beyond it).")
@_socket_option
@_key_option
@_json_option
@pass_ctx
def session_start(c, subject, predecessor, run_id, budget, socket_path, key_file, as_json):
    """Start a session; the Host selects the startup journal and its frozen answer is stored once.

    The Host prefers the predecessor's journal, else the newest of another
    session of the subject. Add turns with 'objstore ingest' (type "turn").

    \b
    Examples:
      objstore session start --subject alice --predecessor RUN --json
    """
    from objstore import compaction as C
    from objstore import journal as J

    log = c.log()
    key = _caller_key(key_file, log)
    run = J.start_session(log, subject, predecessor, run=run_id, host=_host(log, socket_path), key=key, budget_bytes=budget)
    ev = C.startup_event(log, run)
    a = json.loads(ev["answer"])
    startup = {"outcome": a["outcome"], "reason": a.get("reason"), "host": a.get("host"), "session": a.get("session"),
               "version": a.get("version"),
               "selection": (a.get("selection") or {}).get("rule"), "answer_sha256": ev["answer_sha256"]}
    if as_json:
        _echo_json({"run": run, "subject": subject, "predecessor": predecessor, "startup": startup})
        return
    click.echo(run)
    click.echo(f"startup journal: {startup['outcome']}"
               + (f" from session {startup['session']} v{startup['version']}" if startup["session"] else "")
               + (f" ({startup['reason']})" if startup["reason"] else "")
               + f", answer sha256 {startup['answer_sha256']}")


@cli.group()
def task():
    """The TaskStore: a session's open tasks (task records; kept across compactions).

    \b
    Examples:
      objstore task open RUN t1 --title "write the report"
      objstore task list RUN
    """


@task.command("open")
@click.argument("run", type=RUN)
@click.argument("task_id", metavar="TASK")
@click.option("--title", default="", help="What the task is.")
@_json_option
@pass_ctx
def task_open(c, run, task_id, title, as_json):
    """Open TASK in RUN (exit 5 if it is open already).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'
      TASK  the task's id (any string, unique among the session's open tasks)

    \b
    Examples:
      objstore task open RUN t1 --title "write the report"
    """
    from objstore import journal as J

    r = J.open_task(c.log(), run, task_id, title)
    if as_json:
        _echo_json({"run": run, "task": task_id, "title": title, "record": r.id, "branch": r.branch, "lsn": r.lsn})
    else:
        click.echo(f"opened task {task_id} in {run} (lsn {r.lsn}, {r.id.hex()[:12]})")


@task.command("close")
@click.argument("run", type=RUN)
@click.argument("task_id", metavar="TASK")
@click.option("--outcome", default="done", show_default=True, help="How the task ended; recorded in the task record.")
@_json_option
@pass_ctx
def task_close(c, run, task_id, outcome, as_json):
    """Close an open TASK of RUN (exit 5 if it is not open).

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'
      TASK  the task's id (any string, unique among the session's open tasks)

    \b
    Examples:
      objstore task close RUN t1 --outcome done
    """
    from objstore import journal as J

    r = J.close_task(c.log(), run, task_id, outcome)
    if as_json:
        _echo_json({"run": run, "task": task_id, "outcome": outcome, "record": r.id, "branch": r.branch, "lsn": r.lsn})
    else:
        click.echo(f"closed task {task_id} in {run}: {outcome} (lsn {r.lsn}, {r.id.hex()[:12]})")


@task.command("list")
@click.argument("run", type=RUN)
@_json_option
@pass_ctx
def task_list(c, run, as_json):
    """List the open tasks of RUN's live branch, in opening order.

    \b
    Arguments:
      RUN  the session (a run): id, unique prefix or 'latest'

    \b
    Examples:
      objstore task list RUN --json
    """
    from objstore import journal as J

    tasks = J.open_tasks(c.log(), run)
    if as_json:
        _echo_json(tasks)
        return
    for t in tasks:
        click.echo(f"{t['task']}  {t['title']}")


# -- the Backend Host ------------------------------------------------------------------------------
@cli.command("journal-serve")
@click.option("--socket", "socket_path", required=True, metavar="PATH", help="Unix socket to listen on.")
@pass_ctx
def journal_serve(c, socket_path):
    """Serve the store's journal Host on a Unix socket, in the foreground, until SIGTERM/SIGINT.

    Answers signed read/update requests (compact, session start, journal
    update with --socket PATH); unsigned ones are refused (401), jobs too (403).

    \b
    Examples:
      objstore journal-serve --socket /tmp/journal.sock &
      objstore compact RUN --socket /tmp/journal.sock
    """
    from objstore.backend import main_serve

    main_serve(c.store_path(), socket_path)


def _demo_epoch(at: float | None) -> float | None:
    """``demo --at``: a finite time whose every tick of the demo lies within years 1 to 9999, else a
    usage error (exit 2), before the store is opened or created."""
    if at is None:
        return None
    from objstore.demo import SPAN
    from objstore.records import time_problem

    bad = time_problem(at) or time_problem(at + SPAN)
    if bad is not None:
        raise click.BadParameter(f"{bad} (the demo records {SPAN} s from EPOCH)")
    return at


@cli.command()
@click.option("--run", "run_id", metavar="ID", default=None, help="Record the demo under this run id (default: a new one).")
@click.option("--at", "at", metavar="EPOCH", type=float, default=None, callback=lambda ctx, param, v: _demo_epoch(v),
              help="Record with a fixed clock from EPOCH (1 s per record), so every id is reproducible.")
@pass_ctx
def demo(c, run_id, at):
    """Record the seed T2.3 run with a stub model, rewind it, and show the result.

    Creates the store if absent; each call records a new run. The model is a
    deterministic stub: the run is the same every time (but for ids and times).

    \b
    Examples:
      objstore demo
      objstore --store /tmp/demo-store demo
    """
    from objstore.demo import fixed_clock, six_step_run
    from objstore.verify import verify as run_verify

    log = c.log(create=True)
    click.echo(f"store: {log.store.root}")
    res = six_step_run(log, run_id, clock=fixed_clock(at) if at is not None else None)
    run = res["run"]
    click.echo(f"recorded run {run}: 6 steps on branch 0 (step 2 retried, step 6 failed), rewound to lsn 3, new path on branch 1\n")
    click.echo("$ objstore log --graph " + run)
    ctx = click.get_current_context()
    ctx.invoke(log_cmd, run=run, graph=True, no_pager=True)
    click.echo("\n$ objstore branches " + run)
    ctx.invoke(branches, run=run, as_json=False)
    fr = res["fork"]
    if fr.compensation_required:
        click.echo(f"compensation flagged on the fork: {', '.join(x['intent'] + ' (' + x['effect'] + ')' for x in fr.compensation)}")
    click.echo(f"\n$ objstore diff {run} 0 1")
    ctx.invoke(diff, run=run, a=0, b=1, as_json=False)
    problems = run_verify(log)
    click.echo("\n$ objstore verify")
    for p in problems:
        click.echo(p.line())
    click.echo("verify: ok" if not problems else f"verify: {len(problems)} problem(s)")
    if problems:
        sys.exit(1)


def main():
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on the root group reports Ctrl-C
    cli(prog_name="objstore")


if __name__ == "__main__":
    main()
