"""The ``objstore`` command line: thin click commands over the library.

Each command parses arguments, calls one library function and prints. Any
``ObjstoreError`` becomes one line on stderr and its documented exit code (see
``objstore.errors``); no traceback reaches the user for bad input.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys

import click

from objstore import codec
from objstore.errors import ObjstoreError
from objstore.runlog import RunLog
from objstore.store import Store, default_path

EXIT_CODES_HELP = """\b
Exit codes: 0 ok; 1 verify found problems; 2 usage; 3 no store;
4 not found; 5 invalid input; 6 integrity error; 7 conflict;
8 refused; 9 limit exceeded; 10 operating-system error."""


def _echo_json(value) -> None:
    click.echo(codec.canonical_json(value).decode())


class Ctx:
    def __init__(self, path: str | None):
        self.path = path
        self._log = None

    def log(self, create: bool = False) -> RunLog:
        if self._log is None:
            self._log = RunLog(Store.open(self.path or default_path(), create=create))
        return self._log


pass_ctx = click.make_pass_decorator(Ctx)


class Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ObjstoreError as e:
            click.echo(f"objstore: error: {e}", err=True)
            sys.exit(e.exit_code)
        except BrokenPipeError:
            sys.exit(0)
        except OSError as e:
            click.echo(f"objstore: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), err=True)
            sys.exit(10)
        except sqlite3.Error as e:  # the state cache; `objstore rebuild` remakes it from the objects
            click.echo(f"objstore: error: state cache: {e} (try 'objstore rebuild')", err=True)
            sys.exit(10)


@click.group(cls=Group, epilog=EXIT_CODES_HELP)
@click.option("--store", "store", metavar="PATH", envvar="OBJSTORE_DIR", help="Store directory (default ./.objstore; env OBJSTORE_DIR).")
@click.version_option(package_name="objstore")
@click.pass_context
def cli(ctx, store):
    """objstore: a content-addressed, append-only store for AI-agent run histories.

    Every record is an immutable object named by its BLAKE3 hash; rewinds fork
    a new branch and delete nothing; `verify` proves the history by hashing.
    """
    ctx.obj = Ctx(store)


# -- core --------------------------------------------------------------------------
@cli.command()
@pass_ctx
def init(c):
    """Create an empty store (no-op if one is already there)."""
    s = Store.init(c.path or default_path())
    click.echo(f"initialised objstore store in {s.root}")


@cli.command()
@click.argument("oid")
@click.option("--body", is_flag=True, help="A blob's body only (streamed; how callers fetch what a view refers to).")
@pass_ctx
def cat(c, oid, body):
    """Write an object's raw canonical bytes (header included) to stdout."""
    store = c.log().store
    key = store.resolve_id(oid)
    if body:
        store.copy_blob_to(key, sys.stdout.buffer)
    else:
        sys.stdout.buffer.write(store.get_raw(key))
    sys.stdout.buffer.flush()


@cli.command()
@click.argument("oid")
@click.option("--json", "as_json", is_flag=True, help="Canonical JSON of the decoded object.")
@pass_ctx
def show(c, oid, as_json):
    """Show one object: its type, id and fields (blobs: their text)."""
    store = c.log().store
    key = store.resolve_id(oid)
    otype, value = store.get(key)
    if as_json:
        body = {"utf8": value.decode("utf-8", "replace"), "size": len(value)} if otype == codec.BLOB else value
        _echo_json({"id": key, "type": otype, "value": body})
        return
    click.echo(f"{otype} {key.hex()}")
    if otype == codec.BLOB:
        click.echo(f"size {len(value)}")
        click.echo("")
        click.echo(value.decode("utf-8", "replace"))
    else:
        click.echo(json.dumps(codec.to_jsonable(value), indent=2, sort_keys=True))


