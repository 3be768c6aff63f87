"""``objstore view RUN``: one self-contained HTML page of a run (issue 19, pictures).

The page is a single file with no network, server or CDN: its CSS and JavaScript are inline
(``page_html``), a Content-Security-Policy allows nothing off the page (``default-src 'none'``, the one
script admitted by its hash), and the run is embedded as JSON in a ``<script type="application/json">``
block that the script reads and draws with ``textContent`` only (never ``innerHTML``). In that JSON
``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e``, ``\\u0026``, so no body text (a
``</script>``, an ``<img onerror>``) can end the block or become markup.

What ``data`` gathers, from one ``View`` (one snapshot):

* **The branch tree**: ``pictures.Tree`` (the walk ``log --graph --format mermaid|dot`` draws), each
  record or fork object with its branch, LSN, kind, ``history.summary`` line, parent, head marks
  (``LIVE`` / ``retained``), fork reason and compensation flags.
* **Every attempt**, failed ones first-class: state, error text, step and try, on every branch.
* **Bodies**: a record's body (its JSON) is embedded up to ``BODY_MAX`` bytes each and ``TOTAL_MAX``
  bytes for the page; above either, the page gives the id, the size and the ``objstore cat`` line
  that prints it. Blob bodies (prompt, output, content) only with ``bodies=True``, read through
  ``Store.get_blob``, which refuses a deleted or redacted blob (``Erased``): the page then says
  "withheld" and why, never the bytes. Records come from the chain read, which returns a deleted
  record header-only: its body is never on the page. Text that is not UTF-8 is not embedded.
* **A diff of two branches** (``query.diff``): the shared history, the records only on each side,
  the folded state's differences, and the first divergence (the last shared record and each side's
  first own record) marked.

An exported page is a copy outside the store: a later ``objstore delete`` or ``redact`` does not
reach it (docs/CLI.md, ``view``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import TYPE_CHECKING, Any

from ..errors import Erased, InvalidInput
from ..storage import codec
from . import history, pictures, query, views
from . import records as R

if TYPE_CHECKING:
    from .chain import ChainReader, View

BODY_MAX = 64 * 1024  # bytes of one embedded body (a record's JSON, or a blob's text)
TOTAL_MAX = 4 * 1024 * 1024  # bytes of all embedded bodies of one page
FORMAT = "objstore-view/1"


class _Budget:
    """What may still be embedded: ``BODY_MAX`` per body, ``TOTAL_MAX`` in all."""

    def __init__(self, body_max: int, total_max: int) -> None:
        self.body_max = body_max
        self.left = total_max

    def take(self, text: str) -> bool:
        n = len(text.encode("utf-8"))
        if n > self.body_max or n > self.left:
            return False
        self.left -= n
        return True


def default_pair(view: View, tree: pictures.Tree) -> tuple[int, int] | None:
    """The branches a page compares unless told: the live branch and the one it forked from (or, when
    the live branch is the root, the root and its first other branch); None for a run of one branch."""
    fk = tree.forks.get(view.live)
    if fk is not None and not fk.get("parent_run"):
        return int(fk["parent_branch"]), view.live
    others = sorted(b for b in view.heads if b != view.live)
    return (view.live, others[0]) if others else None


def data(log: ChainReader, view: View, *, bodies: bool = False, pair: tuple[int, int] | None = None,
         body_max: int = BODY_MAX, total_max: int = TOTAL_MAX) -> dict:
    """The page's embedded JSON (see the module docstring); ``pair`` names the two branches to diff."""
    tree = pictures.Tree(log, view)
    budget = _Budget(body_max, total_max)
    if pair is None:
        pair = default_pair(view, tree)
    else:
        for b in pair:
            if b not in view.heads:
                raise InvalidInput(f"run {view.run} has no branch {b} (branches: {', '.join(map(str, sorted(view.heads)))})")
    nodes = [_node(log, tree, oid, budget, bodies) for oid in _order(tree)]
    return {
        "format": FORMAT,
        "run": view.run,
        "live": view.live,
        "bodies": bodies,
        "limits": {"body": body_max, "total": total_max},
        "nodes": nodes,
        "branches": [_branch(view, tree, b) for b in sorted(view.heads)],
        "attempts": [_attempt(n) for n in nodes if n["kind"] == R.ATTEMPT and not n["deleted"]],
        "diff": _diff(log, view, tree, pair) if pair is not None else None,
    }


def _order(tree: pictures.Tree) -> list[bytes]:
    """Every object, depth first from the roots: a record, then its branch's next record, then the
    branches forked off it (so a branch's records are contiguous and follow their fork)."""
    out: list[bytes] = []
    stack = list(reversed(tree.roots()))
    while stack:
        oid = stack.pop()
        out.append(oid)
        kids = tree.children.get(oid, [])
        same = [k for k in kids if tree.branch_of(k) == tree.branch_of(oid) and not isinstance(tree.nodes[k], dict)]
        others = [k for k in kids if k not in same]
        stack.extend(reversed(others))
        stack.extend(reversed(same))  # popped first: the branch goes on before its forks are drawn
    return out


