"""Child processes for tests/journal/test_host_snapshot.py (issue 15: one log position per Host request).

    python host_snapshot_child.py serve STORE SOCKET
        The Backend Host (``backend.serve``, what ``objstore journal-serve`` runs) with its hook
        between authorization and journal read: prints ``ready`` once listening, then for each
        authorized read prints ``authorized <name>`` and waits for one line on stdin.

    python host_snapshot_child.py revoke-only STORE RUN PUBKEY
        Only the revocation of PUBKEY's grant on RUN (owner key), then prints ``done``.

    python host_snapshot_child.py revoke STORE RUN PUBKEY SCOPE [NEW_SESSION]
        With the owner key ($OBJSTORE_KEYS/owner.key), in one more OS process: revoke PUBKEY's
        grant (SCOPE ``run``: on RUN; ``subject``: on RUN's subject), then write a newer journal
        version of RUN, and if NEW_SESSION is given start that session of the subject and write a
        journal for it too. Every new body holds the word NEWER. Prints ``done``.
"""

import sys

from objstore import RunLog, Store
from objstore import journal as J
from objstore.journal.backend import serve
from objstore.storage import identity


def main(argv):
    cmd = argv[1]
    if cmd == "serve":
        def hook(req, principal):
            print(f"authorized {principal.name}", flush=True)
            sys.stdin.readline()  # the test lets the Host go on once the other process is done

        serve(argv[2], argv[3], ready=lambda p: print("ready", flush=True), on_authorized=hook)
        return
    if cmd == "revoke-only":
        store, run, pub = argv[2:5]
        log = RunLog(Store.open(store))
        J.revoke(log, identity.load_key(identity.owner_key_path()), run, pub, reason="revoked during an update")
        print("done", flush=True)
        return
    if cmd == "revoke":
        store, run, pub, scope = argv[2:6]
        log = RunLog(Store.open(store))
        owner = identity.load_key(identity.owner_key_path())
        subject = log.subject(run)
        if scope == "run":
            J.revoke(log, owner, run, pub, reason="revoked while the Host was paused")
        else:
            J.revoke(log, owner, None, pub, subject=subject, reason="revoked while the Host was paused")
        J.update_journal(log, run, owner, {"entries": [{"id": "new", "text": "NEWER body, written after the authorization"}]})
        if len(argv) > 6:
            s = J.start_session(log, subject, run=argv[6])
            J.update_journal(log, s, owner, {"entries": [{"id": "other", "text": "NEWER session's journal"}]})
        print("done", flush=True)
        return
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
