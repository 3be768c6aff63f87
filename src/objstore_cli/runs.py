"""Runs and history: ``runs``, ``log``, ``branches``, ``rewind``, ``fork``, ``diff``, ``export``,
``episode``, ``ingest`` — thin click commands over RunLog, objstore.runs.history and objstore.runs.query."""

from __future__ import annotations

import itertools
import json
import re
import sys

import click

from . import tables
from .output import console_and_table, echo_json, page, paged_console, usage_cell
from .params import INT64, LABEL, RUN, Int64, complete_branch, pass_ctx


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON (docs/CLI.md, 'run').")
@click.option("--label", "labels", type=LABEL, multiple=True, metavar="NAME=VALUE",
              help="Only runs carrying this label (repeatable: all of them; 'k=v,k2=v2' too; '\\,' '\\=' '\\\\' escape).")
@click.option("--all-namespaces", is_flag=True,
              help="Also the runs that are namespaces of another (a LangGraph subgraph's); --label lists them always.")
@pass_ctx
def runs(c, as_json, labels, all_namespaces):
    """List runs with their live branch and branch count.

    The live branch is the one queries, appends and export use by default (a
    rewind makes its new branch live). A unique prefix of a run id, or its
    short id, works wherever a RUN is asked for; so do a run's labels when
    they name one run: 'objstore log thread_id=T' (a run with exactly these
    labels, else the one run that has them all; several: exit 5 listing them).
    Write k=v,k2=v2 for several labels, '\\,' '\\=' '\\\\' for a literal ',' '='
    '\\', and 'checkpoint_ns=' for an empty value. A labelled run's line ends
    with its labels, written that way. A run whose labels are another's but
    for one value that is empty in the other (a LangGraph subgraph's
    checkpoint_ns beside the thread's 'checkpoint_ns=') is a namespace of it:
    a spec matching both names the other, and runs lists it only with
    --all-namespaces or --label.

    \b
    Examples:
      objstore runs
      objstore runs --all-namespaces
      objstore runs --json
      objstore runs --label thread_id=T
      objstore runs --label thread_id=T --label checkpoint_ns= --json
    """
    from objstore.runs import views

    log = c.log()
    read: dict = {}  # run -> its labels, read once for both uses below
    if labels:
        wanted: dict = {}
        for one in labels:
            for k, v in one.items():
                if wanted.get(k, v) != v:
                    raise click.BadParameter(f"label {k!r} given twice with different values", param_hint="'--label'")
                wanted[k] = v
        rows = _labelled_rows(log, wanted)
    else:
        rows = views.runs(log)
        if not all_namespaces:
            rows = _without_namespaces(log, rows, as_json, read)
    shown = {r["run"]: _label_text(log, r["run"], read) for r in rows} if not as_json else {}
    if as_json:
        echo_json(rows)
        return
    if sys.stdout.isatty():  # a terminal: rich's table (a pipe keeps the lines scripts parse)
        con, Table = console_and_table()
        t = Table()
        labelled = any(shown.values())  # the labels column only when some run has labels
        for col in ("id", "run", "subject", "live", "branches") + (("labels",) if labelled else ()):  # fits 80 columns with a full run id
            t.add_column(col, no_wrap=True)
        for r in rows:
            t.add_row(r["short_id"], r["run"], str(r["subject"] or "")[:8], str(r["live_branch"]), str(r["branch_count"]),
                      *((shown[r["run"]],) if labelled else ()))
        con.print(t)
        return
    for r in rows:
        n = r["branch_count"]
        name = r["run"] if r["short_id"] == r["run"] else f"{r['short_id']}  {r['run']}"
        tail = f"  {shown[r['run']]}" if shown[r["run"]] else ""
        click.echo(f"{name}  live branch {r['live_branch']}  ({n} branch{'es' if n != 1 else ''}){tail}")


