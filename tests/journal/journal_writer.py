"""A journal writer as its own OS process (T-745 C2/C4: the update arrives from another process).

    python journal_writer.py STORE RUN KEYFILE BODY_JSON [REFLECTS_THROUGH|latest|none] [SOCKET]

Writes one journal version with the worker key in KEYFILE (through the Backend Host on SOCKET if
given, else an in-process Host) and prints ``<version> <id hex>``.
"""

import json
import sys

from objstore import RunLog, Store
from objstore import journal as J
from objstore.journal.backend import BackendHost
from objstore.storage import identity


def main(argv):
    store, run, keyfile, body = argv[1:5]
    rt = argv[5] if len(argv) > 5 else "none"
    sock = argv[6] if len(argv) > 6 else None
    log = RunLog(Store.open(store))
    key = identity.load_key(keyfile)
    host = BackendHost(sock) if sock else None
    jid, ver = J.update_journal(log, run, key, json.loads(body), reflects_through=None if rt == "none" else rt, host=host)
    print(ver, jid.hex())


if __name__ == "__main__":
    main(sys.argv)
