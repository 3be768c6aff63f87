"""Legacy: the older on-disk formats and the one command that reads them, ``objstore upgrade``.

Members, lowest first (each imports only those before it and the packages below ``legacy``):

* ``format1`` — read-only access to format-1 stores (loose objects, packs, ref files and ref logs);
* ``format2`` — the format-2 log reader (segments without index rows, tables root or seal flag);
* ``upgrade`` — convert a format-1 or format-2 store in place to format 3, keeping the old one.

Nothing in ``objstore`` imports this package, and in ``objstore_cli`` only the ``upgrade`` command
(``tests/test_layers.py`` pins it): a store opened in an old format is refused by
``storage.store`` from its marker alone (``StoreFormatError``, "run objstore upgrade"), without
loading these readers.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
