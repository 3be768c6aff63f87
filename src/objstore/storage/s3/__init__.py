"""A store on S3-compatible object storage (``s3://bucket/prefix``): the log kept in a bucket.

Members, lowest first (``tests/test_layers.py``):

* ``bucket`` — the ``Bucket`` contract the engine needs (conditional GET and PUT, list), its errors, and
  ``MemoryBucket``, the same contract over a dict for tests;
* ``client`` — that contract over a real server, through ``obstore``, and ``open_bucket`` for an ``s3://`` URL;
* ``engine`` — the log over a bucket (``S3Engine``): one HEAD object, immutable chunks, a conditional PUT per commit.

Nothing is imported here: ``objstore.storage.s3.bucket`` (the errors a command reports) must not load
the engine, and a local store loads none of this package.
"""
