"""The compactor interface and the deterministic built-in compactor (``StubCompactor``).

A compactor takes the compaction request (turns, journal context, previous summary, historical
journal texts, open tasks) and its exact bytes, and returns ``{"role", "text"}``. There is no
live model here: ``StubCompactor`` is deterministic and proves transport and storage, not
summary quality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

INSTRUCTIONS = (
    "Summarize the conversation turns below for continuing the work. Fill gaps, do not copy the journal: "
    "keep information the journal is missing, work not yet done, results not yet confirmed, and instructions "
    "for continuing. Turns marked reflected_in_journal=false are not in the journal: carry them. "
    "The journal context is derived material, not a record of what happened; an absent, disabled, "
    "unavailable or over-budget journal does not mean the history was recorded. Historical journal texts are "
    "material of their own time, for reference only; their retention notes applied to their own boundary."
)


class Compactor(Protocol):
    name: str
    max_input_bytes: int

    def __call__(self, request: dict, request_bytes: bytes) -> dict: ...


class StubCompactor:
    """Deterministic stand-in for a model: it proves transport and storage, not summary quality.

    Returns ``{"role", "text"}``; ``on_call`` runs inside the call (to update the
    journal concurrently, say). Keeps every request it saw, byte for byte.
    """

    name = "stub-compactor-1"

    def __init__(self, max_input_bytes: int = 1 << 20, role: str = "assistant", on_call: Callable | None = None):
        self.max_input_bytes = max_input_bytes
        self.role = role
        self.on_call = on_call
        self.requests: list[bytes] = []

    def __call__(self, request: dict, request_bytes: bytes) -> dict:
        self.requests.append(request_bytes)
        if self.on_call:
            self.on_call(request)
        j = request["journal"]
        text = (
            f"SUMMARY {len(self.requests)}: {len(request['turns'])} turn(s) summarized, "
            f"{sum(not t['reflected_in_journal'] for t in request['turns'])} not reflected in the journal, journal {j['outcome']}"
            f"{' v' + str(j['version']) if j.get('version') else ''}, previous summary {len(request['previous_summary'])} bytes, "
            f"{len(request['historical_journals'])} historical journal(s), {len(request.get('tasks', []))} open task(s)."
        )
        return {"role": self.role, "text": text}


