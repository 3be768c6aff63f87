"""Sessions, tasks and compaction (docs/JOURNAL.md): ``session``, ``task``, ``compact``, ``segments`` and
``journal-serve`` (the Backend Host), over the objstore.journal package.

Like the journal commands, those that read or write a journal sign as the caller's key and go through
a journal Host (in process, or with --socket the Backend Host); the Host decides, they only print.
"""

from __future__ import annotations

import json
import os
import sys

import click

from .output import JsonGroup, echo_json, table_classes
from .params import RUN, Int64, caller_key, journal_host, json_option, key_option, pass_ctx, socket_option


@click.command()
@click.argument("run", type=RUN)
@click.option("--keep", type=Int64(min=0), default=4, show_default=True, help="Turns kept verbatim as the retained tail.")
@click.option("--budget", type=Int64(min=0), default=65536, show_default=True,
              help="Journal byte budget; a larger journal comes as the Host's bounded projection (outcome over_budget).")
@socket_option
@key_option
@json_option
@pass_ctx
def compact(c, run, keep, budget, socket_path, key_file, as_json):
    """Summarize a session's older turns into one new signed segment.

    Reads the session's journal once (a signed request to the journal Host),
    freezes that answer in the segment, and summarizes every turn but the last
    --keep with a deterministic compactor (no model is called: the summary is
    the same for the same turns), keeping those last turns verbatim. A Host that cannot be reached
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
    key = caller_key(key_file, log)
    res = J.compact(log, run, J.StubCompactor(), host=journal_host(log, socket_path), key=key, keep_tail=keep, budget_bytes=budget)
    snap = res.snapshot
    if as_json:
        echo_json({"run": run, "segment": res.segment_id, "seq": res.segment["seq"], "journal_outcome": snap.outcome,
                    "journal_reason": snap.reason, "journal_host": snap.answer.get("host"), "answer_sha256": snap.sha256,
                    "retained": len(res.segment["retained"]), "summary": res.summary})
        return
    click.echo(f"segment {res.segment['seq']} {res.segment_id.hex()[:12]}: journal {snap.outcome}"
               + (f" ({snap.reason})" if snap.reason else "")
               + f", {len(res.segment['retained'])} turn(s) retained, answer sha256 {snap.sha256}")
    click.echo(res.summary)


@click.command("segments")
@click.argument("run", type=RUN)
@json_option
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
    from objstore import journal as J
    from objstore.journal import compaction as C

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
        echo_json(rows)
        return
    if not rows:
        click.echo(f"run {run} has no segments")
        return
    if not sys.stdout.isatty():  # into a pipe: one line per segment, as before, for grep and scripts
        for r in rows:
            click.echo(f"segment {r['seq']} {r['id'].hex()[:12]}  branch {r['branch']}  journal {r['outcome']}"
                       + (f" v{r['version']}" if r["version"] is not None else "")
                       + (f" body sha256 {r['body_sha256'][:12]}" if r["body_sha256"] else "")
                       + f"  retained {r['retained']}  open tasks {r['open_tasks']}")
        return
    # a terminal: rich's table, like log, runs and episode; under NO_COLOR not even bold (no escape code)
    console_cls, table_cls = table_classes()
    table = table_cls(title=f"segments of {run}")
    for header in ("seq", "segment", "branch", "journal", "body sha256", "retained", "open tasks"):
        table.add_column(header)
    for r in rows:
        table.add_row(str(r["seq"]), r["id"].hex()[:12], str(r["branch"]),
                      r["outcome"] + (f" v{r['version']}" if r["version"] is not None else ""),
                      r["body_sha256"][:12] if r["body_sha256"] else "-", str(r["retained"]), str(r["open_tasks"]))
    console_cls(**({"color_system": None} if os.environ.get("NO_COLOR") else {})).print(table)


@click.group(cls=JsonGroup)
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
@click.option("--budget", type=Int64(min=0), default=65536, show_default=True, help="Startup journal byte budget (bounded projection beyond it).")
@socket_option
@key_option
@json_option
@pass_ctx
def session_start(c, subject, predecessor, run_id, budget, socket_path, key_file, as_json):
    """Start a session; the Host selects the startup journal and its frozen answer is stored once.

    The Host prefers the predecessor's journal, else the newest of another
    session of the subject. Add turns with 'objstore ingest' (type "turn").

    \b
    Examples:
      objstore session start --subject alice --predecessor RUN --json
    """
    from objstore import journal as J
    from objstore.journal import compaction as C

    log = c.log()
    key = caller_key(key_file, log)
    run = J.start_session(log, subject, predecessor, run=run_id, host=journal_host(log, socket_path), key=key, budget_bytes=budget)
    ev = C.startup_event(log, run)
    a = json.loads(ev["answer"])
    startup = {"outcome": a["outcome"], "reason": a.get("reason"), "host": a.get("host"), "session": a.get("session"),
               "version": a.get("version"),
               "selection": (a.get("selection") or {}).get("rule"), "answer_sha256": ev["answer_sha256"]}
    if as_json:
        echo_json({"run": run, "subject": subject, "predecessor": predecessor, "startup": startup})
        return
    click.echo(run)
    click.echo(f"startup journal: {startup['outcome']}"
               + (f" from session {startup['session']} v{startup['version']}" if startup["session"] else "")
               + (f" ({startup['reason']})" if startup["reason"] else "")
               + f", answer sha256 {startup['answer_sha256']}")


@click.group(cls=JsonGroup)
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
@json_option
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
        echo_json({"run": run, "task": task_id, "title": title, "record": r.id, "branch": r.branch, "lsn": r.lsn})
    else:
        click.echo(f"opened task {task_id} in {run} (lsn {r.lsn}, {r.id.hex()[:12]})")


@task.command("close")
@click.argument("run", type=RUN)
@click.argument("task_id", metavar="TASK")
@click.option("--outcome", default="done", show_default=True, help="How the task ended; recorded in the task record.")
@json_option
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
        echo_json({"run": run, "task": task_id, "outcome": outcome, "record": r.id, "branch": r.branch, "lsn": r.lsn})
    else:
        click.echo(f"closed task {task_id} in {run}: {outcome} (lsn {r.lsn}, {r.id.hex()[:12]})")


@task.command("list")
@click.argument("run", type=RUN)
@json_option
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
        echo_json(tasks)
        return
    for t in tasks:
        click.echo(f"{t['task']}  {t['title']}")


@click.command("journal-serve")
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
    from objstore.journal.backend import main_serve

    main_serve(c.store_path(), socket_path)
