"""The ``objstore`` command line: the root group, and every command registered on it.

Each command lives in the module of its group (issue 16) — objects.py (objects and refs), runs.py (runs
and history), audit.py (verify and anchors), journal.py (keys and the journal), sessions.py (sessions,
tasks, compaction, the Backend Host), admin.py (init, upgrade, repair, rebuild, demo) — each a thin set
of click commands over library calls; output.py and params.py hold what they share. Here: the root
group, whose ``Group`` turns any ``ObjstoreError`` into one line on stderr (one JSON object under
--json) and its documented exit code (see ``objstore.errors``), so no traceback reaches the user.

Imports on demand (issue 15): at module level only click, the stdlib, ``objstore.errors`` and the
shared output.py and params.py, so building the click app loads no command group, storage engine,
codec, zstandard, SQLite, rich, cryptography or journal module. The root group's commands are a
``Commands`` table: a group's module is imported when one of its commands is looked up (to run it, to
show its help, or its line in ``objstore --help``), and each command imports what it uses in its body.
tests/test_startup.py pins the modules each command loads.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, MutableMapping

import click

import objstore
from objstore import interrupt
from objstore.errors import Interrupted, ObjstoreError, StateCacheError, StorageOSError

from .output import EXIT_CODES_HELP, BareHelpGroup, error_views, fail, interrupted, is_sqlite_error, json_wanted, usage_message
from .params import Ctx


class Commands(MutableMapping[str, click.Command]):
    """The root group's commands by name: a ``"module:attribute"`` of this package until first looked up,
    then the command itself (click reads ``Group.commands`` only through this mapping's interface)."""

    def __init__(self, table: dict[str, str | click.Command]) -> None:
        self._table = table

    def __getitem__(self, name: str) -> click.Command:
        got = self._table[name]
        if isinstance(got, str):
            module, _, attr = got.partition(":")
            got = getattr(importlib.import_module(f".{module}", __package__), attr)
            assert isinstance(got, click.Command) and got.name == name, got  # the table names each command where it is
            self._table[name] = got
        return got

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._table[name] = command

    def __delitem__(self, name: str) -> None:
        del self._table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


class Group(BareHelpGroup):
    """The root group: every error becomes one line on stderr (one JSON object under --json)
    and its documented exit code; Ctrl-C is exit 130; never a traceback for bad input."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            raise Interrupted() from None  # click would print a blank line first (its Abort)

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
        as_json = json_wanted(argv)
        try:
            # inside the try: a Ctrl-C the instant the handler changes is caught below (exit 130), not a traceback
            interrupt.take_over()  # from here on the root group reports Ctrl-C
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            if interrupt.interrupted_meanwhile():
                raise KeyboardInterrupt  # a Ctrl-C raised where Python could not propagate it: still exit 130
        except Interrupted as e:
            interrupted(e, as_json)
        except ObjstoreError as e:
            fail(error_views().error(e), str(e), as_json)
        except (KeyboardInterrupt, click.Abort):
            interrupted(Interrupted(), as_json)
        except click.UsageError as e:
            msg = usage_message(e)
            fail(error_views().usage_error(msg), msg, as_json)
        except click.ClickException as e:
            msg = e.format_message()
            fail({"error": "usage-error" if e.exit_code == 2 else "error", "message": msg, "exit": e.exit_code}, msg, as_json)
        except OSError as e:  # a net: the library wraps the OS errors it meets as StorageOSError
            # the command's name, not "--store" (or its value) when the store is named first
            words = [a for i, a in enumerate(argv) if not a.startswith("-") and not (i and argv[i - 1] == "--store")]
            err = StorageOSError(f"run objstore {' '.join(words[:1])}".rstrip(), e)
            fail(error_views().error(err), str(err), as_json)
        except Exception as e:
            if not is_sqlite_error(e):
                raise
            err = StateCacheError("use it", e)  # the state cache; `objstore rebuild` remakes it from the objects
            fail(error_views().error(err), str(err), as_json)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=Group, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", "store", metavar="PATH|URL", envvar="OBJSTORE_DIR", help="Store directory, or s3://bucket/prefix for a store on S3-compatible object storage (endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) (env OBJSTORE_DIR; default: the .objstore in this directory or the nearest parent, like git; OBJSTORE_CEILING_DIRECTORIES stops the search).")
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


@click.command("help")
@click.argument("words", nargs=-1, metavar="[COMMAND]...")
@click.pass_context
def help_cmd(ctx, words):
    """Print the help of objstore, of a command, or of a group's subcommand.

    The same text as the command's --help.

    \b
    Arguments:
      [COMMAND]...  a command, or a group and its subcommand (journal show); none: objstore's own help

    \b
    Examples:
      objstore help
      objstore help log
      objstore help journal show
    """
    at = ctx.parent if ctx.parent is not None else ctx
    for word in words:
        cmd = at.command
        if not isinstance(cmd, click.Group):
            raise click.UsageError(f"'{at.command_path}' has no subcommands (no {word!r})", ctx)
        sub = cmd.get_command(at, word)
        if sub is None:
            raise click.UsageError(f"no such command {word!r} in '{at.command_path}'", ctx)
        # resilient: no required-argument error, no bare-group help; only what --help needs
        at = sub.make_context(word, [], parent=at, resilient_parsing=True)
    click.echo(at.get_help(), color=at.color)


# Each command, and the group module it lives in ("module:attribute"), in the order the commands stood in when
# they were all in this file; `objstore --help` lists them alphabetically (click's default) whatever the order.
cli.commands = Commands({
    "init": "admin:init", "cat": "objects:cat", "show": "objects:show", "refs": "objects:refs", "put-blob": "objects:put_blob",
    "verify": "audit:verify", "anchor": "audit:anchor", "upgrade": "admin:upgrade", "repair": "admin:repair",
    "runs": "runs:runs", "log": "runs:log_cmd", "branches": "runs:branches", "rewind": "runs:rewind", "fork": "runs:fork",
    "diff": "runs:diff", "export": "runs:export", "rebuild": "admin:rebuild", "ingest": "runs:ingest",
    "episode": "runs:episode", "view": "runs:view", "key": "journal:key_group", "journal": "journal:journal", "compact": "sessions:compact",
    "segments": "sessions:segments_cmd", "session": "sessions:session", "task": "sessions:task",
    "journal-serve": "sessions:journal_serve", "demo": "admin:demo", "help": help_cmd, "backup": "admin:backup",
    "delete": "lifecycle:delete", "redact": "lifecycle:redact", "gc": "maintenance:gc", "stats": "maintenance:stats", "index": "maintenance:index_cmd",
    "push": "remote:push", "clone": "remote:clone",
})


def main():
    cli(prog_name="objstore")


if __name__ == "__main__":
    main()
