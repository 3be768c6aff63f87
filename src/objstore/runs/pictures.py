"""Pictures of a run as text: ``log --graph --format mermaid`` and ``--format dot``.

Both are drawn from the branch tree ``history.graph`` walks: every branch's own records and its
fork object, read with ``ChainReader.chain`` from the branch heads of one ``View`` (one snapshot),
each object hung under its parent (a record's ``parent``, a fork's ``parent_record``; a copy's
cross-run fork is its run's root). Like ``log --graph``, the output holds no times: it is a pure
function of the objects, so it can be golden-tested and diffed.

* **Mermaid** (``gitGraph``, which GitHub and GitLab render in Markdown): one git branch per
  objstore branch (``b0``, ``b1``, ...), one commit per record (its short id, kind and summary),
  each fork a ``branch`` statement issued while its parent branch's head is the fork record,
  followed by the fork object as a ``HIGHLIGHT`` commit whose tag carries any compensation flag.
  Failed attempts and failed finishes are ``REVERSE`` commits; branch heads are tagged
  ``bN LIVE`` / ``bN retained``. The grammar rules gitGraph needs are kept here: commit ids are
  unique (a short id grows to the full id if two collide), a branch is created before it is
  checked out, and no label holds a double quote, a line break or an entity code (``#name;``); a
  backslash is doubled (Mermaid's strings take backslash escapes).
* **DOT** (Graphviz): one cluster per branch, one node per record or fork, edges from parent to
  child (oldest to newest); a fork is a diamond whose edge from its fork record is dashed;
  failed attempts are red, compensation flags bold red. Strings are DOT-escaped.

Bodies are never drawn: labels come from record headers and the few body fields ``history.summary``
shows, and a deleted record shows as deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import history
from . import records as R

if TYPE_CHECKING:
    from .chain import ChainReader, View

FORMATS = ("mermaid", "dot")
_LABEL_MAX = 90  # characters of a summary kept in a label: a gitGraph commit id is drawn in full


class Tree:
    """The branch tree of one view: objects by id, parent ids, children in drawing order."""

    def __init__(self, log: ChainReader, view: View) -> None:
        self.view = view
        self.nodes: dict[bytes, R.Record | dict] = {}
        self.parent: dict[bytes, bytes | None] = {}
        self.children: dict[bytes | None, list[bytes]] = {}
        self.forks: dict[int, dict] = {}
        for b in sorted(view.heads):
            own, fk = log.chain(view.head(b))
            items: list[R.Record | dict] = ([fk] if fk is not None else []) + list(own)
            if fk is not None:
                self.forks[b] = fk
            for it in items:
                oid = it["id"] if isinstance(it, dict) else it.id
                p = (None if it.get("parent_run") else it["parent_record"]) if isinstance(it, dict) else it.parent
                self.nodes[bytes(oid)] = it
                self.parent[bytes(oid)] = None if p is None else bytes(p)
                self.children.setdefault(None if p is None else bytes(p), []).append(bytes(oid))
        for kids in self.children.values():
            kids.sort(key=lambda k: (self.branch_of(k), self.lsn_of(k)))
        self.heads = {bytes(h): b for b, h in view.heads.items()}
        self.short = _short_ids(self.nodes)

    def branch_of(self, oid: bytes) -> int:
        it = self.nodes[oid]
        return int(it["branch"]) if isinstance(it, dict) else it.branch

    def lsn_of(self, oid: bytes) -> int:
        it = self.nodes[oid]
        return -1 if isinstance(it, dict) else it.lsn  # a fork object comes before its branch's first record

    def roots(self) -> list[bytes]:
        return self.children.get(None, [])


def _short_ids(nodes: dict[bytes, R.Record | dict]) -> dict[bytes, str]:
    """12 hex digits per object, the full id for any that would collide (gitGraph ids must be unique)."""
    short = {oid: oid.hex()[:12] for oid in nodes}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {oid: (s if seen[s] == 1 else oid.hex()) for oid, s in short.items()}


def failed(it: R.Record | dict) -> bool:
    """A failed attempt or a failed finish: drawn as a failure."""
    if isinstance(it, dict) or R.deleted_by(it) is not None:
        return False
    if it.kind == R.ATTEMPT:
        return it.body.get("state") == "failed"
    return it.kind == R.RUN_FINISHED and it.body.get("status") == "failed"


def _clean(text: str, limit: int = _LABEL_MAX) -> str:
    """One line without double quotes or control characters, at most ``limit`` characters."""
    s = "".join(" " if ord(ch) < 32 or ch == "\x7f" else ch for ch in text).replace('"', "'").strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _summary(it: R.Record | dict) -> str:
    if isinstance(it, dict):
        return f"fork {history.parent_text(it)}" + (f" ({it['reason']})" if it.get("reason") else "")
    return f"{it.kind} {history.summary(it)}".strip()


# -- mermaid ------------------------------------------------------------------------------
class _Checkout:
    """The gitGraph's checked-out branch and the branches created so far (a branch is created once)."""

    def __init__(self, main: str) -> None:
        self.current = main
        self.created = {main}


