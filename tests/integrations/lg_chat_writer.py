"""Child process for tests/integrations/test_langgraph_partree_writers.py: chats that race on one thread.

    python lg_chat_writer.py STORE THREAD START_ID NAME TURNS GO_FILE

Opens its own ObjstoreSaver on STORE and, once GO_FILE exists, runs two threads, each a chat that
starts from checkpoint START_ID (whose ``messages`` it reads back) and puts TURNS checkpoints, each
continuing its own previous one with one more message (so the chats' puts race: a put whose parent
is no longer its branch's newest is a fork). Prints one JSON line per put: [checkpoint id, messages].
Exit 0 on success."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from langgraph.checkpoint.base import empty_checkpoint

from objstore.integrations.langgraph import ObjstoreSaver


def main() -> int:
    store, thread, start, name, turns, go = sys.argv[1:7]
    saver = ObjstoreSaver(store)
    first = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": start}})
    base = list(first.checkpoint["channel_values"]["messages"])
    out: list = []
    lock = threading.Lock()

    def chat(who: str) -> None:
        parent, msgs = start, list(base)
        for i in range(int(turns)):
            msgs = msgs + [f"the model says {i}"]  # the same in every chat: equal leaves, nodes on other branches
            cp = empty_checkpoint()
            cp["channel_values"] = {"messages": msgs}
            cp["channel_versions"] = {"messages": len(msgs)}
            conf = {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": parent}
            parent = saver.put({"configurable": conf}, cp, {"source": "loop", "step": len(msgs)}, {"messages": len(msgs)})["configurable"]["checkpoint_id"]
            with lock:
                out.append([parent, msgs])

    while not os.path.exists(go):
        time.sleep(0.001)
    workers = [threading.Thread(target=chat, args=(f"{name}{k}",)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for row in out:
        print(json.dumps(row))
    return 0 if len(out) == 2 * int(turns) else 1


if __name__ == "__main__":
    sys.exit(main())
