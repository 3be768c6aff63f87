"""What the commands take: the store context, parameter types, completion, and shared options.

``Ctx`` (the store a command line names, opened once) and ``pass_ctx``; the parameter types ``Int64``
(``INT64``) and ``RunType`` (``RUN``); shell completion of run ids and branch numbers; the option
decorators and helpers of the signing commands (``key_option``, ``socket_option``, ``json_option``,
``caller_key``, ``journal_host``), shared by the journal and the session commands. Imports on demand.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from objstore.errors import StoreNotFound

if TYPE_CHECKING:
    from objstore.runs.api import RunLog


INT64_MAX = 2**63 - 1


class Int64(click.ParamType):
    """An integer option or argument. What is not an integer, or one the store cannot hold (outside
    int64) or below ``min``, is a bad value of the command line: a usage error (exit 2), as click users
    expect — never a traceback from deeper down. (The same integer in a file or stdin is invalid
    input, exit 5: docs/CLI.md, "Exit codes".)"""

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
            self.fail(f"must be an integer in {self.min}..{INT64_MAX}, got {n}", param, ctx)
        return n


INT64 = Int64()


CLI_FRESH_SECONDS = 1.0


class Ctx:
    def __init__(self, path: str | None):
        self.path = path
        self._log = None

    def store_path(self, create: bool = False) -> str:
        """--store / OBJSTORE_DIR (a store, or a directory holding one), else the .objstore found in the current directory or a parent
        (``storedir.discover``); with ``create``, ./.objstore when none is found."""
        from objstore.storage.storedir import DEFAULT_DIR, discover, is_remote, store_dir

        if self.path:  # a store, or a directory holding .objstore (a clone)
            return self.path if is_remote(self.path) else store_dir(self.path)
        try:
            return discover()
        except StoreNotFound:
            if create:
                return os.path.abspath(DEFAULT_DIR)
            raise

    def log(self, create: bool = False) -> RunLog:
        if self._log is None:
            from objstore.runs.api import RunLog
            from objstore.storage.store import Store

            self._log = RunLog(Store.open(self.store_path(create), create=create))
            engine = self._log.store.engine
            if hasattr(engine, "fresh_seconds"):  # object storage: one command reads as of its start (HEAD rechecked each second)
                engine.fresh_seconds = max(engine.fresh_seconds, CLI_FRESH_SECONDS)
            problem = self._log.store.engine.witness_problem
            if problem is not None:  # readers still answer from the log; writers refuse (exit 6)
                click.echo(f"objstore: warning: {problem[0]}: {problem[1]} (run 'objstore verify')", err=True)
        return self._log


pass_ctx = click.make_pass_decorator(Ctx)


class RunType(click.ParamType):
    """A RUN argument: an exact id, a unique prefix of an id or of its short id, 'latest' or
    'latest~N' (``objstore.runs.resolve.resolve_run``), or the run's labels, ``thread_id=T`` or
    ``k=v,k2=v2``, when they name one run (``objstore.runs.labelspec.resolve_labels``); the
    command receives the full run id."""

    name = "run"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        c = ctx.find_object(Ctx) if ctx is not None else None
        if c is None:  # no store context (e.g. completion): leave it as given
            return value
        from objstore.runs import labelspec
        from objstore.runs.resolve import resolve_run

        if labelspec.is_label_spec(value):  # an unescaped '=' is never in a run id
            return labelspec.resolve_labels(c.log(), value)
        return resolve_run(c.log(), value)

    def shell_complete(self, ctx, param, incomplete):
        """Run ids of the store the command line names (and 'latest'): objstore.runs.completion."""
        from click.shell_completion import CompletionItem

        from objstore.runs import completion

        return [CompletionItem(r) for r in completion.runs(_completion_store(ctx), incomplete)]


RUN = RunType()


class DamagedRunType(RunType):
    """The RUN argument of a command made for a damaged store (``repair``): resolved with every log answering from
    its readable prefix, as the command then reads them, where other readers stop at the damage (exit 6)."""

    def convert(self, value, param, ctx):
        c = ctx.find_object(Ctx) if ctx is not None else None
        if value is not None and c is not None:
            store = c.log().store
            store.engine.prefix_ok = store.logs.prefix_ok = True
        return super().convert(value, param, ctx)


DAMAGED_RUN = DamagedRunType()


def _completion_store(ctx):
    """The store a command line being completed would use (--store, OBJSTORE_DIR, discovery), or None."""
    from objstore.runs import completion

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


def complete_branch(ctx, param, incomplete):
    """Branch numbers of the RUN given earlier on the line being completed."""
    from objstore.runs import completion

    return completion.branches(_completion_store(ctx), _completing_run(ctx), incomplete)


def key_option(f):
    return click.option(
        "--key", "key_file", metavar="FILE", envvar="OBJSTORE_KEY", default=None,
        help="Private key (PEM) that signs the request (env OBJSTORE_KEY; default: the owner key 'objstore init' made).")(f)


def socket_option(f):
    return click.option(
        "--socket", "socket_path", metavar="PATH", default=None,
        help="Go through the Backend Host listening on this Unix socket ('objstore journal-serve'); default: the in-process Host.")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print canonical JSON.")(f)


def caller_key(key_file, log):
    from objstore.storage import identity

    return identity.default_key(key_file, store=log.store)


def journal_host(log, socket_path):
    from objstore.journal.backend import connect

    return connect(log, socket_path)


class LabelType(click.ParamType):
    """A ``--label NAME=VALUE`` option (``objstore.runs.labelspec``: ``k=v,k2=v2`` and backslash
    escapes too); a malformed one is a bad command-line value (exit 2). The command receives a dict."""

    name = "name=value"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        from objstore.errors import InvalidInput
        from objstore.runs import labelspec

        try:
            return labelspec.parse(value)
        except InvalidInput as e:
            self.fail(e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e), param, ctx)


LABEL = LabelType()
