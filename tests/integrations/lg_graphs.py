"""The small LangGraph graphs the LangGraph saver tests run (not a test module: imported by them).

Every model here is a stub: deterministic, no network, no randomness, so two runs write the same
checkpoints and a test can count what ran."""

from __future__ import annotations

import operator
from collections import Counter
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import RetryPolicy, Send, interrupt


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(calls: Counter, fail_first: int = 1) -> Any:
    """llm -> review (an interrupt asking to run the tool) -> tools -> llm -> END. The stub LLM asks
    for the weather tool on a human message and answers from a tool message; the tool raises
    ConnectionError on its first ``fail_first`` calls (a RetryPolicy of 3 tries retries it)."""

    def llm(state: ChatState) -> dict:
        calls["llm"] += 1
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            return {"messages": [AIMessage("", id=f"ai-{calls['llm']}", tool_calls=[
                {"name": "weather", "args": {"city": last.content}, "id": f"call-{calls['llm']}"}])]}
        return {"messages": [AIMessage(f"The weather: {last.content}", id=f"ai-{calls['llm']}")]}

    def review(state: ChatState) -> dict:
        calls["review"] += 1
        answer = interrupt("run the weather tool?")
        return {"messages": [HumanMessage(f"approved: {answer}", id=f"h-review-{calls['review']}")]} if answer != "yes" else {}

    def tools(state: ChatState) -> dict:
        calls["tools"] += 1
        if calls["tools"] <= fail_first:
            raise ConnectionError("weather backend unreachable")
        ai = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage) and m.tool_calls)
        return {"messages": [ToolMessage(f"sunny in {c['args']['city']}", tool_call_id=c["id"], id=f"t-{c['id']}")
                             for c in ai.tool_calls]}

    def route(state: ChatState) -> str:
        last = state["messages"][-1]
        return "review" if isinstance(last, AIMessage) and last.tool_calls else END

    b = StateGraph(ChatState)
    b.add_node("llm", llm)
    b.add_node("review", review)
    b.add_node("tools", tools, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=False,
                                                         retry_on=ConnectionError))
    b.add_edge(START, "llm")
    b.add_conditional_edges("llm", route, ["review", END])
    b.add_edge("review", "tools")
    b.add_edge("tools", "llm")
    return b


class FanState(TypedDict):
    results: Annotated[list, operator.add]


def fan_graph(calls: Counter) -> Any:
    """plan -> three parallel tool tasks (Send) in one step -> END. Tools a and b finish; tool c
    asks a human first (an interrupt), so the step stops with a and b done and c pending."""

    def plan(state: FanState) -> dict:
        calls["plan"] += 1
        return {}

    def fan(state: FanState) -> list:
        return [Send("tool", {"results": [name]}) for name in ("a", "b", "c")]

    def tool(arg: FanState) -> dict:
        name = arg["results"][0]
        calls[name] += 1
        if name == "c":
            ok = interrupt("may tool c run?")
            return {"results": [f"c:{ok}"]}
        return {"results": [f"{name}:done"]}

    b = StateGraph(FanState)
    b.add_node("plan", plan)
    b.add_node("tool", tool)
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan, ["tool"])
    b.add_edge("tool", END)
    return b


class NestState(TypedDict):
    notes: Annotated[list, operator.add]


def nested_graph(calls: Counter) -> Any:
    """outer -> child (a compiled subgraph as a node: its checkpoints are LangGraph's namespace
    ``child:<task id>``, a run of its own) -> END."""

    def inner(state: NestState) -> dict:
        calls["inner"] += 1
        return {"notes": ["inner"]}

    sub = StateGraph(NestState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")

    def outer(state: NestState) -> dict:
        calls["outer"] += 1
        return {"notes": ["outer"]}

    b = StateGraph(NestState)
    b.add_node("outer", outer)
    b.add_node("child", sub.compile())
    b.add_edge(START, "outer")
    b.add_edge("outer", "child")
    return b


def agent_graph(calls: Counter) -> Any:
    """``chat_graph`` with a subgraph: llm -> review (interrupt) -> tools (fails once, RetryPolicy) ->
    llm -> summarize -> END, where summarize is a compiled subgraph (its checkpoints are namespace
    ``summarize:<task id>``) whose one node appends a summary message. The LLM is ``chat_graph``'s
    deterministic stub."""
    b = chat_graph(calls)

    def write_summary(state: ChatState) -> dict:
        calls["summary"] += 1
        return {"messages": [AIMessage(f"summary of {len(state['messages'])} messages", id=f"sum-{calls['summary']}")]}

    sub = StateGraph(ChatState)
    sub.add_node("write_summary", write_summary)
    sub.add_edge(START, "write_summary")

    def route(state: ChatState) -> str:
        last = state["messages"][-1]
        return "review" if isinstance(last, AIMessage) and last.tool_calls else "summarize"

    out = StateGraph(ChatState)
    for name, spec in b.nodes.items():
        out.add_node(name, spec.runnable, retry_policy=spec.retry_policy)
    out.add_node("summarize", sub.compile())
    out.add_edge(START, "llm")
    out.add_conditional_edges("llm", route, ["review", "summarize"])
    out.add_edge("review", "tools")
    out.add_edge("tools", "llm")
    out.add_edge("summarize", END)
    return out
