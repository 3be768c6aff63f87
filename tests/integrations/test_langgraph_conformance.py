"""The official LangGraph checkpointer conformance suite (langgraph-checkpoint-conformance 0.0.2)
against both objstore savers, each capability suite on a fresh store in tmp_path: every base and
extended capability is detected and passes natively (deletes are recorded deletions, copy_thread a
cross-run fork), asserted on the report's level and its exact per-capability counts."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.checkpoint.conformance.initializer import checkpointer_test

from objstore import open_store
from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver

# The suite's test counts per capability (its ALL_*_TESTS lists in 0.0.2): 81 in all.
COUNTS = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5,
          "delete_for_runs": 7, "copy_thread": 8, "prune": 8}


@pytest.mark.parametrize("cls", [ObjstoreSaver, AsyncObjstoreSaver])
def test_the_official_suite_passes_at_full_level(tmp_path, cls):
    n = itertools.count()

    async def factory():
        yield cls(open_store(str(tmp_path / f"store{next(n)}")))

    registered = checkpointer_test(name=cls.__name__)(factory)
    report = asyncio.run(validate(registered))
    report.print_report()
    level = report.conformance_level()
    print(f"{cls.__name__}: conformance level {level}")
    failures = {k: r.failures for k, r in report.results.items() if r.failures}
    assert failures == {}
    assert {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES} == set(report.results)
    got = {k: (r.detected, r.passed, r.tests_passed, r.tests_failed, r.tests_skipped) for k, r in report.results.items()}
    assert got == {k: (True, True, c, 0, 0) for k, c in COUNTS.items()}
    assert level == "FULL"
