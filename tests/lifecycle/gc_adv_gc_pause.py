"""A gc that pauses after it decided what goes (tests/lifecycle/test_gc_adversarial.py): the window in which a
writer in another process may commit a record naming a body gc is about to remove.

    python gc_adv_gc_pause.py STORE READYFILE GOFILE

Runs ``objstore.lifecycle.gc.gc`` on STORE with ``doomed`` wrapped: once it has computed the bodies
that go, it creates READYFILE and waits for GOFILE, then goes on. Prints the GcResult's JSON.
"""

import json
import os
import sys
import time


def main(argv):
    root, ready, go = argv[1], argv[2], argv[3]
    from objstore import Store
    from objstore.lifecycle import gc as G

    real = G.doomed

    def doomed(store, log=None):  # each log's (a store of a log per run: once per log; the first one pauses)
        out = real(store, log)
        open(ready, "w").close()
        while not os.path.exists(go):
            time.sleep(0.01)
        return out

    G.doomed = doomed
    print(json.dumps(G.gc(Store.open(root)).to_json()), flush=True)


if __name__ == "__main__":
    main(sys.argv)