def _labelled_rows(log, wanted):
    """``runs --label``: the runs carrying all of ``wanted`` (the index's label rows, not a scan of
    every run), in the order plain ``runs`` lists them, with the short ids plain ``runs`` shows."""
    from objstore.runs import labelspec, views
    from objstore.runs.resolve import short_ids

    ids = list(log.runs())
    hit = set(labelspec.matching_runs(log, wanted))
    short = short_ids(ids)
    return [views.run(log.view(r), log.run_started(r), short[r]) for r in ids if r in hit]


def _without_namespaces(log, rows, as_json, read):
    """Plain ``runs``: a run that is a namespace of another listed run (labelspec.namespace_root)
    is left out, and a line on stderr says how many and how to see them (not under --json)."""
    from objstore.runs import labelspec
    from objstore.runs.labels import is_label_id

    live = labelspec.by_first_generation(r["run"] for r in rows)
    kept = [r for r in rows if not is_label_id(r["run"]) or labelspec.namespace_root(_labels(log, r["run"], read), live) is None]
    hidden = len(rows) - len(kept)
    if hidden and not as_json:
        click.echo(f"objstore: {hidden} run{'s' if hidden != 1 else ''} of other namespaces not listed (--all-namespaces lists them)", err=True)
    return kept


def _labels(log, run, read):
    if run not in read:
        read[run] = log.run_labels(run)
    return read[run]


def _label_text(log, run, read):
    """A run's labels as a label spec (what a RUN argument takes), '' for an unlabelled run."""
    from objstore.runs import labelspec
    from objstore.runs.labels import is_label_id

    return labelspec.show(_labels(log, run, read)) if is_label_id(run) else ""


def _grouped(run, view, first, all_branches, entries):
    """The default layout: a header per branch group, one line per record or fork."""
    from objstore.runs import history

    shown = None
    for b, r, fk in entries:
        if b != shown:
            shown = b
            yield "== " + tables.group_title(run, view, b, r, first, all_branches)
        yield history.record_line(r) if r is not None else history.fork_line(fk)


def _when(history, option, text):
    """A --since/--until value as epoch seconds; one that does not parse is a bad command-line value
    (click's BadParameter, exit 2), not bad data (exit 5)."""
    from objstore.errors import InvalidInput

    if text is None:
        return None
    try:
        return history.parse_time(text)
    except InvalidInput as e:
        detail = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)  # without "invalid input: "
        raise click.BadParameter(detail, param_hint=f"'{option}'") from None


@click.command("log")
@click.argument("run", type=RUN)
@click.option("--branch", type=INT64, default=None, shell_complete=complete_branch, help="Show this branch instead of the live one.")
@click.option("--all-branches", is_flag=True, help="Every branch, each with its own records only.")
@click.option("-n", "--max-count", type=Int64(min=1), default=None, help="Show at most N entries (reads only those).")
@click.option("--since", metavar="WHEN", default=None,
              help="Only entries at or after WHEN: 2026-12-01, '2026-12-01 05:20', @EPOCH, today, yesterday, 2h, 3d, 1w, '2 hours ago'.")
@click.option("--until", metavar="WHEN", default=None, help="Only entries at or before WHEN (same forms as --since).")
@click.option("--format", "fmt", type=click.Choice(["oneline", "full", "json", "mermaid", "dot"]), default=None,
              help="oneline: one short line per entry; full: every field; json: one JSON object per line; "
                   "with --graph: mermaid (a gitGraph for Markdown) or dot (Graphviz).")
