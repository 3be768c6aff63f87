"""The run commands' tables on a terminal: ``log``'s grouped layout and ``diff``, through rich.

Only a terminal gets them (rich loads then, never for a pipe: tests/test_startup.py), one line a
row at the terminal's width — a long cell ends in '…', never wraps — and no escape code under
NO_COLOR. Into a pipe the commands keep their plain lines, which scripts read.
"""

from __future__ import annotations

import json
import os
import time

from .output import console_and_table


def group_title(run, view, b, r, first, all_branches) -> str:
    """The heading of one branch group of ``log``'s default layout (its first record ``r``): the live
    branch marked, an ancestor's "up to lsn N" (where the branch shown forked from it)."""
    tag = " (live)" if b == view.live else ""
    upto = f" up to lsn {r.lsn}" if r is not None and b != first and not all_branches else ""
    return f"run {run} branch {b}{tag}{upto}"


TABLE_CHUNK = 200  # rows per rendered table: a long log streams to the pager instead of waiting for all of it


def log_tables(run, view, first, all_branches, entries):
    """The default layout on a terminal: a rich table per branch group (LSN, kind, id, time, what),
    one line a row at the terminal's width (long cells end in '…', never wrap), no escape code
    under NO_COLOR. Rendered TABLE_CHUNK rows at a time, so ``-n`` and the pager stay lazy."""
    import io
    import shutil

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from objstore.runs import history

    width = shutil.get_terminal_size().columns
    plain = bool(os.environ.get("NO_COLOR"))

    def when(t):  # the year is the width of a summary: --format full and --json have it
        return "-" if t is None else time.strftime("%m-%d %H:%M:%S", time.localtime(t))

    def render(title, rows, header):
        t = Table(title=title, show_header=header, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
        # fixed columns as wide as their widest cell; "what" takes the rest and is the one cut short
        # (a column takes three more: its padding and the separator)
        fixed = [max(len(name), *(len(row[i]) for row in rows)) for i, name in enumerate(("lsn", "kind", "id", "time"))]
        for name, w, justify in zip(("lsn", "kind", "id", "time"), fixed, ("right", "left", "left", "left"), strict=True):
            t.add_column(name, no_wrap=True, width=w, justify=justify)
        t.add_column("what", no_wrap=True, overflow="ellipsis", width=max(10, width - sum(fixed) - 3 * 5 - 1))
        for row in rows:
            t.add_row(*row)
        buf = io.StringIO()
        Console(file=buf, width=width, force_terminal=not plain, color_system=None if plain else "standard", highlight=False).print(t)
        return [line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n")]

    shown, title, rows, header = None, None, [], True
    for b, r, fk in entries:
        if b != shown:
            if rows:
                yield from render(title, rows, header)
            shown, rows, header = b, [], True
            title = group_title(run, view, b, r, first, all_branches)
        if r is not None:
            rows.append((str(r.lsn), r.kind, r.id.hex()[:12], when(r.time), history.summary(r)))
        else:
            rows.append(("", "fork", fk["id"].hex()[:12], when(fk.get("time")), history.fork_text(fk)))
        if len(rows) >= TABLE_CHUNK:
            yield from render(title, rows, header)
            title, rows, header = None, [], False
    if rows:
        yield from render(title, rows, header)


def diff_tables(run, a, b, d, con=None, Table=None):
    """``diff`` on a terminal: the records unique to each side and the state difference as rich
    tables, one line a row (a long JSON value ends in '…' instead of wrapping; --json has it whole).
    ``con``/``Table``: where to print (``output.paged_console``); default: the terminal."""
    if con is None or Table is None:
        con, Table = console_and_table()
    cm = d["common"]
    con.print(f"run {run}: branch {a} vs branch {b}; shared history: branch {cm['branch']} up to lsn "
              f"{cm['lsn'] if cm['lsn'] is not None else 'its head'}", markup=False)
    from rich import box

    t = Table(title=f"records only in branch {a} (-) or {b} (+)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("", "branch", "lsn", "kind", "id"):
        t.add_column(col, no_wrap=True, overflow="ellipsis")
    for key, sign in (("only_a", "-"), ("only_b", "+")):
        for r in d[key]:
            t.add_row(sign, str(r["branch"]), str(r["lsn"]), r["kind"], r["id"][:12])
    con.print(t)
    t = Table(title="folded state", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    path_w = min(24, max([4, *(len(ch["path"]) for ch in d["state"])]))
    side_w = max(8, (con.width - path_w - 3 * 3 - 1) // 2)  # the rest, halved: a long JSON value ends in '…'
    t.add_column("path", no_wrap=True, overflow="ellipsis", width=path_w)
    for col in (f"branch {a}", f"branch {b}"):
        t.add_column(col, no_wrap=True, overflow="ellipsis", width=side_w)
    for ch in d["state"]:
        t.add_row(ch["path"], json.dumps(ch["a"]), json.dumps(ch["b"]))
    con.print(t)
