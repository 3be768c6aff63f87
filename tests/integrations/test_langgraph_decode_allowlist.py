"""Reading a LangGraph checkpoint constructs only allow-listed types (issue 13, item 2).

LangGraph's permissive serializer rebuilds whatever ``(module, name, arg)`` a msgpack ext names, so
a checkpoint whose part names ``('os', 'system', CMD)`` runs CMD in the process that reads it. Anyone
who can commit can write one: here a saver with that permissive serializer writes the crafted
checkpoint (a channel part, the checkpoint's metadata and a pending write each name a command that
would create a marker file), and a FRESH process reads it with the savers' default — the markers
must not appear. Pickle is refused, and the types graphs use (LangChain messages, LangGraph's Send,
Interrupt and Command, datetime, uuid, sets) still come back as themselves; an extra type comes
back when it is allow-listed (``allowed_types=``) and only then."""

from __future__ import annotations

import dataclasses
import datetime
import os
import subprocess
import sys
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command, Interrupt, Send

from objstore.errors import InvalidRecord
from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver

HERE = os.path.dirname(os.path.abspath(__file__))


def _evil(cmd: str):
    """An object LangGraph's serializer writes as ext ``('os', 'system', cmd)``: a reader that builds
    it calls ``os.system(cmd)``."""

    class Secret:
        def get_secret_value(self):
            return cmd

    Secret.__module__, Secret.__name__ = "os", "system"
    return Secret()


def _crafted(root: str, markers: dict[str, str]) -> str:
    """A checkpoint and a pending write, written by a saver with LangGraph's permissive serializer,
    each naming a ``touch`` of its own marker. Returns the checkpoint id."""
    writer = ObjstoreSaver(root, serde=JsonPlusSerializer(allowed_msgpack_modules=True))
    cp = empty_checkpoint()
    cp["channel_values"] = {"state": _evil(f"touch {markers['part']}"), "messages": [_evil(f"touch {markers['element']}")]}
    cp["channel_versions"] = {"state": 1, "messages": 1}
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cfg = writer.put(conf, cp, {"source": "loop", "step": 0, "note": _evil(f"touch {markers['metadata']}")}, {"state": 1})
    writer.put_writes(cfg, [("state", _evil(f"touch {markers['write']}"))], "task-1")
    return cfg["configurable"]["checkpoint_id"]


READER = r"""
import asyncio, sys
from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver
root, which = sys.argv[1], sys.argv[2]
conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
if which == "sync":
    s = ObjstoreSaver(root)
    t = s.get_tuple(conf)
    listed = list(s.list(conf))
else:
    async def main():
        s = AsyncObjstoreSaver(root)
        t = await s.aget_tuple(conf)
        listed = [x async for x in s.alist(conf)]
        return t, listed
    t, listed = asyncio.run(main())
assert t is not None and len(listed) == 1
print(repr(t.checkpoint["channel_values"]["state"]))
print(repr(t.pending_writes[0][2]))
"""


@pytest.mark.parametrize("which", ["sync", "async"])
def test_a_crafted_checkpoint_runs_nothing_in_a_fresh_reader(tmp_path, which):
    root = str(tmp_path / "s")
    markers = {k: str(tmp_path / f"marker-{k}") for k in ("part", "element", "metadata", "write")}
    _crafted(root, markers)
    assert not any(os.path.exists(m) for m in markers.values())  # writing builds nothing
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_STRICT_MSGPACK"}  # the savers' default, not LangGraph's env switch
    p = subprocess.run([sys.executable, "-c", READER, root, which], capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    made = sorted(k for k, m in markers.items() if os.path.exists(m))
    assert made == []
    # What was refused comes back as its serialized argument, never as the constructor's result.
    assert p.stdout.decode().splitlines() == [repr(f"touch {markers['part']}"), repr(f"touch {markers['write']}")]


def test_a_pickle_part_is_refused(tmp_path):
    """A part whose serde type is ``pickle`` (a writer with LangGraph's pickle fallback) is never
    unpickled by the default reader: InvalidRecord naming it, nothing run."""
    marker = tmp_path / "pickled"

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    root = str(tmp_path / "s")
    writer = ObjstoreSaver(root, serde=JsonPlusSerializer(pickle_fallback=True))
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": 1}
    cp["channel_versions"] = {"x": 1}
    cfg = writer.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"step": 0}, {"x": 1})
    writer.put_writes(cfg, [("x", Boom())], "task-1")
    assert not marker.exists()
    with pytest.raises(InvalidRecord, match="pickle"):
        ObjstoreSaver(root).get_tuple(cfg)
    assert not marker.exists()