@cli.command()
@click.argument("prefix", required=False, default="")
@click.option("--json", "as_json", is_flag=True)
@click.option("--log", "with_log", is_flag=True, help="Also print each ref's moves, read from the log's commit entries.")
@pass_ctx
def refs(c, prefix, as_json, with_log):
    """List refs (optionally under PREFIX) with their values."""
    store = c.log().store
    rows = [{"name": name, "value": value.hex() if isinstance(value, bytes) else value} for name, value in store.list_refs(prefix)]
    if with_log:
        moves: dict = {}
        for m in store.ref_log():
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

    The input is read once and the id is the hash of exactly the bytes stored."""
    store = c.log().store
    if path == "-":
        oid = store.put_blob_stream(sys.stdin.buffer)
    else:
        oid = store.put_blob_file(path)
    click.echo(oid.hex())


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Problems as a JSON list (no progress bar).")
@click.option("--no-state", is_flag=True, help="Skip the state-cache-versus-re-fold check.")
@click.option("--anchor", "anchor", metavar="TOKEN", help="Also prove the log still holds the history this anchor (from 'objstore anchor') names.")
@pass_ctx
def verify(c, as_json, no_state, anchor):
    """Re-read the whole log: entries, checksums, objects, refs, chains, forks, the state cache.

    Prints one line per problem (code, object or ref, detail, path) and exits 1
    if any were found, 0 if the store is clean. Torn tails left by a crash and
    past cuts of them are printed as notes on stderr: they do not fail verify.
    """
    from objstore.verify import verify_report

    log = c.log()
    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.progress import Progress

        bar = Progress(transient=True)
        task = bar.add_task("verifying objects", total=None)
        bar.start()
        progress = lambda n: bar.update(task, completed=n)  # noqa: E731
    try:
        report = verify_report(log, check_state=not no_state, anchor=anchor, progress=progress)
    finally:
        if progress:
            bar.stop()
    problems = report.problems
    if as_json:
        _echo_json([p.as_dict() for p in problems])
    else:
        for p in problems:
            click.echo(p.line())
    for note in report.notes:
        click.echo(f"note: {note.line()}", err=True)
    if not problems and not as_json:
        click.echo(f"verify: ok ({report.entries} entries, {report.objects} objects)", err=True)
    sys.exit(1 if problems else 0)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="version, entry, segment, offset, checksum and time as JSON.")
@pass_ctx
def anchor(c, as_json):
    """Print an anchor of the log's current head; writes nothing.

    Keep the token elsewhere; 'objstore verify --anchor TOKEN' later proves the
    log still holds that exact history (no truncation, rollback or rewrite).
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
    """Convert a format-1 store in place to format 2, keeping the old one as PATH.format1."""
    from objstore.upgrade import upgrade as run_upgrade

    summary = run_upgrade(c.path or default_path())
    click.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


# -- runs ----------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def runs(c, as_json):
    """List runs with their live branch and branch count."""
    log = c.log()
    rows = []
    for run in log.runs():
        v = log.view(run)
        rows.append({"run": run, "live": v.live, "branches": len(v.heads)})
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['run']}  live branch {r['live']}  ({r['branches']} branch{'es' if r['branches'] != 1 else ''})")


def _fork_line(fk) -> str:
    s = f"fork   {fk['id'].hex()[:12]}  branch {fk['branch']} forked from branch {fk['parent_branch']} at lsn {fk['parent_lsn']}"
    if fk.get("reason"):
        s += f" ({fk['reason']})"
    if fk.get("compensation"):
        items = ", ".join(f"{x['intent']}:{x['effect']}" for x in fk["compensation"])
        s += f"  [COMPENSATION REQUIRED: {items}]"
    return s


def _rec_line(r) -> str:
    b = r.body
    if r.kind == "attempt":
        what = f"step {b['step']} attempt {b['attempt']} {b['state']}"
    elif r.kind == "intent":
        what = f"{b['intent']} {b['effect']} ({'idempotent' if b['idempotent'] else 'NOT idempotent'})"
    elif r.kind == "intent_committed":
        what = b["intent"]
    elif r.kind == "run_finished":
        what = b["status"] + (f": {b['error']}" if b.get("error") else "")
    elif r.kind == "run_started":
        what = f"subject {b['subject']} workflow {b['workflow_version']}"
    else:
        what = b.get("role", "")
    return f"lsn {r.lsn:<4} {r.kind:<16} {r.id.hex()[:12]}  {what}"


