"""Process-level test harness: real sluiced processes on loopback, real HTTP.

Nothing here sleeps to wait for a condition: every wait polls with a generous deadline
(these machines have 2 cores and fdatasync stalls of tens of milliseconds).
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

SLUICED = os.path.abspath(os.environ.get("SLUICED", "build/bin/sluiced"))
SLUICE_CLI = os.path.abspath(os.environ.get("SLUICE_CLI", "build/bin/sluice"))
TEST_PLUGIN_DIR = os.environ.get("TEST_PLUGIN_DIR", "")
DEADLINE_S = 60.0


_HANDED_OUT = set()
# Ports handed out by every test process on this machine (ctest runs two at once), with
# when: a port one process handed out and its node has not bound yet is still free to the
# kernel, and was handed to a node of the other process too. That node then answered the
# first one's requests, and died under them (CI: test_counters against test_crash's node).
_REGISTRY = os.path.join(tempfile.gettempdir(), "sluice-it-ports")
_REGISTRY_TTL_S = 3600


def free_port():
    """A port the kernel calls free, never one handed out before by this or another test
    process in the last hour: a node takes four (HTTP, raft, metadata RPC, peer transport),
    and the kernel may offer the same free port twice in a row, which made a node's
    transport collide with its own RPC port."""
    import fcntl
    with open(_REGISTRY, "a+") as reg:
        fcntl.flock(reg, fcntl.LOCK_EX)
        reg.seek(0)
        now = time.time()
        taken = {}
        lines = reg.read().splitlines()
        for line in lines:
            try:
                port, at = line.split()
                if now - float(at) < _REGISTRY_TTL_S:
                    taken[int(port)] = at
            except ValueError:
                pass
        if len(lines) > 20000:  # keep the file small: only the entries still in force
            reg.seek(0)
            reg.truncate()
            reg.write("".join("%d %s\n" % (p, at) for p, at in taken.items()))
        for _ in range(1000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT and port not in taken:
                _HANDED_OUT.add(port)
                reg.seek(0, os.SEEK_END)
                reg.write("%d %f\n" % (port, now))
                return port
    raise AssertionError("no free port that was not handed out already")


def poll(cond, what, timeout=DEADLINE_S, interval=0.02):
    """Polls cond() until it returns a truthy value; fails naming `what` (a string, or a
    callable giving one at the time of the failure, e.g. with the last answer seen)."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what() if callable(what) else what))
        time.sleep(interval)


def encode_binary_batch(records):
    """records: list of (key or None, value bytes). The application/vnd.sluice.batch body."""
    out = bytearray()
    for key, value in records:
        if key is None:
            out += struct.pack("<II", 0xFFFFFFFF, len(value))
        else:
            out += struct.pack("<II", len(key), len(value)) + key
        out += value
    return bytes(out)


class HttpError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body))
        self.status = status
        self.body = body
        try:
            self.problem = json.loads(body)
        except ValueError:
            self.problem = {}


