"""Storage: bytes on disk, named by their hashes — the lowest subsystem, knowing nothing of runs.

Members, lowest first (each imports only those before it and ``objstore.errors``):

* ``codec`` — canonical encoding of objects and their ids, the one JSON input parser;
* ``fileutil`` — durable file primitives: the fsync policy, atomic replace, directory sync;
* ``refs``, ``runrefs`` — what a ref may be called, the ref namespace, forward-only and write-once rules;
* ``authority`` — who may delete: the deletion authority rule every apply path checks, object signatures;
* ``format1``, ``format2`` — read-only access to the older layouts, for ``objstore upgrade``;
* ``engine`` — format 3: the append-only log of commit entries, its tables, root and rules;
* ``log`` — one log's mechanics: segment files and their indexes (``log.segindex``, ``log.packed``), the head
  witness, the checkpoint, the local engine (``log.local.LogEngine``);
* ``erased`` — blob bodies only deleted records name, withheld at once (gc's reachability at read time);
* ``storedir`` — where a store is and which format: discovery, ``s3://`` names and their cache, the marker;
* ``batch`` — a store's open batch, per thread or task;
* ``store`` — typed objects and refs over one engine, batches, snapshots;
* ``identity`` — ed25519 keys, signed objects and signed requests (the owner key lives in the store's refs).

A new engine (an S3 one) joins next to ``engine`` by passing ``tests/test_engine_contract.py``.

The numbered invariants the code and the tests cite ("invariant 12") are listed in docs/DESIGN.md,
each with the modules that keep it and the tests that pin it.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
