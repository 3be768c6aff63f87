"""The ``objstore`` command line: the root group, and every command registered on it.

Each command lives in the module of its group (issue 16) — objects.py (objects and refs), runs.py (runs
and history), audit.py (verify and anchors), journal.py (keys and the journal), sessions.py (sessions,
tasks, compaction, the Backend Host), admin.py (init, upgrade, repair, rebuild, demo) — each a thin set
of click commands over library calls; output.py and params.py hold what they share. Here: the root
group, whose ``Group`` turns any ``ObjstoreError`` into one line on stderr (one JSON object under
--json) and its documented exit code (see ``objstore.errors``), so no traceback reaches the user.

Imports on demand (issue 15): at module level only click, the stdlib and ``objstore.errors``, so
building the click app (``--help``, completion, a usage error) loads no storage engine, codec,
zstandard, SQLite, rich, cryptography or journal module. Each command imports what it uses in its
body; tests/test_startup.py pins the list of modules that must stay out.
"""

from __future__ import annotations

import os
import sys

import click

import objstore
from objstore import interrupt
from objstore.errors import Interrupted, ObjstoreError, StateCacheError, StorageOSError

from .admin import backup, demo, init, rebuild, repair, upgrade
from .audit import anchor, verify
from .journal import journal, key_group
from .lifecycle import delete, redact
from .maintenance import gc, stats
from .objects import cat, put_blob, refs, show
from .output import EXIT_CODES_HELP, BareHelpGroup, error_views, fail, interrupted, is_sqlite_error, json_wanted, usage_message
from .params import Ctx
from .remote import clone, push
from .runs import branches, diff, episode, export, fork, ingest, log_cmd, rewind, runs
from .sessions import compact, journal_serve, segments_cmd, session, task


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


# In the order the commands stood in when they were all in this file; `objstore --help` lists them
# alphabetically (click's default) whatever the order.
for _command in (init, cat, show, refs, put_blob, verify, anchor, upgrade, repair, runs, log_cmd, branches, rewind, fork,
                 diff, export, rebuild, ingest, episode, key_group, journal, compact, segments_cmd, session, task,
                 journal_serve, demo, help_cmd):
    cli.add_command(_command)
cli.add_command(backup)
cli.add_command(delete)
cli.add_command(redact)
cli.add_command(gc)
cli.add_command(stats)
cli.add_command(push)
cli.add_command(clone)


def main():
    interrupt.take_over()  # from here on the root group reports Ctrl-C
    cli(prog_name="objstore")


if __name__ == "__main__":
    main()
