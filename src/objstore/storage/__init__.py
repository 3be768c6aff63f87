"""Storage: bytes on disk, named by their hashes — the lowest subsystem, knowing nothing of runs.

Members, lowest first (each imports only those before it and ``objstore.errors``):

* ``codec`` — canonical encoding of objects and their ids, the one JSON input parser;
* ``fileutil`` — durable file primitives: the fsync policy, atomic replace, directory sync;
* ``refs``, ``runrefs`` — what a ref may be called, the ref namespace, forward-only and write-once rules;
* ``authority`` — who may delete: the deletion authority rule every apply path checks, object signatures;
* ``log`` — one log's mechanics (format 3): entries, the chain checksum, tables and rules, the ``Engine``
  interface, the memory engine, segment files and their indexes, the head witness, the checkpoint, the local
  engine (``log.local.LogEngine``) and the log-level fsck (its own docstring lists its members and invariants);
* ``s3`` — the log on object storage (``s3.engine.S3Engine``), loaded only for an ``s3://`` store;
* ``gclock`` — gc and backup never overlap;
* ``erased`` — blob bodies only deleted records name, withheld at once (gc's reachability at read time);
* ``storedir`` — where a store is and which format: discovery, ``s3://`` names and their cache, the marker;
* ``batch`` — a store's open batch, per thread or task;
* ``store`` — typed objects and refs over one engine, batches, snapshots;
* ``identity`` — ed25519 keys, signed objects and signed requests (the owner key lives in the store's refs).

A new engine implements ``log.engine.Engine`` and passes ``tests/storage/test_engine_contract.py``.

The numbered invariants the code and the tests cite ("invariant 12") are listed in docs/DESIGN.md,
each with the modules that keep it and the tests that pin it.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
