"""A store on S3-compatible object storage (``s3://bucket/prefix``): the log kept in a bucket.

Members, lowest first (``tests/test_layers.py``):

* ``bucket`` — the ``Bucket`` contract the engine needs (conditional GET and PUT, list), its errors, and
  ``MemoryBucket``, the same contract over a dict for tests;
* ``client`` — that contract over a real server, through ``obstore``, and ``open_bucket`` for an ``s3://`` URL;
* ``layout`` — what the bucket holds, key by key: HEAD, chunks, large entries, the marker;
* ``entries`` — an entry's objects read out of its bytes, and the entry rewritten without removed bodies;
* ``reader`` — the engine's reading half: HEAD taken in, chunks fetched and cached, objects read, ``scan``;
* ``gc`` — bodies removed from the keys that store them, and the inventory of the bucket's keys;
* ``engine`` — ``S3Engine`` (reader, gc and the commit: one conditional PUT of HEAD per commit).

Nothing is imported here: ``objstore.storage.s3.bucket`` (the errors a command reports) must not load
the engine, and a local store loads none of this package.
"""
