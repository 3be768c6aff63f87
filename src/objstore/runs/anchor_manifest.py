"""Anchors over many logs (a store of format 6): the manifest of every log's head, its Merkle tree, its token.

``objstore anchor`` on a store with a log per run commits a *manifest* to the store log and prints a token
naming it (docs/FORMAT.md "Anchor manifest"):

* the manifest is a blob of canonical JSON ``{"fmt": "objstore-anchor-manifest-1", "previous": <hex id of the
  manifest before it, or null>, "time": <seconds>, "leaves": [[name, entry, checksum hex], …], "root": <hex>}``;
  ``leaves`` holds one ``("run/<R>", entry, checksum)`` per run log that has an entry (its head as read while
  the manifest was made) and ``("store", entry, checksum)``, the store log's head read before the manifest's
  own entry, sorted by name (bytewise; names are unique);
* the store ref ``anchor`` names the newest manifest (each names the one before: a chain);
* the Merkle tree over the sorted leaves is RFC 6962's with BLAKE3: leaf hash ``BLAKE3(0x00 ‖ name ‖ 0x00 ‖
  entry as 8 bytes big-endian ‖ checksum)``, node ``BLAKE3(0x01 ‖ left ‖ right)``, the left subtree holding
  the largest power of two of leaves smaller than n; the root of no leaves is ``BLAKE3("")``;
* the token ``objstore-anchor:2:<entry>:<checksum hex>:<root hex>`` names the store-log entry that committed
  the manifest, that entry's chain checksum, and the manifest's root.

Kept elsewhere, a token later proves (verify ``--anchor``) that the store log still holds that entry, that
the manifest there has that root, and that every log it lists still extends its listed head; ``objstore
anchor RUN`` proves one run's head is in the newest manifest with an inclusion proof (RFC 6962 audit path).
A manifest lists heads as they were read: a run committing meanwhile is anchored at the head read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import blake3

from ..errors import InvalidInput, ObjstoreError
from ..storage import codec, runrefs

if TYPE_CHECKING:
    from ..storage.log.engine import Engine
    from ..storage.store import Store

MANIFEST_REF = runrefs.ANCHOR_REF
MANIFEST_FMT = "objstore-anchor-manifest-1"
TOKEN2_PREFIX = "objstore-anchor:2:"
STORE_LEAF = "store"
RUN_LEAF = runrefs.RUN_PREFIX  # a run log's leaf is named as its refs are prefixed: run/<R>

Leaf = tuple[str, int, bytes]


def run_leaf(run: str) -> str:
    return RUN_LEAF + run


# -- the Merkle tree (RFC 6962 shape, BLAKE3) --------------------------------------------------------

def leaf_hash(name: str, entry: int, checksum: bytes) -> bytes:
    return blake3.blake3(b"\x00" + name.encode() + b"\x00" + entry.to_bytes(8, "big") + checksum).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return blake3.blake3(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def merkle_root(hashes: list[bytes]) -> bytes:
    if not hashes:
        return blake3.blake3(b"").digest()
    level = list(hashes)
    return _root(level)


def _root(h: list[bytes]) -> bytes:
    if len(h) == 1:
        return h[0]
    k = _split(len(h))
    return _node(_root(h[:k]), _root(h[k:]))


def inclusion_proof(hashes: list[bytes], i: int) -> list[bytes]:
    """The audit path of leaf ``i`` (RFC 6962 PATH): sibling hashes from the leaf up."""
    if len(hashes) <= 1:
        return []
    k = _split(len(hashes))
    if i < k:
        return [*inclusion_proof(hashes[:k], i), _root(hashes[k:])]
    return [*inclusion_proof(hashes[k:], i - k), _root(hashes[:k])]


def root_from_proof(leaf: bytes, i: int, n: int, proof: list[bytes]) -> bytes | None:
    """The root an audit path gives for leaf ``i`` of ``n`` (RFC 9162 2.1.3.2), None if the path is malformed."""
    if not 0 <= i < n:
        return None
    fn, sn, r = i, n - 1, leaf
    for p in proof:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


# -- tokens --------------------------------------------------------------------------------------------

def manifest_token(entry: int, checksum: bytes, root: bytes) -> str:
    return f"{TOKEN2_PREFIX}{entry}:{checksum.hex()}:{root.hex()}"


def is_manifest_token(token: str) -> bool:
    return isinstance(token, str) and token.startswith(TOKEN2_PREFIX)


def parse_manifest_token(token: str) -> tuple[int, bytes, bytes]:
    """(store-log entry, its checksum, manifest root) of a token; raises InvalidInput."""
    rest = token[len(TOKEN2_PREFIX):].strip().split(":") if is_manifest_token(token) else []
    if len(rest) != 3 or not rest[0].isdigit() or len(rest[1]) != 64 or len(rest[2]) != 64:
        raise InvalidInput(f"malformed anchor token: {token!r:.160}")
    try:
        return int(rest[0]), bytes.fromhex(rest[1]), bytes.fromhex(rest[2])
    except ValueError:
        raise InvalidInput(f"malformed anchor token: {token!r:.160}") from None


# -- the manifest --------------------------------------------------------------------------------------

def encode_manifest(leaves: list[Leaf], previous: bytes | None, when: float) -> tuple[bytes, bytes]:
    """(canonical JSON bytes, root) of a manifest over ``leaves`` (sorted here)."""
    leaves = sorted(leaves, key=lambda lf: lf[0].encode())
    root = merkle_root([leaf_hash(*lf) for lf in leaves])
    doc = {"fmt": MANIFEST_FMT, "previous": previous.hex() if previous is not None else None, "time": when,
           "leaves": [[n, e, c.hex()] for n, e, c in leaves], "root": root.hex()}
    return codec.canonical_json(doc), root


def decode_manifest(data: bytes) -> tuple[list[Leaf], bytes | None, bytes]:
    """(leaves, previous id, the root its leaves give) of a manifest; ValueError if it is not one."""
    import json

    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("fmt") != MANIFEST_FMT or not isinstance(doc.get("leaves"), list):
        raise ValueError("not an anchor manifest")
    leaves: list[Leaf] = []
    for row in doc["leaves"]:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and type(row[1]) is int and isinstance(row[2], str)):
            raise ValueError("a leaf is not [name, entry, checksum]")
        leaves.append((row[0], row[1], bytes.fromhex(row[2])))
    if [lf[0].encode() for lf in leaves] != sorted({lf[0].encode() for lf in leaves}):
        raise ValueError("its leaves are not sorted by name, each once")
    prev = doc.get("previous")
    root = merkle_root([leaf_hash(*lf) for lf in leaves])
    if doc.get("root") != root.hex():
        raise ValueError(f"its root field {doc.get('root')!r:.70} is not its leaves' root {root.hex()}")
    return leaves, bytes.fromhex(prev) if isinstance(prev, str) else None, root


def read_manifest(store: Store, oid: bytes) -> tuple[list[Leaf], bytes | None, bytes]:
    t, data = codec.decode(store.logs.store_log.read(oid), oid, False)
    if t != codec.BLOB:
        raise ValueError(f"a {t}, not a blob")
    return decode_manifest(bytes(data))


def find_manifest(store: Store, entry: int) -> bytes | None:
    """The id of the manifest the store log's entry ``entry`` committed (walking the ``anchor`` chain), or None."""
    engine = store.logs.store_log
    oid = engine.tables.refs.get(MANIFEST_REF)
    seen: set[bytes] = set()
    while isinstance(oid, bytes) and oid not in seen:
        seen.add(oid)
        at = engine.loc_entry(oid)
        if at == entry:
            return oid
        if at is not None and at < entry:
            return None
        try:
            oid = read_manifest(store, oid)[1]
        except (ObjstoreError, ValueError):
            return None
    return None


