"""What every command prints through: canonical JSON, the pager, tables, and the one-line errors.

The shared output of the command line (issue 16): ``echo_json`` (canonical JSON on stdout), ``page``
(lines through $PAGER on a terminal), ``table_classes`` (rich's table on a terminal, plain lines into a
pipe), and the error side the root group uses — ``json_wanted``, ``fail``, ``usage_message``, the
exit-code help text; and ``JsonGroup``, a group whose ``--json`` before the subcommand is the
subcommand's. Imports on demand: the codec, rich and the view shapes load only when used.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from objstore.errors import EXIT_CODES


def _exit_codes_help(width: int = 76) -> str:
    """The exit-code epilog of ``objstore --help``, from the one table (``objstore.errors.EXIT_CODES``):
    a code and its meaning stay on one line where they fit (else they start a line and wrap); ``\\b``
    keeps click from re-flowing the lines."""
    lines = ["Exit codes:"]
    for i, (code, what) in enumerate(EXIT_CODES):
        item = f"{code} {what}{'.' if i == len(EXIT_CODES) - 1 else ';'}"
        if len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
            continue
        lines.append("")
        first, *rest = item.split(" ")
        for atom in [f"{first} {rest[0]}", *rest[1:]]:  # a long one wraps, its code kept with its first word
            if lines[-1] and len(lines[-1]) + 1 + len(atom) > width:
                lines.append(atom)
            else:
                lines[-1] = f"{lines[-1]} {atom}".lstrip()
    return "\b\n" + "\n".join(lines) + '\nUnder --json an error is one JSON object on stderr: {"error", "message", "exit"}.'


EXIT_CODES_HELP = _exit_codes_help()


def echo_json(value) -> None:
    from objstore.storage import codec

    click.echo(codec.canonical_json(value).decode())


def table_classes():
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

    def add_column(self, header: str, **_rich) -> None:
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


def console_and_table():
    """(a console, the Table class) for a command that prints tables: rich's on a terminal, with no
    escape code at all under NO_COLOR (not even bold: color_system None renders no style); the plain
    stand-ins into a pipe."""
    console_cls, table_cls = table_classes()
    if console_cls is _PlainConsole:
        return _PlainConsole(), table_cls
    return console_cls(highlight=False, **({"color_system": None} if os.environ.get("NO_COLOR") else {})), table_cls


@contextlib.contextmanager
def paged_console(no_pager: bool):
    """(console, Table) as ``console_and_table``, whose output on a terminal goes through ``page``
    (the pager ``log`` uses) when the command is done printing, unless ``no_pager``; into a pipe the
    plain lines print as they come."""
    con, table = console_and_table()
    # click pages only when stdin is a terminal too; otherwise print straight (and keep the colours,
    # which click's no-pager path would strip)
    if no_pager or isinstance(con, _PlainConsole) or not sys.stdin.isatty():
        yield con, table
        return
    with con.capture() as captured:  # rendered for this terminal: its width, its colours (or none)
        yield con, table
    page(captured.get().rstrip("\n").split("\n"), no_pager)


def human_size(n: int) -> str:
    """A byte count as people read it: ``512 bytes``, ``1.2 KiB``, ``3.4 MiB`` (--json keeps the integer)."""
    if n < 1024:
        return f"{n} bytes"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        size /= 1024
        if size < 1024 or unit == "PiB":
            break
    return f"{size:.1f} {unit}"


@contextlib.contextmanager
def progress_bar(label: str, as_json: bool, sizes: bool = False):
    """A rich progress bar on stderr while a long command runs (push, clone, backup, gc): yields
    ``update(done, total, note="")`` (``total`` None: not known yet; ``sizes``: done and total are
    bytes, shown as human sizes), or None — no bar, not even an escape code — when stderr is not a
    terminal or under --json. rich loads only for a terminal; the bar is gone when the command ends."""
    if as_json or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), TextColumn("{task.fields[what]}"), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None, what="")

    def update(done: int, total: int | None, note: str = "") -> None:
        show = human_size if sizes else str
        what = f"{show(done)}/{show(total)}" if total is not None else show(done)
        bar.update(task, completed=done, total=total, what=f"{what} {note}".rstrip())

    with bar:
        yield update


def usage_cell(usage, width: int = 16) -> str:
    """A usage dict as one short cell, ``tokens=12`` (the sum of its token counts; else ``k=v ...``,
    not its JSON), cut with '…' past ``width``,
    so a table row stays one line in an 80-column terminal."""
    if not usage:
        return ""
    tokens = [v for k, v in usage.items() if k.endswith("tokens") and isinstance(v, int)] if isinstance(usage, dict) else []
    if tokens:  # the figure a reader scans a table for; --json has every field
        return f"tokens={sum(tokens)}"
    text = " ".join(f"{k}={v}" for k, v in sorted(usage.items())) if isinstance(usage, dict) else str(usage)
    return text if len(text) <= width else text[: width - 1] + "…"


def page(lines, no_pager: bool) -> None:
    """Print lines; through a pager ($PAGER, default 'less -FRX') only when stdout is a terminal."""
    if not no_pager and sys.stdout.isatty():
        os.environ.setdefault("PAGER", "less -FRX")
        click.echo_via_pager(line + "\n" for line in lines)
        return
    for line in lines:
        click.echo(line)


def json_wanted(args) -> bool:
    """--json anywhere on the command line (before a '--' that ends the options)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def fail(payload: dict, line: str, as_json: bool):
    """Report one error on stderr (one line, or one JSON object under --json) and exit with its code.
    Control characters (a newline in a path, say) are escaped, so the line stays one line."""
    if as_json:
        from objstore.storage import codec

        click.echo(codec.canonical_json(payload).decode(), err=True)
    else:
        line = "".join(ch if ch >= " " and ch != "\x7f" else repr(ch)[1:-1] for ch in line)
        click.echo(f"objstore: error: {line}", err=True)
    sys.exit(payload["exit"])