class Node:
    """One sluiced process with its own data directory and ports."""

    def __init__(self, workdir=None, extra=None, data_dir=None, env=None):
        self.own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="sluice-it-")
        self.data_dir = data_dir or os.path.join(self.workdir, "data")
        self.http_port = free_port()
        self.raft_port = free_port()
        self.rpc_port = free_port()
        self.peer_port = free_port()
        self.extra = dict(extra or {})
        self.env = dict(env or {})
        self.proc = None
        self.log_path = os.path.join(self.workdir, "sluiced.log")
        self.starts = 0
        self.token = None  # sent as "Authorization: Bearer <token>" by request() when set

    # --- process control -------------------------------------------------------------
    def args(self):
        cfg = {
            "data.dir": self.data_dir,
            "http.port": str(self.http_port),
            "raft.address": "127.0.0.1:%d" % self.raft_port,
            "metadata.rpc_address": "127.0.0.1:%d" % self.rpc_port,
            "transport.address": "127.0.0.1:%d" % self.peer_port,
        }
        cfg.update(self.extra)
        args = [SLUICED]
        for k, v in cfg.items():
            args += ["--set", "%s=%s" % (k, v)]
        return args

    def spawn(self):
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(b"\n==== start %d ====\n" % self.starts)
            log.flush()
            env = dict(os.environ)
            env.update(self.env)
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir, env=env)
        return self.proc

    def start(self):
        self.spawn()
        poll(lambda: self._ready_or_dead(), "sluiced to become ready (log: %s)" % self.log_path)
        if self.proc.poll() is not None:
            raise AssertionError("sluiced exited with %d:\n%s" % (self.proc.returncode, self.log_tail()))
        self._check_it_is_ours()
        return self

    def _check_it_is_ours(self):
        """The node that answered on our port must be this one (not another test's node that
        took the port first): its directory.id is the one in our data directory."""
        try:
            with open(os.path.join(self.data_dir, "meta.properties")) as f:
                mine = dict(l.strip().split("=", 1) for l in f if "=" in l).get("directory.id")
        except OSError:
            return  # not formatted here (a custom data dir): nothing to compare
        if not mine:
            return
        theirs = self.request("GET", "/v1/cluster", raw=True)
        if theirs[0] == 200 and json.loads(theirs[1]).get("directory_id") not in (None, mine):
            raise AssertionError("another node answers on port %d (this node's log:\n%s)"
                                 % (self.http_port, self.log_tail()))

    def start_expect_failure(self, timeout=DEADLINE_S):
        """Starts and expects the process to exit non-zero; returns (code, output of this start)."""
        self.spawn()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("sluiced did not exit; log:\n" + self.log_tail())
        return code, self.current_log()

    def _ready_or_dead(self):
        if self.proc.poll() is not None:
            return True
        try:
            status, _ = self.request("GET", "/readyz", raw=True)
            return status == 200
        except (OSError, HttpError):
            return False

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("sluiced ignored SIGTERM; log:\n" + self.log_tail())
        return self.proc.returncode if self.proc else None

    def secrets(self):
        """What must never appear in this node's log: its bearer token and the password of
        every database URL it was given (docs/security.md)."""
        out = [self.token] if self.token else []
        urls = [v for k, v in self.extra.items() if k.endswith(".url")]
        urls.append(os.environ.get("SLUICE_TEST_PG_URL", ""))
        for u in urls:
            out += re.findall(r"password=([^\s&]+)", u) + re.findall(r"://[^:/@\s]+:([^@\s]+)@", u)
        return [s for s in out if len(s) >= 6]

    def cleanup(self):
        self.kill()
        leaks = []
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode(errors="replace")
            leaks = [s[:4] + "..." for s in self.secrets() if s in text]
        except OSError:
            pass
        if self.own_workdir and not os.environ.get("SLUICE_IT_KEEP"):  # keep logs to debug
            shutil.rmtree(self.workdir, ignore_errors=True)
        if leaks:
            raise AssertionError("secrets in the log of node %s (%s): %s" % (
                self.extra.get("node.id", "1"), self.log_path, leaks))

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def current_log(self):
        with open(self.log_path, "rb") as f:
            text = f.read().decode(errors="replace")
        return text.rsplit("==== start %d ====" % self.starts, 1)[-1]

    # --- HTTP --------------------------------------------------------------------------
    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.http_port

    def request(self, method, path, body=None, content_type="application/json", raw=False,
                timeout=DEADLINE_S):
        data = None
        headers = {}
        if body is not None:
            data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                payload = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            payload = e.read()
            status = e.code
            if not raw:
                raise HttpError(status, payload.decode(errors="replace"))
        if raw:
            return status, payload
        return json.loads(payload) if payload else None

    # --- catalog and data helpers ------------------------------------------------------
    def ns_path(self, tenant="t", ns="n"):
        return "/v1/tenants/%s/namespaces/%s" % (tenant, ns)

    def ensure_ns(self, tenant="t", ns="n"):
        for path, name in (("/v1/tenants", tenant), ("/v1/tenants/%s/namespaces" % tenant, ns)):
            status, body = self.request("POST", path, {"name": name}, raw=True)
            if status not in (201, 409):
                raise HttpError(status, body)

    def create_stream(self, name, shards=1, tenant="t", ns="n", **spec):
        self.ensure_ns(tenant, ns)
        body = {"name": name, "shards": shards}
        body.update(spec)
        return self.request("POST", self.ns_path(tenant, ns) + "/streams", body)

    def publish_binary(self, stream, records, ack="leader", tenant="t", ns="n", timeout=DEADLINE_S,
                       producer=None):
        q = "ack=%s" % ack
        if producer is not None:
            q += "&producer_id=%d&sequence=%d" % producer
        return self.request("POST", "%s/streams/%s/records?%s" % (self.ns_path(tenant, ns), stream, q),
                            encode_binary_batch(records), content_type="application/vnd.sluice.batch",
                            timeout=timeout)["results"]

    def stream_dirs(self, tenant, ns, stream):
        """Shard incarnation directories of a stream on disk."""
        d = os.path.join(self.data_dir, "shards", tenant, ns, stream)
        try:
            return sorted(os.listdir(d))
        except FileNotFoundError:  # never created, or the broker removed it just now
            return []

    def fetch(self, stream, shard, offset, max_records=1000, wait_ms=0, tenant="t", ns="n"):
        q = "%s/streams/%s/shards/%d/records?offset=%s&max=%d" % (
            self.ns_path(tenant, ns), stream, shard, offset, max_records)
        if wait_ms:
            q += "&wait_ms=%d" % wait_ms
        return self.request("GET", q)

    def fetch_all(self, stream, shard, tenant="t", ns="n", start=0):
        """Every record of one shard from `start` to the high watermark, in order."""
        out = []
        offset = start
        while True:
            r = self.fetch(stream, shard, offset, 1000, tenant=tenant, ns=ns)
            out.extend(r["records"])
            if not r["records"]:
                return out
            offset = r["next_offset"]


def record_value(rec):
    if "value" in rec:
        return rec["value"].encode()
    import base64
    return base64.b64decode(rec["value_base64"])


def rng(seed):
    print("seed=%d" % seed, flush=True)
    return random.Random(seed)


def segments(node, tenant, ns, stream, shard, incarnation=0):
    d = os.path.join(node.data_dir, "shards", tenant, ns, stream,
                     str(shard) if incarnation == 0 else "%d-%016x" % (shard, incarnation), "log")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".log"))


LOG_LINE = re.compile(r"^\S+ (DEBUG|INFO|WARN|ERROR) ")


def cleanup_all(nodes):
    """Node.cleanup() for every node, even when one of them raises (a secret found in its
    log): the rest are still killed and their directories removed. The first error is
    raised at the end, naming how many nodes failed."""
    errors = []
    for n in nodes:
        if n is None:
            continue
        try:
            n.cleanup()
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
    if errors:
        if len(errors) > 1:
            raise AssertionError("%d nodes failed their cleanup; the first: %s" % (len(errors), errors[0]))
        raise errors[0]
