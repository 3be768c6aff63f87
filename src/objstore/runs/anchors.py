"""Anchors: the one spelling of an anchor token, making one, reading a file of them, checking one.

An anchor (``objstore-anchor:1:<entry>:<64 hex>``) names a log entry and its chain checksum: kept
elsewhere, it later proves the log still holds the history up to that entry as a prefix (verify
``--anchor``). The genesis anchor (entry 0) has an all-zero checksum. Every token — ``objstore
anchor``, a backup's result, ``objstore stats``, verify's reports — is made by ``anchor_token``
and read by ``parse_anchor``; a file of anchors is appended durably (a published anchor a crash
could lose would prove nothing later).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import InvalidInput, StorageOSError
from ..storage.log.format import ZERO

if TYPE_CHECKING:
    from ..storage.store import Store

ANCHOR_PREFIX = "objstore-anchor:1:"


def anchor_token(entry: int, checksum: bytes) -> str:
    return f"{ANCHOR_PREFIX}{entry}:{checksum.hex()}"


def parse_anchor(token: str) -> tuple[int, bytes]:
    """(entry number, checksum) of an anchor token; raises InvalidInput. (A token of version 2, a manifest of
    many logs' heads, is objstore.runs.anchor_manifest's: its entry and checksum are the store log's.)"""
    if isinstance(token, str) and token.startswith("objstore-anchor:2:"):
        from .anchor_manifest import parse_manifest_token

        return parse_manifest_token(token)[:2]
    if not isinstance(token, str) or not token.startswith(ANCHOR_PREFIX):
        raise InvalidInput(f"not an anchor token (expected {ANCHOR_PREFIX}<entry>:<64 hex>): {token!r:.80}")
    rest = token[len(ANCHOR_PREFIX):].strip().split(":")
    if len(rest) != 2 or not rest[0].isdigit() or len(rest[1]) != 64:
        raise InvalidInput(f"malformed anchor token: {token!r:.120}")
    try:
        return int(rest[0]), bytes.fromhex(rest[1])
    except ValueError:
        raise InvalidInput(f"malformed anchor token: {token!r:.120}") from None


def read_anchors(path: str) -> list[str]:
    """The tokens of a file of anchors (``objstore anchor --append FILE``): one a line; blank lines
    and ``#`` comments skipped. A line that is not a token is InvalidInput naming the file and line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise StorageOSError(f"read the anchors file {path!r}", e) from None
    tokens = []
    for i, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            token = line.decode("ascii")
            parse_anchor(token)
        except (UnicodeDecodeError, InvalidInput) as e:
            detail = str(e) if isinstance(e, InvalidInput) else "not ASCII text"
            raise InvalidInput(f"{path} line {i}: {detail.removeprefix('invalid input: ')}") from None
        tokens.append(token)
    return tokens


def append_anchor(path: str, token: str) -> None:
    """Append ``token`` as one line to the file of anchors at ``path`` (created if absent), durably:
    a published anchor that a crash could lose would prove nothing later."""
    parse_anchor(token)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size:  # a last line without its newline must not swallow this token
                with open(path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        os.write(fd, b"\n")
            os.write(fd, token.encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageOSError(f"append to the anchors file {path!r}", e) from None


def anchor_info(store: Store) -> dict:
    """The anchor of the log's current head (an empty store has the genesis anchor, entry 0); on a store with a
    log per run, a manifest of every log's head committed to the store log (objstore.runs.anchor_manifest)."""
    from ..storage.log.fsck import log_check

    if store.logs.per_run:
        from .anchor_manifest import write_manifest

        return write_manifest(store)
    engine = store.engine
    pos = engine.refresh()
    seg, off = log_check(engine).tail()
    return {"token": anchor_token(pos.entry, pos.checksum), "version": 1, "entry": pos.entry, "segment": seg, "offset": off,
            "checksum": pos.checksum.hex(), "time": engine.entry_time()}


def anchor_problem(want: tuple[int, bytes], count: int, entry_sums: dict[int, bytes]) -> tuple[str, str, str] | None:
    """(code, token, detail) if the log read (``count`` entries, ``entry_sums``: the checksums of the
    anchored entries among them) does not hold the history anchor ``want`` names, else None."""
    n, checksum = want
    token = anchor_token(n, checksum)
    if n == 0:
        if checksum != ZERO:
            return ("anchor-mismatch", token, "the genesis anchor has an all-zero checksum")
        return None
    if n > count:
        return ("anchor-missing", token, f"log ends at entry {count}")
    if entry_sums.get(n) != checksum:
        return ("anchor-mismatch", token, f"entry {n} has checksum {entry_sums.get(n, b'').hex()}: the history before it was rewritten or rolled back")
    return None