def interrupted(e, as_json: bool):
    """Report a Ctrl-C (exit 130) importing nothing: the import it interrupted may be half done, and
    importing the error views again could fail or warn (a C extension initialised twice)."""
    import json

    payload = e.to_json()
    sys.stderr.write((json.dumps(payload, sort_keys=True, separators=(",", ":")) if as_json else f"objstore: error: {e}") + "\n")
    sys.stderr.flush()
    sys.exit(payload["exit"])


def usage_message(e: click.UsageError) -> str:
    path = e.ctx.command_path if e.ctx is not None else "objstore"
    return f"{e.format_message()} (see '{path} --help')"


def error_views():
    """objstore.runs.views, for the error shapes: imported only when there is an error to report."""
    from objstore.runs import views

    return views


def is_sqlite_error(e: Exception) -> bool:
    """A sqlite3 error (from the state cache)? sqlite3 is imported only by commands that open the
    cache, so where it was never imported no sqlite3 error can have been raised."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(e, sqlite3.Error)


class BareHelpGroup(click.Group):
    """A group typed without its subcommand (a bare ``objstore``, ``objstore journal``) prints its
    help on stdout and exits 2, click's usage code. click >= 8.2 raises that help as an error instead
    (NoArgsIsHelpError), which the one-line error printer would escape into literal ``\\n``; click 8.1
    printed it and exited 0. Done here, the same on every click version and for every group."""

    def parse_args(self, ctx, args):
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(2)
        return super().parse_args(ctx, args)


class JsonGroup(BareHelpGroup):
    """A command group whose ``--json`` before the subcommand (``objstore journal --json show RUN``)
    means the subcommand's ``--json``, as a git or click user tries it (issue 16): the flag is an
    option of the group, and ``resolve_command`` hands it on to the subcommand it resolves."""

    # not in self.params: the group prints nothing itself, so the walk of --json outputs (tests/cli/test_cli_json.py)
    # lists only the subcommands; get_params is what click parses and documents in --help
    _JSON = click.Option(["--json", "group_json"], is_flag=True, expose_value=False, show_default=False,
                         callback=lambda ctx, param, value: ctx.meta.__setitem__("objstore.group_json", True) if value else None,
                         help="Print canonical JSON: the same as the subcommand's --json.")

    def get_params(self, ctx):
        params = super().get_params(ctx)
        return [self._JSON, *params]

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and ctx.meta.get("objstore.group_json"):
            if not any("--json" in getattr(p, "opts", ()) for p in cmd.params):
                raise click.UsageError(f"'{name}' has no --json output", ctx)
            rest = ["--json", *rest]  # right after the subcommand's name: parsed as its option, before any '--'
        return name, cmd, rest
