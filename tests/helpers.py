"""Helpers shared by tests (importable as ``helpers``)."""

import json
import os
import shutil
import subprocess
import sys


def snapshot_tree(root):
    """{relative path: bytes} of every file under root (for 'nothing written' checks), but the hint
    ``log/idx-verified``: a reader records there the index files it hashed (storage.log.idxtrust),
    as it may write a checkpoint; what it holds never decides an answer."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dirpath, fn)
            if fn == "idx-verified" and os.path.basename(dirpath) == "log":
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


_REQUIRED = object()


def run_cli(*args, store=None, input=None, cwd=None, env_extra=None, exit_code=_REQUIRED):
    """Run the real `objstore` CLI in a subprocess: exit code, stdout, stderr.

    ``exit_code=N`` is required and asserted (borg's ``cmd(..., exit_code=N)``), showing stderr when
    it differs: every call says which documented code it expects (tests/test_test_habits.py checks
    that statically too)."""
    if exit_code is _REQUIRED or not isinstance(exit_code, int):
        got = "none" if exit_code is _REQUIRED else repr(exit_code)
        raise TypeError(f"run_cli{args!r}: pass exit_code=N, the exit code this call expects (got {got})")
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)
    if env_extra:
        env.update(env_extra)
    if store is not None and os.environ.get("OBJSTORE_TEST_S3_BASE"):
        store = s3_mapped(store)
    cmd = [sys.executable, "-m", "objstore"]
    if store is not None:
        cmd += ["--store", store]
    cmd += list(args)
    p = subprocess.run(cmd, input=input, capture_output=True, cwd=cwd, env=env, timeout=120)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    assert p.returncode == exit_code, (f"objstore {' '.join(map(str, args))}: exit {p.returncode}, expected {exit_code}\nstderr: {err}"
                                       f"\nstdout (end): {out[-2000:]}")
    return p.returncode, out, err


def raw_objects(store):
    """(id, type, canonical bytes) of every object, read from the segment files in log order
    (the lowest layer: entries re-read and blocks decompressed, not the engine's tables)."""
    out = []
    for _run, engine in store.logs.all_logs():  # every log of the store: the store log, then each run's
        for item in engine.scan(engine.refresh().entry):
            assert not hasattr(item, "code"), f"log damaged: {item}"
            out.extend(item.objects)
    return out


def assert_prefix_kept(before, after):
    """Every file of ``before`` is still there, and each is a byte prefix of its later self
    (segments are append-only). The head witness (log/witness) is rewritten in place by design."""
    for path, data in before.items():
        if path == os.path.join("log", "witness"):
            continue
        assert path in after, f"{path} was deleted"
        assert after[path][: len(data)] == data, f"{path} was rewritten"


class FileReadSpy:
    """Records every ``os.pread``/``os.read`` of a segment file (the lowest layer every read path
    goes through) and says which of them touched a block holding blob bodies."""

    def __init__(self, store):
        self.store = store
        self.reads = []  # (path, offset, length)
        self.blob_ranges = []  # (path, start, end) of blocks whose objects are blobs
        for _run, engine in store.logs.all_logs():  # every log of the store: the store log, then each run's
            for item in engine.scan(engine.refresh().entry):
                e = item.entry
                off = e.data_off
                kinds = {}
                for _oid, otype, _len, bi, _o in e.objs:
                    kinds.setdefault(bi, set()).add(otype)
                for bi, (_comp, _raw, stored) in enumerate(e.blocks):
                    if "blob" in kinds.get(bi, ()):
                        self.blob_ranges.append((item.where, off, off + stored))
                    off += stored

    def __enter__(self):
        self._pread, self._read = os.pread, os.read

        def path_of(fd):
            try:
                return os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return "?"

        def pread(fd, n, off):
            p = path_of(fd)
            if p.endswith(".seg"):  # a segment's bytes (a sealed index is read with pread too: not counted here)
                self.reads.append((p, off, n))
            return self._pread(fd, n, off)

        def read(fd, n):
            p = path_of(fd)
            if p.endswith(".seg"):
                self.reads.append((p, os.lseek(fd, 0, os.SEEK_CUR), n))
            return self._read(fd, n)

        os.pread, os.read = pread, read
        return self

    def __exit__(self, *exc):
        os.pread, os.read = self._pread, self._read

    def blob_reads(self):
        return [(p, o, n) for p, o, n in self.reads for bp, s, e in self.blob_ranges if p == bp and o < e and o + n > s]


def new_key(tmp, name):
    """An ed25519 key saved as ``<tmp>/<name>.key`` (and ``.pub``): (key, path)."""
    from objstore.storage import identity

    k = identity.generate()
    path = os.path.join(str(tmp), f"{name}.key")
    identity.save_key(path, k)
    return k, path


_RO_SCRIPT = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && shift && exec "$@"'


def _read_only_mount_works(root):
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", _RO_SCRIPT + " 2>/dev/null", root, "true"], capture_output=True)
    return probe.returncode == 0


def run_read_only(root, *args, env_extra=None):
    """Run the CLI on the store ``root`` while it cannot be written: exit code, stdout, stderr.

    Not root: ``chmod -R a-w``. Root writes through any file mode, so as root: a read-only bind
    mount in a private mount namespace (``unshare -m``). Where root has no mount namespace (a
    container without CAP_SYS_ADMIN) a read-only store cannot be made at all, and the test is
    skipped with that reason. (Running the command as ``nobody`` instead does not work either:
    the interpreter usually lives under root's 0700 home.)"""
    import pytest

    env = dict(os.environ, **(env_extra or {}))
    env.pop("OBJSTORE_DIR", None)
    cmd = [sys.executable, "-m", "objstore", "--store", root, *args]
    if os.geteuid() == 0:
        if not _read_only_mount_works(root):
            pytest.skip("running as root without a mount namespace (unshare -m): root writes through file modes, "
                        "so no read-only store can be made here")
        p = subprocess.run(["unshare", "-m", "sh", "-c", _RO_SCRIPT, root, "x", *cmd], capture_output=True, env=env, timeout=120)
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    subprocess.run(["chmod", "-R", "a-w", root], check=True)
    try:
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=120)
    finally:
        subprocess.run(["chmod", "-R", "u+w", root], check=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def run_on_pty(argv, *, raw=False, **popen):
    """Run ``argv`` with stdout on a pseudo-terminal (``raw``: no line discipline, bytes unchanged);
    returns (exit code, what the terminal got, stderr). ``popen``: cwd, env, ..."""
    import pty
    import tty

    master, slave = pty.openpty()
    if raw:
        tty.setraw(slave)
    p = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, **popen)
    os.close(slave)
    got = _drain_pty(master, None)
    err = p.stderr.read().decode()
    p.stderr.close()
    return p.wait(timeout=60), got, err


def s3_mapped(path):
    """Where a store a test makes at ``path`` lives when the suite runs on S3 (OBJSTORE_TEST_S3_BASE set,
    tests/s3/test_s3_suites.py): an S3 store's root (its local cache, which names its URL) is that URL; a directory
    that is not a store yet is BASE/<hash of the path>; anything else stays as it is."""
    import blake3

    base = os.environ.get("OBJSTORE_TEST_S3_BASE")
    if not base or path is None or str(path).startswith("s3://"):
        return path
    if os.path.isfile(os.path.join(str(path), "STORE_URL")):
        with open(os.path.join(str(path), "STORE_URL")) as f:
            return f.read().strip()
    if os.path.exists(os.path.join(str(path), "OBJSTORE")):
        return path
    return f"{base.rstrip('/')}/{blake3.blake3(os.path.abspath(str(path)).encode()).hexdigest()[:16]}"


def install_s3_redirect():
    """With OBJSTORE_TEST_S3_BASE set, make every store opened or created at a local path live on S3 instead
    (``s3_mapped``): for the child pytest of tests/s3/test_s3_suites.py, and through tests/s3/s3redirect/sitecustomize.py
    for every Python process it starts (a CLI, a writer script)."""
    if not os.environ.get("OBJSTORE_TEST_S3_BASE"):
        return
    from objstore.storage import store as store_mod

    if getattr(store_mod.Store, "_s3_redirected", False):
        return
    orig_init, orig_open = store_mod.Store.init.__func__, store_mod.Store.open.__func__

    def init(cls, path=None, fsync=None):
        return orig_init(cls, s3_mapped(path), fsync)

    def open_(cls, path=None, fsync=None, create=False, readable_prefix=False):
        return orig_open(cls, s3_mapped(path), fsync, create, readable_prefix)

    store_mod.Store.init = classmethod(init)
    store_mod.Store.open = classmethod(open_)
    store_mod.Store._s3_redirected = True


def s3_log(bucket, cache):
    """The run log of a store on ``bucket`` (an in-memory bucket, for tests that make a server misbehave), its
    marker written as ``init`` writes it and its cache in ``cache``: what Store.open of an s3:// URL opens."""
    from objstore.runs.api import RunLog
    from objstore.storage.store import Store

    return RunLog(Store.on_bucket(bucket, str(cache)))


def keys_holding(items, secret):
    """The keys of ``items`` ((key, bytes) pairs: a bucket's objects) whose bytes hold ``secret``, raw or inside
    any zstd frame (every frame start is tried): where a body gc should have removed could still be."""
    import zstandard

    out = []
    for key, data in items:
        if secret in data:
            out.append(key)
            continue
        i = data.find(b"\x28\xb5\x2f\xfd")
        while i >= 0:
            try:
                if secret in zstandard.ZstdDecompressor().decompressobj().decompress(data[i:]):
                    out.append(key)
                    break
            except zstandard.ZstdError:
                pass
            i = data.find(b"\x28\xb5\x2f\xfd", i + 1)
    return out


def run_on_terminal(args, env, cwd=None, timeout=60):
    """The CLI (``python -m objstore ARGS``) with stdin, stdout and stderr on a pseudo-terminal (click pages,
    and rich draws progress, only on a terminal; ``run_on_pty`` puts stdout alone there): its exit code and
    what the terminal showed."""
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "objstore", *args], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    return p.wait(timeout=timeout), _drain_pty(master, timeout).decode("utf-8", "replace")


