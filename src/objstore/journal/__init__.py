"""The journal (docs/JOURNAL.md): sessions, journal versions, Hosts, frozen snapshots, compaction, segments.

The package is one subsystem over the run model (``objstore.runs``) and storage; nothing below it
imports it. Its members, lowest first (each imports only those before it):

* ``grants`` — who may read and write a session's journal, as owner-signed objects;
* ``versions`` — the journal document: its body rules, the current version, what it reflects;
* ``host`` — the one place that selects a journal, authorizes a caller and reads or writes;
* ``updates`` — the writer's side: sign a version's request and send it to a Host;
* ``snapshot`` — a Host answer frozen once, rendered once;
* ``sessions`` — start a session (its startup read), turns, the TaskStore;
* ``restore`` — the compaction segments of a session, and restoring context from them;
* ``compactor`` — the compactor interface and the deterministic stub;
* ``compaction`` — one compaction: one Host read, frozen, rendered, one new segment;
* ``backend`` — the Host served over a Unix socket, as its own process.

This file only re-exports: ``from objstore import journal as J`` reaches the whole surface
(``J.start_session``, ``J.update_journal``, ``J.compact`` …), each member loading on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

# The members in import order; a name is looked up in them in this order.
MEMBERS = ("grants", "versions", "host", "updates", "snapshot", "sessions", "restore", "compactor", "compaction", "backend")

__all__ = [
    "ABSENT", "DISABLED", "OUTCOMES", "OVER_BUDGET", "PRESENT", "UNAVAILABLE", "FailingHost", "HostUnavailable",
    "LocalJournalHost", "project", "INSTRUCTIONS", "CompactionResult", "Snapshot", "StubCompactor", "classify",
    "compact", "context", "freeze", "render", "segments", "start_session", "GRANT_SCHEMA", "RIGHTS", "ROLES",
    "journal_ref", "segments_ref", "grant_ref", "subject_grant_ref", "grant", "revoke", "supersede", "grant_chain",
    "grant_chain_from", "grant_history", "journal_body_bytes", "check_body", "parse_body", "current_journal", "journal_body",
    "resolve_record", "update_journal", "set_journal_enabled", "reflected_ids", "reflected_through", "record_turn",
    "source_material", "fold_tasks", "open_tasks", "open_task", "close_task", "show", "version_view",
]


def __getattr__(name: str) -> Any:
    """A member module (``J.host``), or a public name of the first member defining it."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in MEMBERS:
        value: Any = importlib.import_module(f"{__name__}.{name}")
    else:
        for member in MEMBERS:
            mod = importlib.import_module(f"{__name__}.{member}")
            if name in vars(mod):
                value = vars(mod)[name]
                break
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(MEMBERS))