@click.option("--oneline", is_flag=True, help="The same as --format oneline (git's spelling).")
@click.option("--graph", is_flag=True, help="Draw every branch as a tree with fork points, reasons and compensation flags.")
@click.option("--no-pager", is_flag=True, help="Never page (output is paged only on a terminal, with $PAGER or 'less -FRX').")
@click.option("--json", "as_json", is_flag=True, help="The entries as one JSON list.")
@pass_ctx
def log_cmd(c, run, branch, all_branches, max_count, since, until, fmt, oneline, graph, no_pager, as_json):
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
      objstore log RUN --oneline --since yesterday
      objstore log RUN --graph
      objstore log RUN --graph --format mermaid > run.mmd
      objstore log RUN --graph --format dot | dot -Tsvg > run.svg
      objstore log RUN --json
    """
    from objstore.runs import history, views

    if oneline:
        if fmt not in (None, "oneline"):
            raise click.UsageError(f"--oneline is --format oneline; it does not go with --format {fmt}")
        fmt = "oneline"
    log = c.log()
    view = log.view(run)
    if fmt in ("mermaid", "dot"):
        if not graph:
            raise click.UsageError(f"--format {fmt} is a picture of the branch tree: give it with --graph")
        if as_json or since or until or branch is not None or max_count is not None:
            raise click.UsageError(f"--graph --format {fmt} draws every branch whole; it takes only --all-branches and --no-pager")
        from objstore.runs import pictures

        page(getattr(pictures, fmt)(log, view), no_pager)
        return
    if graph:
        # --all-branches with --graph is git's --all --graph: the graph already draws every branch
        if as_json or fmt or since or until or branch is not None:
            raise click.UsageError("--graph draws every branch whole; it takes only -n, --all-branches and --no-pager")
        page(itertools.chain(_thread_header(log, run), itertools.islice(history.graph(log, view), max_count)), no_pager)
        return
    if branch is not None and all_branches:
        raise click.UsageError("--branch N shows one branch, --all-branches every branch: give one of them")
    t0 = _when(history, "--since", since)
    t1 = _when(history, "--until", until)
    first = view.live if branch is None else branch
    entries = itertools.islice(history.entries(log, view, branch, all_branches=all_branches, since=t0, until=t1), max_count)
    if as_json:
        echo_json([views.log_entry(r, fk) for _b, r, fk in entries])
        return
    if fmt == "json":
        for _b, r, fk in entries:
            echo_json(views.log_entry(r, fk))
        return
    if fmt == "oneline":
        lines = (history.oneline(e) for e in entries)
    elif fmt == "full":
        lines = (line for e in entries for line in history.full_lines(e, view.live))
    elif sys.stdout.isatty():
        lines = tables.log_tables(run, view, first, all_branches, entries)
    else:
        lines = _grouped(run, view, first, all_branches, entries)
    page(itertools.chain(_thread_header(log, run), lines), no_pager)


def _thread_header(log, run) -> list[str]:
    """A LangGraph thread namespace's run (labelled exactly thread_id and checkpoint_ns): one line
    naming its thread and namespace and the thread's other namespaces (subgraphs), each with the
    run to log. Any other run: nothing."""
    labels = log.run_labels(run)
    if labels.keys() != {"thread_id", "checkpoint_ns"}:
        return []
    tid = labels["thread_id"]
    others = []
    for r in log.find_runs(thread_id=tid):
        ls = log.run_labels(r)
        if r != run and ls.keys() == {"thread_id", "checkpoint_ns"}:
            others.append(f"{ls['checkpoint_ns']!r} (objstore log thread_id={tid},checkpoint_ns={ls['checkpoint_ns']})")
    head = f"LangGraph thread {tid!r} namespace {labels['checkpoint_ns']!r}"
    return [head + ("; other namespaces: " + ", ".join(sorted(others)) if others else "; no other namespaces")]


@click.command()
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
    from objstore.runs import history, views

    log = c.log()
    rows = [views.branch(row) for row in log.branches(log.view(run))]
    if as_json:
        echo_json(rows)
        return
    if sys.stdout.isatty():  # a terminal: rich's table (a pipe keeps the lines scripts parse)
        con, Table = console_and_table()
        t = Table(title=f"run {run}")
        for col in ("live", "branch", "head", "fork point", "compensation"):
            t.add_column(col, no_wrap=True)
        for r in rows:
            fk = r["fork"]
            t.add_row("*" if r["live"] else "", str(r["branch"]), r["head"][:12],
                      (f"run {fk['parent_run']} " if fk and fk.get("parent_run") else "") +
                      f"branch {fk['parent_branch']} lsn {fk['parent_lsn']}" if fk else "root",
                      "REQUIRED" if fk and fk["compensation"] else "", style="bold" if r["live"] else None)
        con.print(t)
        return
    for r in rows:
        fk = r["fork"]
        where = history.parent_text(fk) if fk else "root"
        comp = "  COMPENSATION REQUIRED" if fk and fk["compensation"] else ""
        click.echo(f"{'*' if r['live'] else ' '} branch {r['branch']}  head {r['head'][:12]}  {where}{comp}")


def _print_fork(log, fr, as_json):
    from objstore.runs import views

    if as_json:
        echo_json(views.fork_result(log, fr))
        return
    click.echo(f"branch {fr.branch} forked from branch {fr.parent_branch} at lsn {fr.parent_lsn} (fork {fr.fork_id.hex()[:12]})")
    for x in fr.compensation:
        click.echo(f"COMPENSATION REQUIRED: intent {x['intent']} ({x['effect']}, step {x['step']}) was committed at lsn {x['committed_lsn']} and is not idempotent", err=True)


@click.command()
@click.argument("run", type=RUN)
@click.option("--to-lsn", type=Int64(min=0), required=True,
              help="Last LSN (position on the live branch, from 0) to keep in the new branch's history.")
@click.option("--reason", default="rewind", show_default=True, help="Why; recorded in the fork object.")
@click.option("--expect-branch", type=INT64, default=None, shell_complete=complete_branch, help="Only if this branch is the live one; otherwise exit 7 and create nothing.")
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


@click.command()
@click.argument("run", type=RUN)
@click.option("--from-branch", type=INT64, required=True, shell_complete=complete_branch, help="The branch (number) to fork from.")
@click.option("--at-lsn", type=Int64(min=0), required=True, help="Last LSN (position on --from-branch, from 0) the new branch keeps.")
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


_CHECKPOINT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)  # LangGraph's: a uuid


class BranchOrCheckpoint(click.ParamType):
    """A branch number (a bad one is a usage error, as before), or a LangGraph checkpoint id (a uuid)."""

    name = "branch|checkpoint"

    def convert(self, value, param, ctx):
        text = str(value).strip()
        return text if _CHECKPOINT_ID.fullmatch(text) else INT64.convert(text, param, ctx)


@click.command()
@click.argument("run", type=RUN)
@click.argument("a", type=BranchOrCheckpoint(), shell_complete=complete_branch)
@click.argument("b", type=BranchOrCheckpoint(), shell_complete=complete_branch)
@click.option("--run-b", type=RUN, default=None, help="B is of this run (another LangGraph thread): compare channel values only.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (docs/CLI.md, 'diff').")
@click.option("--no-pager", is_flag=True, help="Never page (output is paged only on a terminal, with $PAGER or 'less -FRX').")
@pass_ctx
def diff(c, run, a, b, run_b, as_json, no_pager):
    """Compare branches A and B: fork point, records unique to each, state difference.

    A LangGraph thread's branches also compare their newest checkpoints' channel values,
    naming the first difference (the first differing message). A or B may be a LangGraph
    checkpoint id, and --run-b puts B in another thread's run: then only the channel values
    of the two checkpoints (a branch: its newest) are compared ('diff thread_id=T CKPT_A
    CKPT_B', 'diff thread_id=T 0 0 --run-b thread_id=U'; docs/LANGGRAPH.md).

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'
      A    one branch number (or a LangGraph checkpoint id)
      B    the other branch number (or a LangGraph checkpoint id)

    \b
    Examples:
      objstore diff RUN 0 1
      objstore diff latest 0 1 --json
    """
    from objstore.runs.query import diff as run_diff

    if run_b is not None or isinstance(a, str) or isinstance(b, str):
        _checkpoint_diff(c.log(), (run, a), (run_b or run, b), as_json)
        return
    d = run_diff(c.log(), run, a, b)
    if as_json:
        echo_json(d)
        return
    cm = d["common"]
    if sys.stdout.isatty():
        with paged_console(no_pager) as (con, Table):
            tables.diff_tables(run, a, b, d, con, Table)
        _langgraph_diff(c.log(), run, a, b)
        return
    click.echo(f"run {run}: branch {a} vs branch {b}; shared history: branch {cm['branch']} up to lsn {cm['lsn'] if cm['lsn'] is not None else 'its head'}")
    for side, key in ((a, "only_a"), (b, "only_b")):
        click.echo(f"only in branch {side}: {len(d[key])} record(s)")
        for r in d[key]:
            click.echo(f"  {'-' if key == 'only_a' else '+'} b{r['branch']} lsn {r['lsn']:<4} {r['kind']:<16} {r['id'][:12]}")
    click.echo("folded state:")
    for ch in d["state"]:
        click.echo(f"  {ch['path']}: {json.dumps(ch['a'])} -> {json.dumps(ch['b'])}")
    _langgraph_diff(c.log(), run, a, b)


def _checkpoint_body(log, run, which) -> dict:
    """The checkpoint body a diff side names: a checkpoint id of ``run``, or a branch's newest checkpoint."""
    from objstore.errors import InvalidInput
    from objstore.runs import history

    if isinstance(which, str):
        body = next((r.body for r in log.find_records(run, checkpoint_id=which) if r.kind == "x.langgraph.checkpoint"), None)
    else:
        body = next((e.record.body for e in history.entries(log, log.view(run), which)
                     if e.record is not None and e.record.kind == "x.langgraph.checkpoint"), None)
    if body is None or "deleted" in body:
        raise InvalidInput(f"run {run} has no LangGraph checkpoint {which!r}" if isinstance(which, str)
                           else f"branch {which} of run {run} has no LangGraph checkpoint")
    return body


def _checkpoint_diff(log, side_a, side_b, as_json) -> None:
    """Two LangGraph checkpoints (of one thread or two): their channel values compared."""
    from objstore.integrations.langgraph.present import compare, differences

    ba, bb = (_checkpoint_body(log, *side) for side in (side_a, side_b))
    if as_json:
        echo_json({"a": {"run": side_a[0], "checkpoint_id": ba["checkpoint_id"]},
                   "b": {"run": side_b[0], "checkpoint_id": bb["checkpoint_id"]}, "channels": differences(log, ba, bb)})
        return
    click.echo(f"checkpoint {ba['checkpoint_id']} (run {side_a[0]}) vs checkpoint {bb['checkpoint_id']} (run {side_b[0]}):")
    for line in compare(log, ba, bb):
        click.echo(line)


def _langgraph_diff(log, run, a, b) -> None:
    """A LangGraph thread namespace's branches: the channel values of each branch's newest checkpoint
    compared, the first difference named (integrations.langgraph.present.compare)."""
    if "checkpoint_ns" not in log.run_labels(run):
        return
    from objstore.runs import history

    view = log.view(run)
    tips = []
    for br in (a, b):
        tips.append(next((e.record.body for e in history.entries(log, view, br)
                          if e.record is not None and e.record.kind == "x.langgraph.checkpoint" and "deleted" not in e.record.body), None))
    if None in tips:
        return
    try:
        from objstore.integrations.langgraph.present import compare
    except ImportError:
        click.echo("channel values: not compared (LangGraph is not installed)")
        return
    click.echo(f"channel values, newest checkpoint of each ({tips[0]['checkpoint_id']} | {tips[1]['checkpoint_id']}):")
    for line in compare(log, tips[0], tips[1]):
        click.echo(line)


@click.command()
@click.argument("run", type=RUN)
@click.option("--json", "as_json", is_flag=True, help="Print the entries as one JSON list instead of JSON Lines (docs/CLI.md, 'export').")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "otlp-json"]), default="jsonl", show_default=True,
              help="jsonl: the outbox entries; otlp-json: the run as OpenTelemetry spans, OTLP/JSON (docs/OTEL.md).")
