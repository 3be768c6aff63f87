"""Issue 16 profile: what a fresh ``objstore`` process imports before it answers, and what each costs.

    python benchmarks/profile_imports.py [--reps 7] [--tree DIR] [--store S]

Runs ``python -X importtime -m objstore --help`` and ``... --store S log RUN -n 10`` (RUN: the store's
newest run, a demo store made under $BENCH_DIR or /tmp when no ``--store``) ``--reps`` times each,
interleaved, and prints for each command the median total import time (the sum of every top-level
import's cumulative time), the number of modules imported, and the ten largest self times of the median
run. ``--tree DIR`` profiles another checkout (e.g. ``git worktree add /tmp/old 16afd9d``; default: this one).
Either way the tree's ``objstore`` and ``cli`` (as ``objstore_cli``) come from a directory of links on
PYTHONPATH, with the venv's site-packages after it, and Python runs with ``-S``: the editable install's
finder (which would map ``objstore`` to this checkout whatever PYTHONPATH says, and costs ~15 ms of every
start-up in ``site``) is out of both measures alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile


def parse(stderr: str) -> tuple[int, dict[str, int], list[tuple[int, str]]]:
    """(total µs of top-level imports, module -> self µs, [(self µs, module)])."""
    total, selfs = 0, {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, raw = line[len("import time:"):].split("|")
        indent = len(raw) - len(raw.lstrip())
        name = raw.strip()
        selfs[name] = int(self_us)
        if indent == 1:
            total += int(cum_us)
    return total, selfs, sorted(((v, k) for k, v in selfs.items()), reverse=True)[:10]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--tree", default=None)
    ap.add_argument("--store", default=None)
    a = ap.parse_args()
    import sysconfig

    tree = a.tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    links = tempfile.mkdtemp(prefix="objstore-tree-")
    src = os.path.join(tree, "src") if os.path.isdir(os.path.join(tree, "src", "objstore")) else None  # the flat layout had cli/
    os.symlink(os.path.join(src or tree, "objstore"), os.path.join(links, "objstore"))
    os.symlink(os.path.join(src, "objstore_cli") if src else os.path.join(tree, "cli"), os.path.join(links, "objstore_cli"))
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join([links, sysconfig.get_paths()["purelib"]])}
    store = a.store
    if store is None:
        store = os.path.join(os.environ.get("BENCH_DIR", tempfile.gettempdir()), "objstore-profile-imports")
        if not os.path.exists(store):
            subprocess.run([sys.executable, "-S", "-m", "objstore", "--store", store, "demo"], check=True, capture_output=True,
                           env={**env, "OBJSTORE_KEYS": store + "-keys"})
    commands = {"--help": ["--help"], "log RUN -n 10": ["--store", store, "log", "latest", "-n", "10", "--no-pager"]}
    got: dict[str, list] = {k: [] for k in commands}
    for _ in range(a.reps):
        for name, args in commands.items():
            p = subprocess.run([sys.executable, "-S", "-X", "importtime", "-m", "objstore", *args], capture_output=True, text=True, env=env,
                               cwd=links)  # not the checkout: "-m" puts the working directory first on sys.path
            assert p.returncode == 0, p.stderr[-500:]
            got[name].append(parse(p.stderr))
    print(f"tree: {tree}")
    for name, runs in got.items():
        runs.sort(key=lambda r: r[0])
        med = runs[len(runs) // 2]
        ours = sum(v for k, v in med[1].items() if k.split(".")[0] in ("objstore", "objstore_cli"))
        print(f"{name}: import time median {statistics.median(r[0] for r in runs) / 1000:.1f} ms "
              f"(min {runs[0][0] / 1000:.1f}, max {runs[-1][0] / 1000:.1f}), {len(med[1])} modules, "
              f"objstore's own modules {ours / 1000:.1f} ms self")
        for us, mod in med[2]:
            print(f"    {us / 1000:6.2f} ms  {mod}")


if __name__ == "__main__":
    main()
