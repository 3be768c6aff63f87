"""Lifecycle: what happens to a whole store over its life, above the run model and the journal.

* ``repair`` — cut a damaged end off the log, on purpose and on the record;
* ``delete`` — recorded deletion (whole runs, records of a run) and redaction (one blob), signed;
* ``gc`` — remove the bodies deletions name and repack sealed segments (explicit, crash-safe), retention;
* ``backup`` — an online, incremental copy that is a store of its own (``backup_io``: segment files by
  their bytes; ``backup_copy``: the copier that plans, copies, checks and lands each segment);
* ``stats`` — what a store holds and what it costs on disk.
"""


from ..lazy import member_getattr

__getattr__ = member_getattr(__name__)