@click.option("--endpoint", metavar="URL", default=None,
              help="Send the run as OTLP/HTTP protobuf to URL/v1/traces instead of printing it (docs/OTEL.md).")
@click.option("--bodies", is_flag=True, help="OTLP: put the prompt, output and content blobs' text on the spans (never erased ones).")
@click.option("--all-branches", is_flag=True, help="OTLP: every branch, not only the live lineage.")
@pass_ctx
def export(c, run, as_json, fmt, endpoint, bodies, all_branches):
    """Print the outbox entries of the live branch as JSON Lines (only the live branch is exported).

    A forked live branch exports its fork object first, then its own records
    (docs/CLI.md, 'export-entry'); --json prints the same entries as one list.

    --format otlp-json prints the run as OpenTelemetry spans (GenAI semantic
    conventions, docs/OTEL.md): the run an invoke_agent span, each attempt a
    chat or execute_tool span with its status, each fork a span linked to its
    fork record. --endpoint URL (an OTLP/HTTP receiver, a collector's
    http://127.0.0.1:4318) sends the same spans as OTLP/HTTP protobuf;
    an endpoint that cannot be reached or refuses them exits 10. Span and
    trace ids come from record and run ids: exporting again sends the same
    spans. An exported body is outside the store's erasure.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore export RUN > outbox.jsonl
      objstore export latest --json
      objstore export RUN --format otlp-json > trace.json
      objstore export RUN --format otlp-json --all-branches --bodies
    """
    if fmt == "otlp-json" or endpoint is not None:
        if as_json:
            raise click.UsageError("--json is for the outbox entries; OTLP is --format otlp-json or --endpoint URL")
        _export_otlp(c, run, endpoint, bodies, all_branches)
        return
    if bodies or all_branches:
        raise click.UsageError("--bodies and --all-branches are for OTLP (--format otlp-json or --endpoint URL); the outbox is the live branch")
    from objstore.runs.export import export as run_export
    from objstore.storage import codec

    if as_json:
        echo_json(run_export(c.log(), run))
        return
    for e in run_export(c.log(), run):
        click.echo(codec.canonical_json(e).decode())