@dataclasses.dataclass
class Plan:
    steps: list
    owner: str


@pytest.mark.parametrize("cls", [ObjstoreSaver, AsyncObjstoreSaver])
def test_the_types_graphs_use_round_trip_and_extra_types_need_the_allow_list(tmp_path, cls):
    values = {
        "messages": [HumanMessage("hi", id="h1"), AIMessage("", id="a1", tool_calls=[{"name": "w", "args": {"c": "x"}, "id": "c1"}]),
                     ToolMessage("sunny", tool_call_id="c1", id="t1")],
        "when": datetime.datetime(2026, 12, 6, 5, 0, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 12, 6),
        "id": uuid.UUID(int=7),
        "tags": {"a", "b"},
        "send": Send("tool", {"x": 1}),
        "interrupt": Interrupt(value="ok?", id="i1"),
        "command": Command(resume="yes"),
        "plan": Plan(["a", "b"], "me"),
    }
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    root = str(tmp_path / "s")
    ObjstoreSaver(root).put(conf, cp, {"step": 0}, {k: 1 for k in values})

    got = ObjstoreSaver(root).get_tuple(conf).checkpoint["channel_values"]
    # (LangGraph's own serializer gives a Command's goto back as a list: compared on what it carries)
    assert isinstance(got["command"], Command) and got["command"].resume == "yes"
    assert {k: v for k, v in got.items() if k not in ("plan", "command")} == {k: v for k, v in values.items() if k not in ("plan", "command")}
    assert got["plan"] == {"steps": ["a", "b"], "owner": "me"}  # not allow-listed: its fields, not the type
    allowed = cls(root, allowed_types=[Plan])
    if cls is ObjstoreSaver:
        got = allowed.get_tuple(conf).checkpoint["channel_values"]
    else:
        import asyncio

        got = asyncio.run(allowed.aget_tuple(conf)).checkpoint["channel_values"]
    assert got["plan"] == Plan(["a", "b"], "me") and isinstance(got["command"], Command)


def test_an_encrypted_serializer_around_the_strict_one_stays_strict(tmp_path):
    """docs/LANGGRAPH.md's way to encrypt: LangGraph's EncryptedSerializer around ``strict_serde``
    (a toy cipher: what is checked is what the inner serializer constructs)."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from objstore.integrations.langgraph import strict_serde

    class Xor:
        def encrypt(self, plaintext):
            return "xor", bytes(b ^ 0x5A for b in plaintext)

        def decrypt(self, ciphername, ciphertext):
            assert ciphername == "xor"
            return bytes(b ^ 0x5A for b in ciphertext)

    root = str(tmp_path / "s")
    marker = tmp_path / "enc-marker"
    cp = empty_checkpoint()
    cp["channel_values"] = {"state": _evil(f"touch {marker}"), "plan": Plan(["a"], "me")}
    cp["channel_versions"] = {"state": 1, "plan": 1}
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    ObjstoreSaver(root, serde=EncryptedSerializer(Xor(), JsonPlusSerializer(allowed_msgpack_modules=True))).put(conf, cp, {"step": 0}, {"state": 1})
    got = ObjstoreSaver(root, serde=EncryptedSerializer(Xor(), strict_serde(None, [Plan]))).get_tuple(conf).checkpoint["channel_values"]
    assert not marker.exists() and got["plan"] == Plan(["a"], "me") and got["state"] == f"touch {marker}"


def test_show_and_log_of_a_crafted_checkpoint_construct_nothing(tmp_path):
    # issue 19: `objstore show` decodes a checkpoint through the saver's serializer, `log` reads plain msgpack
    from helpers import run_cli

    root = str(tmp_path / "s")
    markers = {k: str(tmp_path / f"{k}.marker") for k in ("part", "element", "metadata", "write")}
    cid = _crafted(root, markers)
    saver = ObjstoreSaver(root)
    rec = next(r for r in saver.log.find_records(saver.log.find_run(thread_id="t", checkpoint_ns=""), checkpoint_id=cid)
               if r.kind == "x.langgraph.checkpoint")
    _, out, _ = run_cli("show", rec.id.hex(), store=root, exit_code=0)
    run_cli("log", "thread_id=t", "--graph", "--no-pager", store=root, exit_code=0)
    run_cli("diff", "thread_id=t", cid, cid, store=root, exit_code=0)
    assert f"LangGraph checkpoint {cid}" in out and "messages: list of 1" in out
    assert not any(os.path.exists(m) for m in markers.values())