@cli.command("log")
@click.argument("run")
@click.option("--branch", type=int, default=None, help="Show this branch instead of the live one.")
@click.option("--all-branches", is_flag=True, help="Every branch, each with its own records only.")
@click.option("-n", "--max-count", type=click.IntRange(min=1), default=None, help="Show at most N entries.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def log_cmd(c, run, branch, all_branches, max_count, as_json):
    """Show a run's history, newest first, like git log.

    By default the live branch: its own records, its fork point, then the
    parent's records up to the fork point.
    """
    log = c.log()
    view = log.view(run)
    first = view.live if branch is None else branch
    entries = list(itertools.islice(log.log_entries(view, branch, all_branches=all_branches), max_count))
    if as_json:
        out = []
        for b, r, fk in entries:
            if r is not None:
                out.append({"id": r.id, "branch": r.branch, "lsn": r.lsn, "kind": r.kind, "parent": r.parent, "time": r.time, "body": r.body})
            else:
                out.append({"id": fk["id"], "branch": fk["branch"], "kind": "fork", **{k: fk[k] for k in ("parent_branch", "parent_lsn", "parent_record", "parent_head", "reason", "compensation")}})
        _echo_json(out)
        return
    shown = None
    for b, r, fk in entries:
        if b != shown:
            shown = b
            tag = " (live)" if b == view.live else ""
            upto = f" up to lsn {r.lsn}" if r is not None and b != first and not all_branches else ""
            click.echo(f"== run {run} branch {b}{tag}{upto}")
        click.echo(_rec_line(r) if r is not None else _fork_line(fk))


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def branches(c, run, as_json):
    """List a run's branches with fork points read from the fork objects."""
    log = c.log()
    rows = log.branches(log.view(run))
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        fk = r["fork"]
        where = f"forked from branch {fk['parent_branch']} at lsn {fk['parent_lsn']}" if fk else "root"
        comp = "  COMPENSATION REQUIRED" if fk and fk["compensation"] else ""
        click.echo(f"{'*' if r['live'] else ' '} branch {r['branch']}  head {r['head'].hex()[:12]}  {where}{comp}")


def _print_fork(fr, as_json):
    if as_json:
        _echo_json(fr.as_dict())
        return
    click.echo(f"branch {fr.branch} forked from branch {fr.parent_branch} at lsn {fr.parent_lsn} (fork {fr.fork_id.hex()[:12]})")
    for x in fr.compensation:
        click.echo(f"COMPENSATION REQUIRED: intent {x['intent']} ({x['effect']}, step {x['step']}) was committed at lsn {x['committed_lsn']} and is not idempotent", err=True)


@cli.command()
@click.argument("run")
@click.option("--to-lsn", type=int, required=True, help="Last LSN of the live branch to keep in the new branch's history.")
@click.option("--reason", default="rewind", show_default=True)
@click.option("--expect-branch", type=int, default=None, help="Only if this branch is the live one; otherwise exit 7 and create nothing.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def rewind(c, run, to_lsn, reason, expect_branch, as_json):
    """Rewind the live branch: fork it at --to-lsn; the new branch becomes live.

    Nothing is deleted: the old branch stays, byte-identical. Rewinding past a
    committed non-idempotent intent flags compensation on the fork and warns.
    """
    _print_fork(c.log().rewind(run, to_lsn, reason=reason, expect_live=expect_branch), as_json)


@cli.command()
@click.argument("run")
@click.option("--from-branch", type=int, required=True)
@click.option("--at-lsn", type=int, required=True)
@click.option("--reason", default="fork", show_default=True)
@click.option("--live/--no-live", default=True, show_default=True, help="Make the new branch live.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def fork(c, run, from_branch, at_lsn, reason, live, as_json):
    """Fork a new branch from any branch at any LSN."""
    _print_fork(c.log().fork(run, from_branch, at_lsn, reason=reason, make_live=live), as_json)


@cli.command()
@click.argument("run")
@click.argument("a", type=int)
@click.argument("b", type=int)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def diff(c, run, a, b, as_json):
    """Compare branches A and B: fork point, records unique to each, state difference."""
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
@click.argument("run")
@pass_ctx
def export(c, run):
    """Print the outbox entries of the live branch as JSON Lines (only the live branch is exported)."""
    from objstore.export import export as run_export

    for e in run_export(c.log(), run):
        click.echo(codec.canonical_json(e).decode())


@cli.command()
@click.argument("run", required=False)
@pass_ctx
def rebuild(c, run):
    """Drop and rebuild the materialized state cache from the raw objects."""
    log = c.log()
    runs_ = log.state.rebuild(log, run)
    click.echo(f"rebuilt state for {len(runs_)} run(s)")


@cli.command()
@click.argument("source", type=click.File("rb"))
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def ingest(c, source, as_json):
    """Ingest JSON Lines events (schema v1, docs/INGEST.md) from FILE or - (stdin).

    All or nothing: a bad line is reported with its number and no line lands.
    """
    from objstore.ingest import ingest as run_ingest

    summary = run_ingest(c.log(create=True), source)
    if as_json:
        _echo_json(summary)
        return
    click.echo(f"ingested {summary['events']} event(s): {summary['records']} record(s), {len(summary['runs'])} new run(s), {len(summary['forks'])} fork(s)")
    for f in summary["forks"]:
        if f["compensation_required"]:
            click.echo(f"COMPENSATION REQUIRED on run {f['run']} branch {f['branch']} (line {f['line']})", err=True)


@cli.command()
@click.argument("run")
@click.option("--all-branches", is_flag=True, help="Every branch (grading); default is the live branch.")
@click.option("--json", "as_json", is_flag=True, help="Canonical JSON of the EpisodeView.")
@click.option("--source", type=click.Choice(["state", "refold"]), default="state", show_default=True, help="Materialized state, or a cold re-fold of the raw log.")
@pass_ctx
def episode(c, run, all_branches, as_json, source):
    """Every attempt of a run (failed ones included) with blob refs, never bodies."""
    from objstore.query import episode as run_episode

    ep = run_episode(c.log(), run, all_branches=all_branches, source=source)
    if as_json:
        click.echo(ep.to_json().decode())
        return
    from rich.console import Console
    from rich.table import Table

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
@cli.group()
def journal():
    """A session's journal: show, update, enable/disable, and writer grants.

    The CLI acts as the run's owner (its subject); updates name a --writer that
    must hold a grant (see `journal grant`).
    """


@journal.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def journal_show(c, run, as_json):
    """Show the newest journal version of RUN."""
    from objstore import journal as J

    log = c.log()
    J.authorize(log, J.owner(log, run), run)
    cur = J.current_journal(log, run)
    if cur is None:
        raise_absent(run)
    jid, j = cur
    body = log.store.get_blob(j["body"])
    if as_json:
        _echo_json({"id": jid, **{k: v for k, v in j.items() if k != "body"}, "body": json.loads(body)})
        return
    click.echo(f"journal {jid.hex()}  version {j['version']}  {'enabled' if j['enabled'] else 'DISABLED'}")
    click.echo(f"source_end {j['source_end']}  checkpoint {j['checkpoint']}  writer {j['writer']}")
    click.echo(json.dumps(json.loads(body), indent=2, sort_keys=True))


def raise_absent(run):
    from objstore.errors import NotFound

    raise NotFound(f"journal of run {run} (no version recorded)")


@journal.command("update")
@click.argument("run")
@click.argument("source", type=click.File("rb"))
@click.option("--source-end", type=int, required=True, help="LSN of the last turn this version reflects.")
@click.option("--checkpoint", type=int, required=True, help="Processing checkpoint (LSN).")
@click.option("--writer", default=None, help="Writer identity (must hold a grant); default: the owner.")
@pass_ctx
def journal_update(c, run, source, source_end, checkpoint, writer):
    """Write the next journal version from a JSON object in SOURCE (a file or -)."""
    from objstore import journal as J
    from objstore.errors import InvalidInput

    log = c.log()
    try:
        body = json.loads(source.read())
    except ValueError as e:
        raise InvalidInput(f"journal body is not JSON: {e}") from None
    boss = J.owner(log, run)
    caller = boss if writer is None else J.Caller(writer, boss.subject)
    jid, ver = J.update_journal(log, run, caller, body, source_end=source_end, checkpoint=checkpoint)
    click.echo(f"journal of {run} is now version {ver} ({jid.hex()[:12]})")


def _grant_cmd(c, run, writer, reason, granting):
    from objstore import journal as J

    log = c.log()
    (J.grant_writer if granting else J.revoke_writer)(log, run, writer, J.owner(log, run), reason)
    click.echo(f"{'granted' if granting else 'revoked'} {writer} on {run}")


@journal.command("grant")
@click.argument("run")
@click.argument("writer")
@click.option("--reason", default="")
@pass_ctx
def journal_grant(c, run, writer, reason):
    """Grant WRITER the right to update RUN's journal."""
    _grant_cmd(c, run, writer, reason, True)


@journal.command("revoke")
@click.argument("run")
@click.argument("writer")
@click.option("--reason", default="")
@pass_ctx
def journal_revoke(c, run, writer, reason):
    """Revoke WRITER's grant on RUN (recorded, never erased)."""
    _grant_cmd(c, run, writer, reason, False)


def _enable_cmd(c, run, enabled):
    from objstore import journal as J

    log = c.log()
    J.set_journal_enabled(log, run, J.owner(log, run), enabled)
    click.echo(f"journal of {run} {'enabled' if enabled else 'disabled'}")


@journal.command("enable")
@click.argument("run")
@pass_ctx
def journal_enable(c, run):
    """Enable the journal of RUN for compaction."""
    _enable_cmd(c, run, True)


@journal.command("disable")
@click.argument("run")
@pass_ctx
def journal_disable(c, run):
    """Disable the journal of RUN (compaction then records outcome 'disabled')."""
    _enable_cmd(c, run, False)


@cli.command()
@click.argument("run")
@click.option("--keep", type=int, default=4, show_default=True, help="Turns kept verbatim as the retained tail.")
@click.option("--budget", type=int, default=65536, show_default=True, help="Journal byte budget; larger is outcome over_budget.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def compact(c, run, keep, budget, as_json):
    """Compact a session: one journal read, one rendering, one new segment.

    Uses the deterministic stub compactor (no model here) and the local journal host.
    """
    from objstore import journal as J

    log = c.log()
    res = J.compact(log, run, J.StubCompactor(), host=J.LocalJournalHost(log), caller=J.owner(log, run), keep_tail=keep, budget_bytes=budget)
    if as_json:
        _echo_json({"segment": res.segment_id, "seq": res.segment["seq"], "journal_outcome": res.snapshot.outcome,
                    "journal_reason": res.snapshot.reason, "summary": res.summary})
        return
    click.echo(f"segment {res.segment['seq']} {res.segment_id.hex()[:12]}: journal {res.snapshot.outcome}"
               + (f" ({res.snapshot.reason})" if res.snapshot.reason else "")
               + f", {len(res.segment['retained'])} turn(s) retained")
    click.echo(res.summary)


@cli.command("segments")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def segments_cmd(c, run, as_json):
    """List a session's compaction segments, oldest first."""
    from objstore import journal as J

    log = c.log()
    log.view(run)
    rows = J.segments(log, run)
    if as_json:
        _echo_json([{"id": sid, **seg} for sid, seg in rows])
        return
    for sid, seg in rows:
        j = seg["journal"]
        click.echo(f"segment {seg['seq']} {sid.hex()[:12]}  branch {seg['branch']}  journal {j['outcome']}"
                   + (f" v{j['version']} sha256 {j['sha256'][:12]}" if j["sha256"] else "")
                   + f"  retained {len(seg['retained'])}")


@cli.command()
@pass_ctx
def demo(c):
    """Record the seed T2.3 run with a stub model, rewind it, and show the result.

    Creates the store if absent; each call records a new run.
    """
    from objstore.demo import six_step_run
    from objstore.verify import verify as run_verify

    log = c.log(create=True)
    click.echo(f"store: {log.store.root}")
    res = six_step_run(log)
    run = res["run"]
    click.echo(f"recorded run {run}: 6 steps on branch 0 (step 2 retried, step 6 failed), rewound to lsn 3, new path on branch 1\n")
    click.echo("$ objstore log --all-branches " + run)
    ctx = click.get_current_context()
    ctx.invoke(log_cmd, run=run, branch=None, all_branches=True, as_json=False)
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
    cli(prog_name="objstore")


if __name__ == "__main__":
    main()