def _export_otlp(c, run, endpoint, bodies, all_branches):
    import objstore
    from objstore.runs import otel, otlp

    log = c.log()
    req = otlp.request(otel.build(log, run, all_branches=all_branches, bodies=bodies), version=objstore.__version__)
    if endpoint is None:
        click.echo(otlp.json_text(req))
        return
    status = otlp.send(req, endpoint)
    n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    click.echo(f"sent {n} spans of run {log.view(run).run} to {otlp.traces_url(endpoint)} (HTTP {status})")


@click.command()
@click.argument("source", type=click.File("rb"))
@click.option("--per-run", is_flag=True, help="One commit per run: the default (kept for scripts that pass it).")
@click.option("--json", "as_json", is_flag=True, help="Print what was ingested as JSON (docs/CLI.md, 'ingest').")
@pass_ctx
def ingest(c, source, per_run, as_json):
    """Ingest JSON Lines events (schema v1, docs/INGEST.md) from FILE or - (stdin).

    All or nothing per run: every line is checked first (a bad line is
    reported with its number and no line lands), then each run's events are
    one commit; a run refused when applied does not land, the others do, and
    the runs that landed are named (exit 0 when all did, else the first
    failed run's exit code). Ingesting the same file again lands only the
    runs that are missing: a run already in the store with the same events is
    skipped, one with other events is refused (exit 7, naming it). Each
    commit takes that run's writer lock only. Creates the store if absent.
    --per-run is the default (accepted).

    \b
    Arguments:
      SOURCE  the JSON Lines file, or - to read standard input

    \b
    Examples:
      objstore ingest events.jsonl
      cat events.jsonl | objstore ingest - --json
      objstore --store s3://bucket/agents ingest events.jsonl
    """
    from objstore.runs import views
    from objstore.runs.ingest import apply_events_per_run, read_events

    events = read_events(source)  # every line checked before the store is opened, or created
    log = c.log(create=True)
    errors: list = []
    summary = apply_events_per_run(log, events, errors)
    if errors and not summary["landed"] and not summary["skipped"]:
        for e in errors[1:]:  # nothing landed: each run's error as every command says one, the first one last
            click.echo(f"objstore: error: {e}", err=True)
        raise errors[0]
    if as_json:
        echo_json(views.ingest_summary(log, summary))
    else:
        click.echo(f"ingested {summary['events']} event(s): {summary['records']} record(s), {len(summary['runs'])} new run(s), {len(summary['forks'])} fork(s)")
        for f in summary["forks"]:
            if f["compensation_required"]:
                click.echo(f"COMPENSATION REQUIRED on run {f['run']} branch {f['branch']} (line {f['line']})", err=True)
        click.echo(f"{len(summary['landed'])} run(s) landed" + (f": {', '.join(summary['landed'])}" if summary["landed"] else ""))
        if summary["skipped"]:
            click.echo(f"{len(summary['skipped'])} run(s) in the store already with the same events, skipped: {', '.join(summary['skipped'])}")
        for f in summary["failed"]:
            click.echo(f"objstore: error: run {f['run']} did not land: {f['error']['message']} (exit {f['error']['exit']})", err=True)
    if summary["failed"]:
        raise SystemExit(summary["failed"][0]["error"]["exit"])