def _node(log: ChainReader, tree: pictures.Tree, oid: bytes, budget: _Budget, bodies: bool) -> dict:
    it = tree.nodes[oid]
    head_of = tree.heads.get(oid)
    n: dict[str, Any] = {
        "id": oid.hex(), "short": tree.short[oid], "branch": tree.branch_of(oid), "lsn": None,
        "parent": None if tree.parent[oid] is None else tree.parent[oid].hex(),  # type: ignore[union-attr]
        "head": None if head_of is None else ("LIVE" if head_of == tree.view.live else "retained"),
        "failed": pictures.failed(it), "deleted": None, "blobs": [],
    }
    if isinstance(it, dict):
        fv = views.fork(it)
        n.update(kind="fork", summary=history.parent_text(it) + (f" ({it['reason']})" if it.get("reason") else ""), time=it.get("time"), reason=it.get("reason") or "",
                 compensation=history.compensation_text(it))
        _embed(n, json.dumps(fv, indent=2, sort_keys=True, ensure_ascii=False), budget, f"objstore cat {oid.hex()}")
        return n
    n.update(kind=it.kind, lsn=it.lsn, summary=history.summary(it), time=it.time)
    gone = R.deleted_by(it)
    if gone is not None:  # header-only: the chain read withheld the body
        n["deleted"] = gone.hex()
        n.update(body=None, size=None, cat=None)
        return n
    if it.kind == R.ATTEMPT:
        n.update(step=it.body.get("step"), attempt=it.body.get("attempt"), state=it.body.get("state"), error=it.body.get("error"))
    text = json.dumps(codec.to_jsonable(it.body), indent=2, sort_keys=True, ensure_ascii=False)
    _embed(n, text, budget, f"objstore cat {oid.hex()}")
    n["blobs"] = [_blob(log, name, ref, budget, bodies) for name in R.BLOB_FIELDS
                  if isinstance(ref := it.body.get(name), bytes)]
    return n


def _embed(n: dict, text: str, budget: _Budget, cat: str) -> None:
    n["size"] = len(text.encode("utf-8"))
    n["body"] = text if budget.take(text) else None
    n["cat"] = cat


def _blob(log: ChainReader, name: str, ref: bytes, budget: _Budget, bodies: bool) -> dict:
    b: dict[str, Any] = {"field": name, "id": ref.hex(), "cat": f"objstore cat --body {ref.hex()}",
                         "body": None, "size": None, "withheld": None}
    if not bodies:
        return b
    try:
        raw = log.store.get_blob(ref)  # the store's read path: Erased for a deleted or redacted blob
    except Erased as e:
        b["withheld"] = e.code
        return b
    b["size"] = len(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        b["withheld"] = "not-utf-8"
        return b
    b["body"] = text if budget.take(text) else None
    return b


def _branch(view: View, tree: pictures.Tree, b: int) -> dict:
    fk = tree.forks.get(b)
    return {
        "branch": b, "live": b == view.live, "head": view.heads[b].hex(),
        "fork": None if fk is None else bytes(fk["id"]).hex(),
        "parent_branch": None if fk is None else fk["parent_branch"],
        "parent_lsn": None if fk is None else fk["parent_lsn"],
        "parent_run": None if fk is None else fk.get("parent_run"),
        "reason": None if fk is None else fk.get("reason") or "",
        "compensation": "" if fk is None else history.compensation_text(fk),
    }


def _attempt(n: dict) -> dict:
    return {k: n.get(k) for k in ("id", "short", "branch", "lsn", "step", "attempt", "state", "error")}


def _diff(log: ChainReader, view: View, tree: pictures.Tree, pair: tuple[int, int]) -> dict:
    a, b = pair
    d = query.diff(log, view.run, a, b, view=view)
    cm = d["common"]
    shared = [it for it in tree.nodes.values() if not isinstance(it, dict) and it.branch == cm["branch"]
              and (cm["lsn"] is None or it.lsn <= cm["lsn"])]
    last = max(shared, key=lambda r: r.lsn) if shared else None  # the last record both sides have
    return {
        "a": a, "b": b, "common": cm, "last_shared": None if last is None else last.id.hex(),
        "first_a": d["only_a"][0]["id"] if d["only_a"] else None,
        "first_b": d["only_b"][0]["id"] if d["only_b"] else None,
        "only_a": [_side(r) for r in d["only_a"]], "only_b": [_side(r) for r in d["only_b"]],
        "state": d["state"],
    }


def _side(r: dict) -> dict:
    return {"id": r["id"], "branch": r["branch"], "lsn": r["lsn"], "kind": r["kind"]}


# -- the page ---------------------------------------------------------------------------------------
def embed_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` left (they are
    JSON string escapes instead), so no text can close the block or open a tag or a comment."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(value: dict) -> str:
    """The whole HTML page of ``data(...)``."""
    from .page_html import CSS, SCRIPT, SHELL

    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode()
    csp = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    return SHELL.format(title=html.escape(f"objstore run {value['run']}"), csp=html.escape(csp), css=CSS,
                        data=embed_json(value), script=SCRIPT)


def page(log: ChainReader, view: View, **opts: Any) -> str:
    """``render(data(log, view, **opts))``."""
    return render(data(log, view, **opts))
