"""Verify and anchors: ``verify`` (with its progress bar on a terminal) and ``anchor``, over
objstore.runs.verify."""

from __future__ import annotations

import sys

import click

from .output import echo_json
from .params import RUN, pass_ctx


class _VerifyBar:
    """verify's progress on stderr (a terminal only): objects and bytes done of the total, a rate."""

    def __init__(self, store):
        from rich.console import Console
        from rich.filesize import decimal
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

        from objstore.runs.verify import progress_totals

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


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the problems as a JSON list (docs/CLI.md, 'problem'); no progress bar.")
@click.option("--no-state", is_flag=True, help="Skip comparing the state cache (derived SQLite tables) with a re-fold of the records.")
@click.option("--anchor", "anchor", metavar="TOKEN", help="Also prove the log still holds the history this anchor (from 'objstore anchor') names.")
@click.option("--anchors", "anchors_file", metavar="FILE", default=None,
              help="Also prove every anchor in FILE (one token a line, as 'objstore anchor --append FILE' writes them).")
@click.option("--jobs", "-j", "jobs", type=click.IntRange(min=1, max=1024), default=None, metavar="N",
              help="Processes that check segments in parallel (default: $OBJSTORE_VERIFY_JOBS, else one per core once the log "
                   "passes 8 MiB); 1: all in this process. The report is the same.")
@click.argument("run", type=RUN, required=False)
@pass_ctx
def verify(c, as_json, no_state, anchor, anchors_file, jobs, run):
    """Re-read the whole log: entries, checksums, objects, refs, chains, forks, the state cache.

    Prints one line per problem (code, object or ref, detail, path) and exits 1
    if any were found, 0 if the store is clean. Torn tails left by a crash and
    past cuts of them are printed as notes on stderr: they do not fail verify.

    With RUN (an id, a prefix, 'latest', or labels such as thread_id=T), the
    log under it is still proved — a run is sound only if its log is: the whole
    store where one log holds every run, else the store log and RUN's own log —
    and verify also re-folds every branch of RUN (its state cache must equal the
    re-fold) and says on stderr what it proved of it.

    On a store with a log per run every log is proved on its own, one at a
    time, and the catalog against the logs: a run the catalog lists whose log
    is gone (missing-run-log), a log with entries the catalog does not list
    (uncatalogued-run), a catalog entry that disagrees with the run's
    run_started record (catalog-mismatch) or does not read (bad-catalog-entry).
    A log with no entry (a start_run killed before its first commit) is the
    note 'unstarted-run' on stderr: it does not fail verify.

    \b
    Arguments:
      RUN  optional: the run (its id, a unique prefix, 'latest', 'latest~N', or its labels: thread_id=T)

    \b
    Examples:
      objstore verify
      objstore verify latest
      objstore verify --json
      objstore verify --anchor TOKEN
      objstore verify --anchors anchors.txt
      objstore verify --jobs 1
    """
    from objstore.runs import views
    from objstore.runs.anchors import read_anchors
    from objstore.runs.verify import verify_report

    anchors = read_anchors(anchors_file) if anchors_file is not None else []  # a bad file is refused before any reading
    log = c.log()
    bar = _verify_bar(log.store) if not as_json and sys.stderr.isatty() else None
    try:
        report = verify_report(log, check_state=not no_state, anchor=anchor, anchors=anchors, progress=bar.update if bar else None,
                               jobs=jobs, runs=[run] if run is not None else None)
    finally:
        if bar:
            bar.stop()
    problems = list(report.problems)
    proved = None
    if run is not None and not problems:
        from objstore.runs.verify import verify_run

        proved, more = verify_run(log, run)
        problems.extend(more)
    if as_json:
        echo_json([views.problem(p) for p in problems])
    else:
        for p in problems:
            click.echo(p.line())
    for note in report.notes:
        click.echo(f"note: {note.line()}", err=True)
    if not problems and not as_json:
        in_logs = f" in {report.logs} logs" if log.store.logs.per_run else ""
        click.echo(f"verify: ok ({report.entries} entries{in_logs}, {report.objects} objects)", err=True)
        if proved is not None:
            click.echo(f"verify: run {proved['run']}: {proved['branches']} branch{'es' if proved['branches'] != 1 else ''}, "
                       f"{proved['records']} records folded ({proved['inherited']} inherited), every branch's state = its re-fold", err=True)
    sys.exit(1 if problems else 0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the token with its version, entry, checksum and the rest as JSON.")
@click.option("--append", "append_file", metavar="FILE", default=None,
              help="Also append the token as one line to FILE (created if absent; fsynced), a file of anchors for 'verify --anchors'.")
@click.argument("run", type=RUN, required=False)
@pass_ctx
def anchor(c, as_json, append_file, run):
    """Print an anchor of the store's history: a token to keep elsewhere.

    'objstore verify --anchor TOKEN' later proves the store still holds that
    exact history (no truncation, rollback or rewrite).

    Where one log holds every run, the token names the log's head and anchor
    writes nothing. Where every run has its own log, anchor commits a manifest
    of every log's head (entry and checksum) to the store log (ref 'anchor')
    and prints objstore-anchor:2:<entry>:<checksum>:<root>, naming that entry
    and the manifest's Merkle root; verify --anchor then names each log rolled
    back, truncated, rewritten, removed or swapped since.

    With RUN (a store with a log per run), anchor writes nothing: it prints the
    run's head in the newest manifest and its inclusion proof (the sibling
    hashes from its leaf to the root; docs/FORMAT.md "Anchor manifest").

    \b
    Arguments:
      RUN  optional: the run (its id, a unique prefix, 'latest', 'latest~N', or its labels: thread_id=T)

    \b
    Examples:
      objstore anchor > anchor.txt
      objstore anchor --json
      objstore anchor --append anchors.txt
      objstore anchor latest
    """
    from objstore.runs.anchors import anchor_info, append_anchor

    store = c.log().store
    if run is not None:
        from objstore.runs.anchor_manifest import run_proof

        if not store.logs.per_run:
            from objstore.errors import InvalidInput

            raise InvalidInput("'anchor RUN' needs a store with a log per run (format 6); here one log holds every run: 'objstore anchor'")
        proof = run_proof(store, run)
        if as_json:
            echo_json(proof)
        else:
            click.echo(f"run {proof['run']}: entry {proof['entry']} checksum {proof['checksum']}")
            click.echo(f"leaf {proof['leaf']} (index {proof['index']} of {proof['leaves']})")
            for h in proof["proof"]:
                click.echo(f"proof {h}")
            click.echo(f"root {proof['root']}")
            click.echo(proof["token"])
            if proof["head_now"][0] != proof["entry"]:
                click.echo(f"note: the run's log is at entry {proof['head_now'][0]} now; 'objstore anchor' anchors it", err=True)
        return
    info = anchor_info(store)
    if append_file is not None:
        append_anchor(append_file, info["token"])
    if as_json:
        echo_json(info)
    else:
        click.echo(info["token"])