def _note_unrecorded_attempts(log, run):
    """One line on stderr when a writer labelled a record of ``run`` UNRECORDED_ATTEMPTS (it could
    not see every failed try: a LangGraph saver without its callback handler). Text output only:
    under --json stderr carries errors alone. One label lookup of the run."""
    from objstore.runs.records import UNRECORDED_ATTEMPTS

    k, v = UNRECORDED_ATTEMPTS
    if log.find_record(run, **{k: v}) is not None:
        click.echo("objstore: note: this run was written (in part) without recording failed attempts: a failed try that "
                   'a retry fixed is not shown (LangGraph: config["callbacks"] = [saver.attempt_recorder()]; docs/LANGGRAPH.md)',
                   err=True)

@click.command()
@click.argument("run", type=RUN)
@click.option("--all-branches", is_flag=True, help="Every branch (grading); default is the live branch.")
@click.option("--json", "as_json", is_flag=True, help="Print the EpisodeView as canonical JSON (docs/CLI.md, 'episode').")
@click.option("--source", type=click.Choice(["state", "refold"]), default="state", show_default=True, help="Materialized state, or a cold re-fold of the raw log.")
@click.option("--no-pager", is_flag=True, help="Never page (output is paged only on a terminal, with $PAGER or 'less -FRX').")
@pass_ctx
def episode(c, run, all_branches, as_json, source, no_pager):
    """Every attempt of a run (failed ones included) with blob refs, never bodies.

    An attempt is one try of one step; its prompt and output are blob ids
    (fetch a body with 'objstore cat --body ID'). A run written without
    recording every failed try (a LangGraph thread without
    saver.attempt_recorder()) gets a note on stderr saying so.

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore episode RUN
      objstore episode RUN --all-branches --json
      objstore episode RUN --source refold --json
    """
    from objstore.runs.query import episode as run_episode
    from objstore.runs.query import iter_episode_json

    if as_json:  # streamed: the attempts are never all in memory (the bytes of EpisodeView.to_json())
        out = click.get_binary_stream("stdout")
        for chunk in iter_episode_json(c.log(), run, all_branches=all_branches, source=source):
            out.write(chunk)
        out.write(b"\n")
        out.flush()
        return
    log = c.log()
    ep = run_episode(log, run, all_branches=all_branches, source=source)
    view = log.view(ep.run)
    _note_unrecorded_attempts(log, ep.run)
    with paged_console(no_pager) as (con, Table):  # rich only for a terminal; no escape code under NO_COLOR
        _episode_tables(log, view, ep, con, Table)
        if "checkpoint_ns" in log.run_labels(ep.run):
            _task_runs_table(log, ep.run, con, Table)


