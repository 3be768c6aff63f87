"""A store's open batch, per context: which commit a write in this thread or task joins.

A batch belongs to its ``contextvars`` context (thread or asyncio task) and counts only in the
thread that opened it and only until it ends: other threads' writes wait for the writer lock and
never join it, and a context copied while it was open does not write into it afterwards.
"""

from __future__ import annotations

import contextvars
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log.txn import Txn


class _BatchVar:
    """The open batch of the current context. A context copied while a batch was open (a task
    created inside it, ``asyncio.to_thread``) still holds it: it counts only in the thread that
    opened it and only until it ends, so a write from another thread waits for the writer lock
    and a later write commits on its own, instead of landing unlocked in, or vanishing into,
    someone else's commit."""

    def __init__(self, name: str) -> None:
        self._var: contextvars.ContextVar[list | None] = contextvars.ContextVar(name, default=None)

    def get(self) -> Txn | None:
        state = self._var.get()
        if state is None or state[1] != threading.get_ident():
            return None
        return state[0]

    def state(self) -> list | None:
        """The open batch's state ``[txn, thread, after-commit callbacks]``, or None (as ``get``)."""
        state = self._var.get()
        if state is None or state[1] != threading.get_ident() or state[0] is None:
            return None
        return state

    def set(self, state: list) -> contextvars.Token[list | None]:
        return self._var.set(state)

    def reset(self, token: contextvars.Token[list | None]) -> None:
        self._var.reset(token)
