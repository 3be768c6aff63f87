"""Format 6: a log per run. A store log, one log per run, and the catalog of runs (``logs.RunLogs``).

Members: ``catalog`` (the create-once catalog), ``held`` (objects a process holds until a record names them),
``multitxn`` (a commit binds to one log), ``logs`` (the set of logs, as ``storage.logset.LogSet``). This
``__init__`` imports none of them.
"""