def _task_runs_table(log, run, con, Table) -> None:
    """A LangGraph thread namespace's task runs, every try (runs.xsummary.task_runs), all branches in commit order."""
    from objstore.runs.xsummary import task_runs

    rows = task_runs(reversed(list(log.iter_records(run, all_branches=True))))
    t = Table(title="LangGraph task runs (every try)")
    for col in ("step", "node", "try", "state", "checkpoint", "note"):
        t.add_column(col, no_wrap=col != "note")
    for r in rows:
        note = r["error"] or ""
        if r["retries"] != "recorded":
            note = (note + "; " if note else "") + ("in-task retries not recorded" if r["retries"] == "unrecorded"
                                                    else "in-task retries: unknown (written before the saver said)")
        t.add_row("-" if r["step"] is None else str(r["step"]), r["node"], str(r["attempt"]), r["state"],
                  r["checkpoint_id"][-12:], note, style="red" if r["state"] == "failed" else None)
    con.print(t)


def _episode_tables(log, view, ep, con, Table) -> None:
    """``episode``'s tables: one per branch, what it inherits first (dim, with the branch it is from)."""
    from objstore.runs.query import inherited_attempts

    plain = not sys.stdout.isatty()
    con.print(f"run {ep.run} subject {ep.subject} workflow {ep.workflow_version} live branch {ep.live_branch}")
    for b in ep.branches:
        title = f"branch {b.branch}{' (live)' if b.live else ''}"
        if b.fork:
            title += f" forked from {b.parent_branch}@{b.parent_lsn}"
        if b.compensation_required:
            title += " COMPENSATION REQUIRED"
        t = Table(title=title)
        # what the branch inherits first (dim, 'from' its branch), as log shows a branch's ancestors
        rows = [(a, str(src)) for src, _lsn, a in inherited_attempts(log, view, b.branch)]
        inherits = bool(rows)
        rows += [(a, "") for a in ep.attempts(b.branch)]
        for col in ("step", "attempt", "state", "prompt", "output", "usage", "from")[: 7 if inherits else 6]:
            t.add_column(col, no_wrap=True)  # one line per attempt, even in 80 columns
        tty = not plain
        for a, src in rows:
            style = "red" if a["state"] == "failed" else "dim" if src else None
            # a terminal gets short cells (8 hex digits, usage as tokens=N); a pipe the full ones, as before
            cells = [str(a["step"]), str(a["attempt"]), a["state"], (a["prompt"] or "")[: 8 if tty else 12],
                     (a["output"] or "")[: 8 if tty else 12],
                     usage_cell(a["usage"]) if tty else json.dumps(a["usage"]) if a["usage"] else ""]
            t.add_row(*cells, *([src] if inherits else []), style=style)
        con.print(t)