def _drain_pty(master, timeout):
    """Everything the terminal shows until the child closes it (or, with ``timeout``, is silent that
    long); closes ``master``."""
    import select

    chunks = []
    while True:
        if timeout is not None and not select.select([master], [], [], timeout)[0]:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return b"".join(chunks)


# -- where a store's logs are on disk (format 6: a log per run; formats 3 to 5: one log) ------------------------

def is_per_run(root):
    """Whether the store at ``root`` has a log per run (format 6; or format 7 on object storage, whose root is its local
    cache: the run logs' caches and state files are laid out under it as format 6's logs are)."""
    if os.path.isdir(os.path.join(str(root), "store", "log")):
        return True
    try:
        with open(os.path.join(str(root), "marker"), "rb") as f:  # the cache's copy of a bucket's marker
            return json.loads(f.read()).get("version") == 7
    except (OSError, ValueError, AttributeError):
        return False


def store_log_root(root):
    """The directory holding the store log's ``log/`` and ``lock`` (the store's one log before format 6)."""
    return os.path.join(str(root), "store") if is_per_run(root) else str(root)


def run_log_root(root, run):
    """The directory holding run ``run``'s ``log/`` and ``lock`` (the store's one log before format 6)."""
    if not is_per_run(root):
        return str(root)
    from objstore.storage.runlogs.logs import run_dir

    return run_dir(str(root), run)


def state_db_path(root, run):
    """The state cache's file holding run ``run``'s rows: beside the run's log on a store with a log per run
    (format 6), else the store's one ``state.db`` at its root."""
    return os.path.join(run_log_root(root, run), "state.db")


def is_state_file(path):
    """Whether a path (relative to a store's root) is one of the state cache's files (a cache: derived data)."""
    return os.path.basename(str(path)).startswith("state.db")


def log_engine_of(store, run=None):
    """The engine of run ``run``'s log (None: the store log) — the store's one engine before format 6."""
    return store.logs.store_log if run is None else store.logs.run_log(run)


def log_files(root):
    """{relative path: bytes} of every file of every log of the store at ``root`` (and, with a log per run, the
    catalog): what a commit may write, for 'nothing written' checks on either shape."""
    root = str(root)
    if not is_per_run(root):
        return snapshot_tree(os.path.join(root, "log"))
    out = {}
    for part in ("store", "runs", "catalog"):
        for rel, data in snapshot_tree(os.path.join(root, part)).items():
            out[os.path.join(part, rel)] = data
    return out
