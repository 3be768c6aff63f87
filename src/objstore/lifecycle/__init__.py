"""Lifecycle: what happens to a whole store over its life, above the run model and the journal.

* ``repair`` — cut a damaged end off the log, on purpose and on the record;
* ``delete`` — recorded deletion (whole runs, records of a run) and redaction (one blob), signed;
* ``gc`` — remove the bodies deletions name and repack sealed segments (explicit, crash-safe), retention;
* ``backup_io`` — segment files by their bytes, for a backup: the entry ending at an offset, checksums;
* ``backup_copy`` — the backup's copier: each segment planned, copied, checked and landed in DEST;
* ``backup`` — an online, incremental copy that is a store of its own (the command and its contract);
* ``transfer`` — push and clone: a store's runs copied to another store;
* ``stats`` — what a store holds and what it costs on disk.

Converting a format-1 or format-2 store (``objstore upgrade``) is ``objstore.legacy``'s.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