def mermaid(log: ChainReader, view: View) -> Iterator[str]:
    """The run as a Mermaid ``gitGraph``, one statement per line (see the module docstring)."""
    tree = Tree(log, view)
    roots = tree.roots()
    main = f"b{tree.branch_of(roots[0])}" if roots else "b0"
    yield "%%{init: {'gitGraph': {'mainBranchName': '" + main + "', 'showCommitLabel': true}}}%%"
    yield "gitGraph"
    state = _Checkout(main)
    for i, root in enumerate(roots):
        b = f"b{tree.branch_of(root)}"
        if i and b not in state.created:  # another root (not seen in one run today): a branch of its own
            yield f"  branch {b}"
            state.created.add(b)
            state.current = b
        yield from _mermaid_from(tree, root, state)


def _mermaid_from(tree: Tree, start: bytes, state: _Checkout) -> Iterator[str]:
    """Commits from ``start`` down its branch, each fork off a record drawn where it happens: a fork
    is branched while its parent branch's head is the fork record, and drawn whole before that branch
    goes on. Iterative (a run rewound a thousand times nests a thousand forks)."""
    stack: list[tuple[bytes, str | None]] = [(start, None)]  # (object, the branch it forks from)
    while stack:
        oid, fork_from = stack.pop()
        b = f"b{tree.branch_of(oid)}"
        if fork_from is not None:
            if state.current != fork_from:
                yield f"  checkout {fork_from}"
            yield f"  branch {b}"
            state.created.add(b)
        elif state.current != b:
            yield f"  checkout {b}"
        state.current = b
        yield "  " + _mermaid_commit(tree, oid)
        same: list[bytes] = []
        others: list[bytes] = []
        for kid in tree.children.get(oid, []):
            (same if tree.branch_of(kid) == tree.branch_of(oid) and not isinstance(tree.nodes[kid], dict) else others).append(kid)
        stack.extend((k, None) for k in reversed(same))
        stack.extend((k, b) for k in reversed(others))  # popped first, in order, while this branch's head is oid


_ENTITY = re.compile(r"#(\w+);")  # Mermaid reads #name; / #35; in any text as an entity code, before parsing


def _mm(text: str) -> str:
    """A gitGraph string's inside: ``_clean``, no entity code (``#12;`` is kept as ``#12,``) and each
    backslash doubled (Mermaid's grammar reads ``"([^"\\\\]|\\\\.)*"``: a backslash escapes the next character)."""
    return _ENTITY.sub(r"#\1,", _clean(text)).replace("\\", "\\\\")


def _mermaid_commit(tree: Tree, oid: bytes) -> str:
    it = tree.nodes[oid]
    label = _mm(f"{tree.short[oid]} {_summary(it)}")
    out = f'commit id: "{label}"'
    tags = []
    if isinstance(it, dict):
        out += " type: HIGHLIGHT"
        if it.get("compensation"):
            tags.append(f"b{it['branch']} COMPENSATION REQUIRED")
    elif failed(it):
        out += " type: REVERSE"
    head_of = tree.heads.get(oid)
    if head_of is not None:
        tags.append(f"b{head_of} " + ("LIVE" if head_of == tree.view.live else "retained"))
    if tags:
        out += f' tag: "{_mm(", ".join(tags))}"'
    return out


# -- dot ----------------------------------------------------------------------------------
def _dq(text: str) -> str:
    """A DOT quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot(log: ChainReader, view: View) -> Iterator[str]:
    """The run as a Graphviz digraph (see the module docstring)."""
    tree = Tree(log, view)
    yield f"digraph {_dq('run ' + view.run)} {{"
    yield "  rankdir=TB;"
    yield '  node [shape=box, fontname="monospace", fontsize=10];'
    by_branch: dict[int, list[bytes]] = {}
    for oid in tree.nodes:
        by_branch.setdefault(tree.branch_of(oid), []).append(oid)
    for b in sorted(by_branch):
        live = " (LIVE)" if b == view.live else " (retained)"
        yield f"  subgraph cluster_b{b} {{"
        yield f"    label={_dq(f'branch {b}{live}')};"
        for oid in sorted(by_branch[b], key=tree.lsn_of):
            yield "    " + _dot_node(tree, oid)
        yield "  }"
    for oid in sorted(tree.nodes, key=lambda o: (tree.branch_of(o), tree.lsn_of(o))):
        p = tree.parent[oid]
        if p is None:
            continue
        style = " [style=dashed, label=\"fork\"]" if isinstance(tree.nodes[oid], dict) else ""
        yield f"  {_dq(tree.short[p])} -> {_dq(tree.short[oid])}{style};"
    yield "}"


def _dot_node(tree: Tree, oid: bytes) -> str:
    it = tree.nodes[oid]
    lines = [tree.short[oid], _clean(_summary(it))]
    attrs = []
    if isinstance(it, dict):
        attrs.append("shape=diamond")
        if it.get("compensation"):
            lines.append(_clean(history.compensation_text(it), 120))
            attrs += ["color=red", "fontcolor=red", 'style="bold"']
    elif failed(it):
        attrs += ["color=red", "fontcolor=red"]
    head_of = tree.heads.get(oid)
    if head_of is not None:
        lines.append(f"branch {head_of} " + ("LIVE" if head_of == tree.view.live else "retained"))
        attrs.append("peripheries=2")
    label = '"' + "\\n".join(x.replace("\\", "\\\\").replace('"', '\\"') for x in lines) + '"'
    return f"{_dq(tree.short[oid])} [label={label}{''.join(', ' + a for a in attrs)}];"
