"""The HTML, CSS and JavaScript of ``objstore view``'s page (``page.render`` fills ``SHELL``).

Everything is inline and nothing is fetched: the script reads the run from the
``<script type="application/json" id="run-data">`` block and builds the page with ``createElement``
and ``textContent`` only, so no text of the run is ever parsed as HTML. The script is admitted by its
SHA-256 in the page's Content-Security-Policy; ``default-src 'none'`` refuses every other load.
DOM hooks the browser tests use: ``.branch[data-branch]``, ``.node[data-id]`` (``.fork``, ``.failed``,
``.deleted``), ``.body`` (a shown body), ``#attempts tr.failed``, ``#diff .first-divergence``.
"""

from __future__ import annotations

SHELL = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header><h1 id="title"></h1><p id="summary"></p>
<p class="note">An exported copy: a later objstore delete or redact does not reach this file.</p></header>
<main>
<section id="tree"><h2>Branch tree</h2><p class="hint">Click a record or fork to show its body.</p></section>
<section id="attempts"><h2>Attempts</h2></section>
<section id="diff"><h2>Diff</h2></section>
</main>
<script type="application/json" id="run-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:12px 20px;background:#24292f;color:#fff}header h1{margin:0;font-size:20px}
header p{margin:4px 0}.note{color:#d0d7de;font-size:12px}
main{padding:8px 20px}section{margin:16px 0}h2{font-size:16px;border-bottom:1px solid #d0d7de}
.hint{color:#57606a;font-size:12px}
.branch{border-left:3px solid #0969da;margin:6px 0 6px 14px;padding-left:8px}
.branch.retained{border-left-color:#8c959f}
.branch-title{font-weight:600;margin:4px 0}
.node{font-family:ui-monospace,monospace;font-size:12.5px;padding:2px 6px;cursor:pointer;border-radius:4px;white-space:pre-wrap}
.node:hover{background:#eaeef2}.node .id{color:#57606a}.node .kind{color:#0550ae;font-weight:600}
.node.fork{background:#fff8c5}.node.failed{background:#ffebe9;color:#a40e26}
.node.deleted{color:#8c959f;font-style:italic}
.badge{display:inline-block;margin-left:6px;padding:0 6px;border-radius:10px;font-size:11px;font-family:system-ui,sans-serif}
.badge.live{background:#1f883d;color:#fff}.badge.retained{background:#8c959f;color:#fff}
.badge.comp{background:#cf222e;color:#fff;font-weight:700}.badge.fail{background:#cf222e;color:#fff}
.badge.div{background:#8250df;color:#fff}
.node.diverge{outline:2px solid #8250df}
.body{margin:2px 0 6px 24px;padding:6px;background:#fff;border:1px solid #d0d7de;border-radius:4px;
 font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;word-break:break-all;max-height:420px;overflow:auto}
.omitted{color:#9a6700}
table{border-collapse:collapse;font-size:12.5px}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
tr.failed td{background:#ffebe9;color:#a40e26}tr.first-divergence td{outline:2px solid #8250df}
.cols{display:flex;gap:24px;flex-wrap:wrap}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("run-data").textContent);
  var byId = {}, kids = {};
  D.nodes.forEach(function (n) {
    byId[n.id] = n;
    var p = n.parent === null ? "" : n.parent;
    (kids[p] = kids[p] || []).push(n);
  });
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function badge(cls, text) { return el("span", "badge " + cls, text); }
  var diverge = {};
  if (D.diff) {
    if (D.diff.last_shared) { diverge[D.diff.last_shared] = "last shared record"; }
    if (D.diff.first_a) { diverge[D.diff.first_a] = "first divergence: branch " + D.diff.a; }
    if (D.diff.first_b) { diverge[D.diff.first_b] = "first divergence: branch " + D.diff.b; }
  }
  document.getElementById("title").textContent = "objstore run " + D.run;
  document.getElementById("summary").textContent = D.branches.length + " branch(es), live branch " + D.live + ", " +
    D.attempts.length + " attempt(s), " + D.attempts.filter(function (a) { return a.state === "failed"; }).length +
    " failed" + (D.bodies ? "; blob bodies included" : "; blob bodies not included (objstore view --bodies)");

  function bodyBox(n) {
    var box = el("div", "body");
    if (n.deleted) {
      box.appendChild(el("div", "omitted", "deleted (by deletion " + n.deleted + "): the body is not in the store's reads, nor here"));
      return box;
    }
    if (n.body !== null) { box.appendChild(el("div", null, n.body)); }
    else {
      box.appendChild(el("div", "omitted", "body not embedded (" + n.size + " bytes; limits " + D.limits.body +
        " per body, " + D.limits.total + " per page): " + n.cat));
    }
    n.blobs.forEach(function (b) {
      var line = el("div", "blob");
      line.appendChild(el("strong", null, b.field + " "));
      line.appendChild(el("span", "id", b.id));
      box.appendChild(line);
      if (b.withheld) { box.appendChild(el("div", "omitted", "withheld (" + b.withheld + ")")); }
      else if (b.body !== null) { box.appendChild(el("div", "blob-body", b.body)); }
      else if (b.size !== null) { box.appendChild(el("div", "omitted", "not embedded (" + b.size + " bytes): " + b.cat)); }
      else { box.appendChild(el("div", "omitted", "not embedded (objstore view --bodies): " + b.cat)); }
    });
    return box;
  }
  function toggle(row, n) {
    var next = row.nextSibling;
    if (next && next.classList && next.classList.contains("body")) { next.remove(); return; }
    row.parentNode.insertBefore(bodyBox(n), row.nextSibling);
  }
  function nodeRow(n) {
    var cls = "node" + (n.kind === "fork" ? " fork" : "") + (n.failed ? " failed" : "") + (n.deleted ? " deleted" : "") +
      (diverge[n.id] ? " diverge" : "");
    var row = el("div", cls);
    row.setAttribute("data-id", n.id);
    row.setAttribute("data-kind", n.kind);
    row.setAttribute("tabindex", "0");
    row.appendChild(el("span", "id", n.short + " "));
    row.appendChild(el("span", "pos", n.kind === "fork" ? "fork   " : "b" + n.branch + "/" + n.lsn + " "));
    row.appendChild(el("span", "kind", n.kind === "fork" ? "" : n.kind + " "));
    row.appendChild(el("span", "what", n.summary));
    if (n.failed) { row.appendChild(badge("fail", "FAILED")); }
    if (n.kind === "fork" && n.compensation) { row.appendChild(badge("comp", n.compensation)); }
    if (n.head) { row.appendChild(badge(n.head === "LIVE" ? "live" : "retained", "branch " + n.branch + " " + n.head)); }
    if (diverge[n.id]) { row.appendChild(badge("div", diverge[n.id])); }
    row.addEventListener("click", function () { toggle(row, n); });
    row.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { toggle(row, n); } });
    return row;
  }
  function branchBox(start) {
    var b = start.branch, info = D.branches.filter(function (x) { return x.branch === b; })[0];
    var box = el("div", "branch" + (info && info.live ? " live" : " retained"));
    box.setAttribute("data-branch", String(b));
    box.appendChild(el("div", "branch-title", "branch " + b + (info && info.live ? " (live)" : " (retained)") +
      (info && info.parent_branch !== null ? ", forked from branch " + info.parent_branch + " at lsn " + info.parent_lsn +
        (info.reason ? " (" + info.reason + ")" : "") : "")));
    var n = start;
    while (n) {
      box.appendChild(nodeRow(n));
      var next = null;
      (kids[n.id] || []).forEach(function (k) {
        if (k.branch === n.branch && k.kind !== "fork" && next === null) { next = k; }
        else { box.appendChild(branchBox(k)); }
      });
      n = next;
    }
    return box;
  }
  var tree = document.getElementById("tree");
  (kids[""] || []).forEach(function (r) { tree.appendChild(branchBox(r)); });

  function table(parent, head, rows) {
    var t = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    t.appendChild(tr);
    rows.forEach(function (r) { t.appendChild(r); });
    parent.appendChild(t);
    return t;
  }
  function cells(values, cls) {
    var tr = el("tr", cls || null);
    values.forEach(function (v) { tr.appendChild(el("td", null, v === null || v === undefined ? "" : v)); });
    return tr;
  }
  var att = document.getElementById("attempts");
  if (!D.attempts.length) { att.appendChild(el("p", "hint", "no attempts recorded")); }
  else {
    table(att, ["branch", "lsn", "step", "try", "state", "error", "record"], D.attempts.map(function (a) {
      var tr = cells([a.branch, a.lsn, a.step, a.attempt, a.state, a.error, a.short], a.state === "failed" ? "failed" : "");
      tr.setAttribute("data-id", a.id);
      return tr;
    }));
  }
  var diff = document.getElementById("diff");
  if (!D.diff) { diff.appendChild(el("p", "hint", "one branch: nothing to compare")); return; }
  var X = D.diff, cm = X.common;
  diff.appendChild(el("p", null, "branch " + X.a + " vs branch " + X.b + "; shared history: " +
    (cm.branch === null ? "none" : "branch " + cm.branch + " up to lsn " + (cm.lsn === null ? "its head" : cm.lsn)) +
    (X.last_shared ? " (last shared record " + X.last_shared.slice(0, 12) + ")" : "")));
  var cols = el("div", "cols");
  [[X.a, X.only_a, X.first_a], [X.b, X.only_b, X.first_b]].forEach(function (side) {
    var col = el("div", "side");
    col.setAttribute("data-branch", String(side[0]));
    col.appendChild(el("h3", null, "only in branch " + side[0] + ": " + side[1].length + " record(s)"));
    table(col, ["branch", "lsn", "kind", "id", ""], side[1].map(function (r) {
      var first = r.id === side[2], n = byId[r.id];
      var tr = cells([r.branch, r.lsn, r.kind, r.id.slice(0, 12), first ? "first divergence" : "", ],
        (first ? "first-divergence" : "") + (n && n.failed ? " failed" : ""));
      tr.setAttribute("data-id", r.id);
      return tr;
    }));
    cols.appendChild(col);
  });
  diff.appendChild(cols);
  diff.appendChild(el("h3", null, "folded state"));
  table(diff, ["path", "branch " + X.a, "branch " + X.b], X.state.map(function (c) {
    return cells([c.path, JSON.stringify(c.a), JSON.stringify(c.b)]);
  }));
})();
"""
