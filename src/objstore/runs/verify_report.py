"""What verify reports: one ``Problem`` a line (code, subject, where, detail), and the ``Report``.

A problem's code names the kind of damage (``corrupt-entry``, ``broken-chain``, ``bad-deletion``, ...);
notes have the same shape and are not failures (a torn tail, a past cut, a redacted blob).
"""

from __future__ import annotations

from typing import NamedTuple


class Problem(NamedTuple):
    code: str
    subject: str  # object id (hex), ref name, run, or segment path
    where: str  # file path, or "" if none
    detail: str

    def line(self) -> str:
        tail = f" [{self.where}]" if self.where else ""
        return f"{self.code} {self.subject}: {self.detail}{tail}"

    def as_dict(self) -> dict:
        return self._asdict()


class Report(NamedTuple):
    problems: list
    notes: list  # Problem-shaped notes (torn tail, past cuts): not failures
    entries: int  # entries verified (the snapshot)
    objects: int
    checksum: bytes
    logs: int = 1  # logs verified (a store of format 6: the store log and every run's log)
