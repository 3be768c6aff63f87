"""Child process for tests/integrations/test_langgraph_concurrency.py: resume a thread from one checkpoint.

    python lg_resume.py STORE THREAD PARENT_ID NAME GO_FILE [ON_CONCURRENT]

Opens its own ObjstoreSaver on STORE, waits until GO_FILE exists (so both children put at once),
puts one checkpoint whose parent is PARENT_ID with a channel value naming NAME and one pending write
on it, and prints the new checkpoint id. Exit 0 on success. With ON_CONCURRENT (``fork``, the default, or
``raise``, the saver's option): a put the saver refuses prints the error's class and message, exit 7."""

from __future__ import annotations

import os
import sys
import time

from langgraph.checkpoint.base import empty_checkpoint

from objstore.errors import ObjstoreError
from objstore.integrations.langgraph import ObjstoreSaver


def main() -> int:
    store, thread, parent, name, go = sys.argv[1:6]
    saver = ObjstoreSaver(store, on_concurrent=sys.argv[6] if len(sys.argv) > 6 else "fork")
    saver.log.find_run(thread_id=thread, checkpoint_ns="")  # open and warm up before the race
    cp = empty_checkpoint()
    cp["channel_values"] = {"who": name}
    cp["channel_versions"] = {"who": 2}
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        cfg = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": parent}}, cp,
                        {"source": "loop", "step": 5, "writer": name}, {"who": 2})
    except ObjstoreError as e:
        print(f"{type(e).__name__}: {e}")
        return e.exit_code
    saver.put_writes(cfg, [("who", f"next after {name}")], f"task-{name}")
    print(cfg["configurable"]["checkpoint_id"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