@click.command("view")
@click.argument("run", type=RUN)
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the page to FILE (default: stdout).")
@click.option("--bodies", is_flag=True, help="Embed the prompt, output and content blobs' text too (never deleted or redacted ones).")
@click.option("--diff", "pair", type=(INT64, INT64), default=None, metavar="A B",
              help="The two branches to compare (default: the live branch and the one it forked from).")
@pass_ctx
def view(c, run, out, bodies, pair):
    """Write one self-contained HTML page of a run: open it in any browser.

    The page needs no network, server or CDN (inline CSS and script; its
    Content-Security-Policy refuses every load). It shows the branch tree
    with fork points, reasons and COMPENSATION REQUIRED flags; every attempt,
    failed ones marked with their error; each record's body, shown on click
    (at most 64 KiB per body and 4 MiB per page; above that the page gives the
    id, size and the objstore cat line); and the diff of two branches with
    the first divergence marked. Blob bodies only with --bodies. A deleted or
    redacted body is never included; the written file is a copy outside the
    store's erasure (a later delete or redact does not reach it).

    \b
    Arguments:
      RUN  the run: its id, a unique prefix of it, 'latest' (the newest run) or 'latest~N'

    \b
    Examples:
      objstore view latest -o run.html
      objstore view RUN --bodies --diff 0 2 -o run.html
    """
    from objstore.runs import page

    log = c.log()
    text = page.page(log, log.view(run), bodies=bodies, pair=tuple(pair) if pair else None)
    if out is None:
        click.echo(text, nl=False)
        return
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
