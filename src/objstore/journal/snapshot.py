"""The frozen snapshot of a Host answer (docs/JOURNAL.md, conditions 6 and 7).

``freeze`` turns a Host's answer into its canonical JSON bytes at once; nothing later reads the
Host's object again. ``render`` makes the one text of those bytes that goes both into the
compactor input and into the stored segment: the read result verbatim, the SHA-256 of exactly
those bytes, and the prompt-source / projection provenance.
"""

from __future__ import annotations

import copy
import hashlib
import json
import types
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..runs import records as R
from ..runs.records import ABSENT, OVER_BUDGET, PRESENT, UNAVAILABLE
from ..storage import codec


@dataclass(frozen=True)
class Snapshot:
    """A Host's answer, frozen: its canonical JSON bytes and the one rendering of them."""

    answer_json: bytes
    sha256: str
    rendered: str

    def _doc(self) -> dict:
        """The answer parsed from the frozen bytes, once (what callers get are copies)."""
        d = self.__dict__.get("_parsed")
        if d is None:
            d = json.loads(self.answer_json)
            object.__setattr__(self, "_parsed", d)
        return d

    @property
    def answer(self) -> types.MappingProxyType:
        return types.MappingProxyType(copy.deepcopy(self._doc()))

    def __getattr__(self, name: str) -> Any:  # outcome, reason, session, version, text, … from the frozen bytes
        if name.startswith("_"):
            raise AttributeError(name)
        a = self._doc()
        if name in a:
            return copy.deepcopy(a[name])
        raise AttributeError(name)

    @property
    def provenance(self) -> dict:
        a = self._doc()
        return {"origin": R.ORIGIN_DERIVED, "kind": "journal_context", "host": a.get("host"), "purpose": a.get("purpose"),
                "prompt_source": a.get("prompt_source"), "projection": a.get("projection"),
                "selection": a.get("selection", {}).get("rule"), "answer_sha256": self.sha256}


def freeze(answer: object) -> Snapshot:
    """Freeze a Host's answer (a JSON object, or its bytes) before anything is built from it."""
    if isinstance(answer, (bytes, bytearray, memoryview)):
        doc = json.loads(bytes(answer))
    elif isinstance(answer, dict):
        doc = json.loads(codec.canonical_json(answer))  # a deep copy through bytes: later mutation cannot reach it
    else:
        raise InvalidInput("a Host answer is a JSON object")
    if not isinstance(doc, dict) or doc.get("outcome") not in (PRESENT, ABSENT, "disabled", UNAVAILABLE, OVER_BUDGET):
        raise InvalidInput("a Host answer has an outcome")
    data = codec.canonical_json(doc)
    sha = hashlib.sha256(data).hexdigest()
    return Snapshot(data, sha, render(data, sha, doc))


def unavailable(reason: str, purpose: str, run: str | None) -> dict:
    return {"v": 1, "host": None, "purpose": purpose, "requested": run, "outcome": UNAVAILABLE, "reason": reason,
            "session": None, "selection": {"rule": "none", "tried": []}, "text": None, "projection": None,
            "prompt_source": None}


def render(answer_json: bytes, sha: str, a: dict) -> str:
    """The one rendering of a frozen answer: a header, the prompt-source / projection provenance,
    the SHA-256 of the answer's JSON and that JSON verbatim (the journal text, or its bounded
    projection, is its ``text`` field: one copy, covered by the hash)."""
    sel = a.get("selection") or {}
    tried = ", ".join(f"{t.get('session')} {t.get('outcome')}" for t in sel.get("tried", [])) or "nothing"
    if a.get("projection") == "bounded":
        om = a.get("omitted") or {}
        proj = f"bounded projection within {a.get('budget')} bytes ({len(om.get('entries', []))} entries omitted)"
    else:
        proj = a.get("projection") or "none"
    lines = [
        f"[journal context: derived material, not source. {a.get('purpose')} read, outcome {a['outcome']}"
        + (f" ({a['reason']})" if a.get("reason") else "") + "]",
        f"prompt source: {a.get('prompt_source') or 'none'}; projection: {proj}; selection: {sel.get('rule', 'none')} (tried: {tried})",
        f"read result sha256: {sha}",
        "read result: " + answer_json.decode("utf-8"),
    ]
    if a["outcome"] not in (PRESENT, OVER_BUDGET):
        lines.append("This does not mean the history was recorded.")
    return "\n".join(lines)