def head_of(engine: Engine) -> tuple[int, bytes]:
    pos = engine.refresh()
    return pos.entry, pos.checksum


def write_manifest(store: Store, when: float | None = None) -> dict:
    """Commit a manifest of every log's head to the store log; returns its token and what it lists."""
    logs = store.logs
    leaves: list[Leaf] = []
    for run in logs.run_ids():
        try:
            entry, checksum = head_of(logs.run_log(run))
        finally:
            logs.release(run)  # one run's log open at a time
        if entry:
            leaves.append((run_leaf(run), entry, checksum))
    engine = logs.store_log
    store_head = head_of(engine)
    t = time.time() if when is None else when
    with store.batch():
        prev = store.read_ref(MANIFEST_REF)
        prev = prev if isinstance(prev, bytes) else None
        data, root = encode_manifest([*leaves, (STORE_LEAF, *store_head)], prev, t)
        oid = store.put_blob(data)
        store.set_ref(MANIFEST_REF, prev, oid, "anchor manifest")
    at = engine.loc_entry(oid)
    pos = engine.refresh()
    if at is None or at != pos.entry:  # another store-log commit came after ours: find our entry's checksum
        at = at if at is not None else pos.entry
        checksum = entry_checksum(engine, at)
    else:
        checksum = pos.checksum
    return {"token": manifest_token(at, checksum, root), "version": 2, "entry": at, "checksum": checksum.hex(),
            "root": root.hex(), "manifest": oid.hex(), "logs": len(leaves) + 1, "time": t}


def entry_checksum(engine: Engine, n: int) -> bytes:
    for e in engine.entries():
        if e.n == n:
            return bytes(e.checksum)
    raise InvalidInput(f"the store log has no entry {n}")


def run_proof(store: Store, run: str) -> dict:
    """Run ``run``'s head in the newest manifest, with its inclusion proof (``objstore anchor RUN``)."""
    engine = store.logs.store_log
    engine.refresh()
    oid = engine.tables.refs.get(MANIFEST_REF)
    if not isinstance(oid, bytes):
        raise InvalidInput("this store has no anchor manifest yet: run 'objstore anchor' first")
    leaves, _prev, root = read_manifest(store, oid)
    at = engine.loc_entry(oid)
    name = run_leaf(run)
    idx = next((i for i, lf in enumerate(leaves) if lf[0] == name), None)
    if idx is None or at is None:
        raise InvalidInput(f"run {run} is not in the newest anchor manifest (entry {at} of the store log): anchor again")
    hashes = [leaf_hash(*lf) for lf in leaves]
    proof = inclusion_proof(hashes, idx)
    _n, entry, checksum = leaves[idx]
    now = head_of(store.logs.run_log(run))
    return {"run": run, "entry": entry, "checksum": checksum.hex(), "leaf": hashes[idx].hex(), "index": idx, "leaves": len(leaves),
            "proof": [p.hex() for p in proof], "root": root.hex(), "token": manifest_token(at, entry_checksum(engine, at), root),
            "head_now": [now[0], now[1].hex()]}


__all__ = ["MANIFEST_REF", "decode_manifest", "find_manifest", "inclusion_proof", "leaf_hash", "merkle_root",
           "parse_manifest_token", "root_from_proof", "run_proof", "write_manifest"]
