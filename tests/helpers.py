"""Helpers shared by tests (importable as ``helpers``)."""

import os
import subprocess
import sys


def snapshot_tree(root):
    """{relative path: bytes} of every file under root (for 'nothing written' checks)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dirpath, fn)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def run_cli(*args, store=None, input=None, cwd=None, env_extra=None):
    """Run the real `objstore` CLI in a subprocess: exit code, stdout, stderr."""
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)
    if env_extra:
        env.update(env_extra)
    cmd = [sys.executable, "-m", "objstore"]
    if store is not None:
        cmd += ["--store", store]
    cmd += list(args)
    p = subprocess.run(cmd, input=input, capture_output=True, cwd=cwd, env=env, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
