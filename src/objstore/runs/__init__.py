"""The run model: records, branches and forks, their fold, the state cache, and every query over them.

Members, lowest first (each imports only those before it, ``objstore.storage`` and ``objstore.errors``):

* ``facts`` — the record facts the log indexes and rules over (handed to storage: ``storage.log.facts``);
* ``labels``, ``kinds`` — labelled runs' ids; x. kinds and their schema objects;
* ``records`` — the record model: kinds, bodies, their checks (msgspec schemas), the objects' vocabulary;
* ``schemas`` — every stored object's schema: what verify checks each decoded object against;
* ``fold`` — the pure fold: records in, state out;
* ``chain`` — reading runs as chains: views, walks, lineages, fork objects;
* ``listing`` — a run's records, newest first, lazily;
* ``history`` — what ``objstore log`` shows: lazy items, time filters, the branch graph;
* ``resolve`` — naming runs the way git names commits (prefixes, ``latest~N``);
* ``labelspec`` — naming runs by their labels (``thread_id=T``);
* ``refold`` — the cold re-fold of a branch from the log: the oracle the state cache is checked against;
* ``state`` — the materialized state cache (SQLite), confirmed against the log, never deciding;
* ``api`` — ``RunLog``, the runs API (``objstore.RunLog``): writing runs, attempts, intents, fork, rewind, the live branch;
* ``ingest`` — JSON Lines events from any agent framework;
* ``query`` — episodes (seed T1.7) and diffs, identical from state and from a cold re-fold;
* ``export`` — the outbox of the live branch;
* ``anchors`` — anchor tokens: making, reading, checking (one spelling of the token);
* ``verify_report``, ``verify_objects``, ``verify_runmodel``, ``verify`` — fsck: prove the whole store by
  re-reading the log (the problems reported; each object on its own; the run model over them; the pass
  that drives them; the log's own files are objstore.storage.log.fsck's);
* ``views`` — the JSON shape of each public entity;
* ``completion`` — shell-completion candidates.

A new record kind goes into ``records`` (its schema) and ``fold`` (what it contributes).

The numbered invariants the code and the tests cite ("invariant 15") are listed in docs/DESIGN.md,
each with the modules that keep it and the tests that pin it.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
