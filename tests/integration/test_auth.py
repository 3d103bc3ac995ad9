"""Bearer tokens and roles on the HTTP API (issue 14; docs/security.md).

A node with auth.enabled and a tokens file holding an admin token and, for each of two
tenants, a tenant-admin, a produce and a consume token. Every REST route (enumerated from
plugins/http-api/routes.cc, so a new route without a case here fails the test) is called
with each tenant token on the other tenant's paths: every call is refused with 403 and
changes nothing (checked with the admin token afterwards). Then the 401 cases, SIGHUP
reloads, the non-loopback refusal, the CLI with --token and SLUICE_TOKEN, forwarding between
two brokers with auth on (needs the sluice_pg fixture), and a grep of every log these
tests wrote for the secrets they used."""
import asyncio
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

import websockets

from harness import SLUICE_CLI, Node, poll

ROUTES_CC = os.path.join(os.path.dirname(__file__), "..", "..", "plugins", "http-api", "routes.cc")
PG_URL = os.environ.get("SLUICE_TEST_PG_URL", "")

# Every secret these tests use, grepped for in every log they wrote, before the log is
# removed (scanned()).
SECRETS = []
LOGS = []  # the logs scanned


def scanned(node):
    """node.cleanup, after checking that no secret used so far appears in its log (the
    workdir and its log are removed by cleanup)."""
    def cleanup():
        try:
            with open(node.log_path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        node.cleanup()
        LOGS.append(node.log_path)
        leaks = [s[:12] + "..." for s in SECRETS if s in text]
        if leaks:
            raise AssertionError("secrets found in %s: %s" % (node.log_path, leaks))
    return cleanup


def token(name):
    t = "tok-%s-%s" % (name, os.urandom(16).hex())
    SECRETS.append(t)
    return t


def line(tok, name, *grants):
    return "sha256:%s %s %s\n" % (hashlib.sha256(tok.encode()).hexdigest(), name, " ".join(grants))


def call(node, method, path, body=None, tok=None, headers=None, raw_body=None, timeout=30):
    """(status, headers, raw payload) without raising on HTTP errors."""
    h = dict(headers or {})
    data = raw_body
    if body is not None:
        data = json.dumps(body).encode()
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    if tok is not None:
        h["Authorization"] = "Bearer " + tok
    req = urllib.request.Request(node.url + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def route_labels():
    """The route templates of routes.cc: what the matrix must cover."""
    with open(ROUTES_CC) as f:
        text = f.read()
    return set(re.findall(r'RouteDef\{Route::\w+, "([^"]+)"', text))


NS = "/v1/tenants/%(t)s/namespaces/n"
S = NS + "/streams/s"
G = S + "/groups/g/shards/0"

# (method, path template, body, route label). Bodies are valid: without authorization each
# call would succeed or at least reach the catalog.
TENANT_CALLS = [
    ("GET", "/v1/tenants/%(t)s", None, "/v1/tenants/{t}"),
    ("DELETE", "/v1/tenants/%(t)s", None, "/v1/tenants/{t}"),
    ("GET", "/v1/tenants/%(t)s/namespaces", None, "/v1/tenants/{t}/namespaces"),
    ("POST", "/v1/tenants/%(t)s/namespaces", {"name": "evil"}, "/v1/tenants/{t}/namespaces"),
    ("GET", NS, None, "{ns}"),
    ("DELETE", NS, None, "{ns}"),
    ("GET", NS + "/caches", None, "{ns}/caches"),
    ("POST", NS + "/caches", {"name": "evil"}, "{ns}/caches"),
    ("GET", NS + "/caches/c", None, "{ns}/caches/{c}"),
    ("DELETE", NS + "/caches/c", None, "{ns}/caches/{c}"),
    ("GET", NS + "/caches/c/keys", None, "{ns}/caches/{c}/keys"),
    ("GET", NS + "/caches/c/keys/k", None, "{ns}/caches/{c}/keys/{k}"),
    ("PUT", NS + "/caches/c/keys/k", "evil", "{ns}/caches/{c}/keys/{k}"),
    ("DELETE", NS + "/caches/c/keys/k", None, "{ns}/caches/{c}/keys/{k}"),
    ("GET", NS + "/counters", None, "{ns}/counters"),
    ("POST", NS + "/counters", {"name": "evil"}, "{ns}/counters"),
    ("GET", NS + "/counters/c", None, "{ns}/counters/{c}"),
    ("DELETE", NS + "/counters/c", None, "{ns}/counters/{c}"),
    ("GET", NS + "/counters/c/keys/k", None, "{ns}/counters/{c}/keys/{k}"),
    ("POST", NS + "/counters/c/keys/k/add", {"delta": 666}, "{ns}/counters/{c}/keys/{k}/add"),
    ("GET", NS + "/streams", None, "{ns}/streams"),
    ("POST", NS + "/streams", {"name": "evil"}, "{ns}/streams"),
    ("GET", S, None, "{ns}/streams/{s}"),
    ("DELETE", S, None, "{ns}/streams/{s}"),
    ("POST", S + "/records", {"records": [{"value": "evil"}]}, "{ns}/streams/{s}/records"),
    ("GET", S + "/shards", None, "{ns}/streams/{s}/shards"),
    ("GET", S + "/shards/0/records?offset=0", None, "{ns}/streams/{s}/shards/{n}/records"),
    ("GET", S + "/shards/0/subscribe?offset=0", None, "{ns}/streams/{s}/shards/{n}/subscribe"),
    ("POST", S + "/shards/0/leader", {"broker": 1}, "{ns}/streams/{s}/shards/{n}/leader"),
    ("POST", S + "/shards/0/elect", {"preferred": True}, "{ns}/streams/{s}/shards/{n}/elect"),
    ("POST", S + "/shards/0/reassign", {"replicas": [1]}, "{ns}/streams/{s}/shards/{n}/reassign"),
    ("GET", S + "/groups", None, "{ns}/streams/{s}/groups"),
    ("GET", S + "/groups/g", None, "{ns}/streams/{s}/groups/{g}"),
    ("GET", G + "/records", None, "{ns}/streams/{s}/groups/{g}/shards/{n}/records"),
    ("GET", G + "/subscribe", None, "{ns}/streams/{s}/groups/{g}/shards/{n}/subscribe"),
    ("POST", G + "/ack", {"offsets": [0]}, "{ns}/streams/{s}/groups/{g}/shards/{n}/ack"),
    ("POST", G + "/nack", {"offsets": [1]}, "{ns}/streams/{s}/groups/{g}/shards/{n}/nack"),
    ("GET", G + "/dead-letters", None, "{ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters"),
    ("POST", G + "/dead-letters/replay", {"from": 0, "to": 1},
     "{ns}/streams/{s}/groups/{g}/shards/{n}/dead-letters/replay"),
]
# Routes no tenant token may use (admin only, or metrics).
ADMIN_CALLS = [
    ("GET", "/metrics", None, "/metrics"),
    ("GET", "/v1/features", None, "/v1/features"),
    ("POST", "/v1/features/replicated_shards/finalize", {}, "/v1/features/{f}/finalize"),
    ("GET", "/v1/brokers", None, "/v1/brokers"),
    ("POST", "/v1/brokers/1/drain", {}, "/v1/brokers/{id}/drain"),
    ("GET", "/v1/tombstones", None, "/v1/tombstones"),
    ("GET", "/v1/metadata/members", None, "/v1/metadata/members"),
    ("POST", "/v1/metadata/members", {"id": 9, "address": "127.0.0.1:1"}, "/v1/metadata/members"),
    ("DELETE", "/v1/metadata/members/9", None, "/v1/metadata/members/{id}"),
    ("GET", "/v1/tenants", None, "/v1/tenants"),
    ("POST", "/v1/tenants", {"name": "evil"}, "/v1/tenants"),
]
# Routes any valid token may read, and the open ones.
ANY_TOKEN = [("GET", "/v1/cluster", "/v1/cluster"), ("GET", "/openapi.yaml", "/openapi.yaml")]
OPEN = [("GET", "/healthz", "/healthz"), ("GET", "/readyz", "/readyz")]


class AuthNode(unittest.TestCase):
    """One node, auth on; the catalog of two tenants ta and tb."""

    @classmethod
    def setUpClass(cls):
        cls.tok = {k: token(k) for k in
                   ("admin", "metrics", "ta-admin", "ta-prod", "ta-cons", "tb-admin", "tb-prod", "tb-cons")}
        cls.node = Node()
        cls.tokens_file = os.path.join(cls.node.workdir, "tokens")
        cls.write_tokens(cls.base_tokens())
        cls.node.extra.update({"auth.enabled": "true", "auth.tokens_file": cls.tokens_file})
        cls.node.token = cls.tok["admin"]
        cls.node.start()
        for t in ("ta", "tb"):
            cls.node.create_stream("s", shards=1, tenant=t, ns="n")
            cls.node.request("POST", NS % {"t": t} + "/caches", {"name": "c"})
            cls.node.request("POST", NS % {"t": t} + "/counters", {"name": "c"})
            cls.node.publish_binary("s", [(None, b"%s-%d" % (t.encode(), i)) for i in range(3)], tenant=t, ns="n")
            # The group exists once it has fetched.
            cls.node.request("GET", G % {"t": t} + "/records?max=1")

    @classmethod
    def tearDownClass(cls):
        scanned(cls.node)()

    @classmethod
    def base_tokens(cls):
        t = cls.tok
        return ("# test tokens\n" + line(t["admin"], "root", "admin") + line(t["metrics"], "scraper", "metrics") +
                "".join(line(t["%s-admin" % x], "%s-admin" % x, "tenant-admin:%s" % x) +
                        line(t["%s-prod" % x], "%s-prod" % x, "produce:%s" % x) +
                        line(t["%s-cons" % x], "%s-cons" % x, "consume:%s/n/s" % x) for x in ("ta", "tb")))

    @classmethod
    def write_tokens(cls, text):
        tmp = cls.tokens_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, cls.tokens_file)

    def snapshot(self, t):
        """What an admin sees of tenant t: catalog and data."""
        n = self.node
        out = {"tenants": sorted(x["name"] for x in n.request("GET", "/v1/tenants")["tenants"])}
        out["namespaces"] = n.request("GET", "/v1/tenants/%s/namespaces" % t)
        out["streams"] = n.request("GET", NS % {"t": t} + "/streams")
        out["caches"] = n.request("GET", NS % {"t": t} + "/caches")
        out["counters"] = n.request("GET", NS % {"t": t} + "/counters")
        out["cache_keys"] = n.request("GET", NS % {"t": t} + "/caches/c/keys")
        out["cache_k"] = n.request("GET", NS % {"t": t} + "/caches/c/keys/k", raw=True)
        out["counter_k"] = n.request("GET", NS % {"t": t} + "/counters/c/keys/k")
        out["records"] = n.fetch_all("s", 0, tenant=t, ns="n")
        out["group"] = n.request("GET", S % {"t": t} + "/groups/g")
        shards = n.request("GET", S % {"t": t} + "/shards")["shards"]
        out["shards"] = [(s["shard"], s["leader"], s.get("replicas")) for s in shards]
        return out

    # --- the matrix -----------------------------------------------------------------
    def test_matrix_covers_every_route(self):
        covered = {c[3] for c in TENANT_CALLS + ADMIN_CALLS} | {c[2] for c in ANY_TOKEN + OPEN}
        self.assertEqual(route_labels() - covered, set(), "routes.cc has routes the matrix does not call")

    def test_cross_tenant_calls_are_refused_and_change_nothing(self):
        before = {t: self.snapshot(t) for t in ("ta", "tb")}
        refused = 0
        for me, other in (("ta", "tb"), ("tb", "ta")):
            for role in ("admin", "prod", "cons"):
                tok = self.tok["%s-%s" % (me, role)]
                for method, path, body, _ in TENANT_CALLS:
                    st, hdr, payload = call(self.node, method, path % {"t": other}, body, tok=tok)
                    self.assertEqual(st, 403, "%s-%s %s %s: %s" % (me, role, method, path % {"t": other}, payload))
                    p = json.loads(payload)
                    self.assertEqual(p["code"], "forbidden")
                    self.assertEqual(hdr["Content-Type"], "application/problem+json")
                    refused += 1
                for method, path, body, _ in ADMIN_CALLS:
                    st, _, payload = call(self.node, method, path, body, tok=tok)
                    self.assertEqual(st, 403, "%s-%s %s %s: %s" % (me, role, method, path, payload))
                    refused += 1
                # WebSocket subscriptions are refused before the upgrade.
                for sub in (S + "/shards/0/subscribe?offset=0", G + "/subscribe"):
                    self.assertEqual(self.ws_status(sub % {"t": other}, tok), 403)
        self.assertEqual(refused, 2 * 3 * (len(TENANT_CALLS) + len(ADMIN_CALLS)))
        after = {t: self.snapshot(t) for t in ("ta", "tb")}
        self.assertEqual(before, after)

    def test_metrics_token_may_only_scrape(self):
        st, _, body = call(self.node, "GET", "/metrics", tok=self.tok["metrics"])
        self.assertEqual(st, 200)
        self.assertIn(b"sluice_http_requests_total", body)
        for method, path, body, _ in TENANT_CALLS + ADMIN_CALLS[1:]:
            st, _, payload = call(self.node, method, path % {"t": "ta"}, body, tok=self.tok["metrics"])
            self.assertEqual(st, 403, "%s %s: %s" % (method, path, payload))

    def test_own_tenant_roles(self):
        ta = {"t": "ta"}
        ok = lambda st: 200 <= st < 300
        # produce may publish and read the stream, not fetch; consume the reverse.
        st, _, b = call(self.node, "POST", S % ta + "/records", {"records": [{"value": "p"}]}, tok=self.tok["ta-prod"])
        self.assertTrue(ok(st), b)
        st, _, _ = call(self.node, "GET", S % ta + "/shards/0/records?offset=0", tok=self.tok["ta-prod"])
        self.assertEqual(st, 403)
        st, _, b = call(self.node, "GET", S % ta + "/shards/0/records?offset=0", tok=self.tok["ta-cons"])
        self.assertTrue(ok(st), b)
        st, _, b = call(self.node, "GET", S % ta, tok=self.tok["ta-cons"])
        self.assertTrue(ok(st), b)
        st, _, _ = call(self.node, "POST", S % ta + "/records", {"records": [{"value": "c"}]}, tok=self.tok["ta-cons"])
        self.assertEqual(st, 403)
        # consume:ta/n/s covers that stream only: not the namespace's list.
        st, _, _ = call(self.node, "GET", NS % ta + "/streams", tok=self.tok["ta-cons"])
        self.assertEqual(st, 403)
        st, _, _ = call(self.node, "GET", NS % ta + "/streams", tok=self.tok["ta-prod"])
        self.assertEqual(st, 200)
        # A cache's keys: produce writes them, consume reads them, neither does the other.
        st, _, b = call(self.node, "PUT", NS % ta + "/caches/c/keys/own", raw_body=b"v", tok=self.tok["ta-prod"])
        self.assertEqual(st, 200, b)  # produce:ta covers the tenant's caches
        st, _, b = call(self.node, "PUT", NS % ta + "/caches/c/keys/own", raw_body=b"v", tok=self.tok["ta-cons"])
        self.assertEqual(st, 403, b)  # consume never writes
        st, _, b = call(self.node, "GET", NS % ta + "/caches/c/keys/own", tok=self.tok["ta-cons"])
        self.assertEqual(st, 403, b)  # consume:ta/n/s names a stream, not the cache
        st, _, b = call(self.node, "DELETE", NS % ta + "/caches/c/keys/own", tok=self.tok["ta-prod"])
        self.assertEqual(st, 200, b)
        # A counter's keys likewise: produce adds, consume reads.
        st, _, b = call(self.node, "POST", NS % ta + "/counters/c/keys/own/add", {"delta": 2}, tok=self.tok["ta-prod"])
        self.assertEqual(st, 200, b)
        st, _, b = call(self.node, "POST", NS % ta + "/counters/c/keys/own/add", {"delta": 2}, tok=self.tok["ta-cons"])
        self.assertEqual(st, 403, b)
        st, _, b = call(self.node, "GET", NS % ta + "/counters/c/keys/own", tok=self.tok["ta-cons"])
        self.assertEqual(st, 403, b)  # consume:ta/n/s names a stream, not the counter
        st, _, b = call(self.node, "GET", NS % ta + "/counters/c/keys/own", tok=self.tok["ta-prod"])
        self.assertEqual(st, 403, b)  # produce never reads
        # tenant-admin creates and deletes inside its tenant, not the tenant itself.
        st, _, b = call(self.node, "POST", NS % ta + "/streams", {"name": "tmp"}, tok=self.tok["ta-admin"])
        self.assertEqual(st, 201, b)
        st, _, b = call(self.node, "DELETE", NS % ta + "/streams/tmp", tok=self.tok["ta-admin"])
        self.assertEqual(st, 200, b)
        st, _, _ = call(self.node, "DELETE", "/v1/tenants/ta", tok=self.tok["ta-admin"])
        self.assertEqual(st, 403)
        st, _, _ = call(self.node, "POST", S % ta + "/shards/0/leader", {"broker": 1}, tok=self.tok["ta-admin"])
        self.assertEqual(st, 403)
        for method, path, _ in ANY_TOKEN:
            st, _, _ = call(self.node, method, path, tok=self.tok["ta-cons"])
            self.assertEqual(st, 200, path)
        # WebSocket subscribe with a consume token: the upgrade is accepted.
        self.assertEqual(self.ws_status(S % ta + "/shards/0/subscribe?offset=0", self.tok["ta-cons"]), 101)

    def test_forbidden_does_not_reveal_existence(self):
        tok = self.tok["ta-cons"]
        for existing, missing in ((S % {"t": "tb"}, NS % {"t": "tb"} + "/streams/nosuch"),
                                  (S % {"t": "tb"}, "/v1/tenants/nosuch/namespaces/n/streams/s"),
                                  (NS % {"t": "tb"}, "/v1/tenants/tb/namespaces/nosuch")):
            for method in ("GET", "DELETE"):
                a = call(self.node, method, existing, tok=tok)
                b = call(self.node, method, missing, tok=tok)
                self.assertEqual((a[0], b[0]), (403, 403))
                pa, pb = json.loads(a[2]), json.loads(b[2])
                self.assertEqual(pa.pop("instance"), existing)
                self.assertEqual(pb.pop("instance"), missing)
                self.assertEqual(json.dumps(pa), json.dumps(pb))
                drop = ("Content-Length", "Date")
                self.assertEqual([h for h in a[1].items() if h[0] not in drop],
                                 [h for h in b[1].items() if h[0] not in drop])

    # --- 401 --------------------------------------------------------------------------
    def test_unauthenticated_calls_get_401(self):
        cases = [
            ("no header", {}),
            ("wrong scheme", {"Authorization": "Basic " + self.tok["admin"]}),
            ("unknown token", {"Authorization": "Bearer tok-unknown-0123456789"}),
            ("a known token's hash", {"Authorization": "Bearer " + hashlib.sha256(self.tok["admin"].encode()).hexdigest()}),
            ("no token", {"Authorization": "Bearer"}),
            ("two words", {"Authorization": "Bearer a b"}),
            ("empty header", {"Authorization": ""}),
        ]
        before = self.snapshot("ta")
        for what, headers in cases:
            for method, path, body, _ in TENANT_CALLS + ADMIN_CALLS:
                st, hdr, payload = call(self.node, method, path % {"t": "ta"}, body, headers=headers)
                self.assertEqual(st, 401, "%s: %s %s: %s" % (what, method, path, payload))
                self.assertEqual(json.loads(payload)["code"], "unauthorized")
                self.assertTrue(hdr["WWW-Authenticate"].startswith("Bearer"), hdr)
            for method, path, _ in ANY_TOKEN:
                self.assertEqual(call(self.node, method, path, headers=headers)[0], 401, what)
            # An unknown route tells an unauthenticated client nothing either.
            self.assertEqual(call(self.node, "GET", "/v1/nosuch", headers=headers)[0], 401, what)
            self.assertEqual(self.ws_status(S % {"t": "ta"} + "/shards/0/subscribe", None, headers), 401)
        for method, path, _ in OPEN:
            self.assertEqual(call(self.node, method, path)[0], 200, path)
        self.assertEqual(self.snapshot("ta"), before)

    def head_only(self, method, path, headers):
        """Sends a request's header announcing a 1 MB body, and none of the body: the
        status line of the answer, read within 20 s (under http.request_timeout_ms, 30 s)."""
        with socket.create_connection(("127.0.0.1", self.node.http_port), timeout=20) as s:
            s.sendall(("%s %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
                       "Content-Length: 1000000\r\n%s\r\n" %
                       (method, path, "".join("%s: %s\r\n" % kv for kv in headers.items()))).encode())
            got = b""
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            return got.split(b"\r\n")[0].decode()

    def test_a_refused_request_is_answered_before_its_body_is_read(self):
        # Without this a client with no token could make the server read http.max_body_bytes
        # per connection, and "Expect: 100-continue" was answered "go on".
        path = S % {"t": "ta"} + "/records"
        for what, headers, status in [
            ("no token", {}, "401"),
            ("no token, expecting 100-continue", {"Expect": "100-continue"}, "401"),
            ("unknown token", {"Authorization": "Bearer tok-unknown-0123456789"}, "401"),
            ("another tenant's producer", {"Authorization": "Bearer " + self.tok["tb-prod"]}, "403"),
            ("a consumer may not publish", {"Authorization": "Bearer " + self.tok["ta-cons"],
                                            "Expect": "100-continue"}, "403"),
            ("a producer is told to go on", {"Authorization": "Bearer " + self.tok["ta-prod"],
                                             "Expect": "100-continue"}, "100"),
        ]:
            line_ = self.head_only("POST", path, headers)
            self.assertRegex(line_, r"^HTTP/1\.1 %s " % status, what)

    def ws_status(self, path, tok, headers=None):
        """The HTTP status of a WebSocket upgrade: 101 if accepted."""
        h = dict(headers or {})
        if tok:
            h["Authorization"] = "Bearer " + tok

        async def go():
            try:
                async with websockets.connect("ws://127.0.0.1:%d%s" % (self.node.http_port, path),
                                              extra_headers=h, open_timeout=30):
                    return 101
            except websockets.exceptions.InvalidStatusCode as e:
                return e.status_code
        return asyncio.run(go())

    # --- SIGHUP ----------------------------------------------------------------------
    def test_sighup_reloads_and_a_bad_file_keeps_the_old_tokens(self):
        new = token("new")
        path = "/v1/cluster"
        self.assertEqual(call(self.node, "GET", path, tok=new)[0], 401)
        self.write_tokens(self.base_tokens() + line(new, "newbie", "consume:ta"))
        self.hup_and_wait("reload: 9 tokens")
        self.assertEqual(call(self.node, "GET", path, tok=new)[0], 200)
        self.assertEqual(call(self.node, "GET", S % {"t": "ta"} + "/shards/0/records?offset=0", tok=new)[0], 200)
        # Malformed: the previous tokens stay, the error names the line.
        self.write_tokens(self.base_tokens() + line(new, "newbie", "consume:ta") + "sha256:zz bad line\n")
        self.hup_and_wait("reload failed, the previous state stays in force")
        self.assertIn("line 11", self.node.current_log())
        self.assertEqual(call(self.node, "GET", path, tok=new)[0], 200)
        self.assertEqual(call(self.node, "GET", path, tok=self.tok["admin"])[0], 200)
        # Removed: 401.
        self.write_tokens(self.base_tokens())
        self.hup_and_wait("reload: 8 tokens", occurrence=2)
        self.assertEqual(call(self.node, "GET", path, tok=new)[0], 401)
        self.assertEqual(call(self.node, "GET", path, tok=self.tok["admin"])[0], 200)
        self.assertIsNone(self.node.proc.poll())

    def hup_and_wait(self, text, occurrence=1):
        before = self.node.current_log().count("SIGHUP: reloading")
        self.node.proc.send_signal(signal.SIGHUP)
        poll(lambda: self.node.current_log().count("SIGHUP: reloading") > before and
             self.node.current_log().count(text) >= occurrence and
             self.node.current_log().count("SIGHUP: reloading") ==
             self.node.current_log().count("reload done") + self.node.current_log().count("reload failed"),
             "the reload to be logged (%s)" % text)

    def test_a_revoked_token_ends_its_subscription(self):
        """Regression (review): a WebSocket subscription was authorized once, at the upgrade,
        and streamed on after its token was revoked by a reload. It ends with 1008 at its next
        read once the token is gone."""
        tok = token("revocable")
        base = self.base_tokens()
        n = self.node
        self.write_tokens(base + line(tok, "revocable", "consume:tb/n/s"))
        self.hup_and_wait("reload: 9 tokens", occurrence=n.current_log().count("reload: 9 tokens") + 1)
        url = "ws://127.0.0.1:%d%s/shards/0/subscribe?offset=0&credit=1" % (n.http_port, S % {"t": "tb"})

        async def run():
            async with websockets.connect(url, extra_headers={"Authorization": "Bearer " + tok},
                                          open_timeout=30) as ws:
                first = json.loads(await asyncio.wait_for(ws.recv(), 60))
                self.assertEqual(len(first["records"]), 1)
                self.write_tokens(base)
                await asyncio.to_thread(self.hup_and_wait, "reload: 8 tokens",
                                        n.current_log().count("reload: 8 tokens") + 1)
                await ws.send(json.dumps({"credit": 10}))
                with self.assertRaises(websockets.ConnectionClosed) as closed:
                    while True:
                        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                        self.assertNotIn("records", frame, "records after the token was revoked")
                return closed.exception
        try:
            closed = asyncio.run(run())
        finally:
            self.write_tokens(base)
            n.proc.send_signal(signal.SIGHUP)
        self.assertEqual(closed.code, 1008, closed)
        self.assertIn("revoked", closed.reason)

    # --- CLI ---------------------------------------------------------------------------
    def cli(self, *args, env=None, stdin=None):
        e = dict(os.environ)
        e.pop("SLUICE_TOKEN", None)
        e.update(env or {})
        return subprocess.run([SLUICE_CLI, "--url", self.node.url] + list(args), env=e, input=stdin,
                              capture_output=True, text=True, timeout=60)

    def test_cli_with_token_option_and_env(self):
        r = self.cli("stream", "get", "ta/n/s")
        self.assertEqual(r.returncode, 1)
        self.assertIn("401 unauthorized", r.stderr)
        r = self.cli("--token", self.tok["ta-prod"], "stream", "get", "ta/n/s")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["name"], "s")
        r = self.cli("stream", "get", "ta/n/s", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("stream", "get", "tb/n/s", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 1)
        self.assertIn("403 forbidden", r.stderr)
        # --token wins over SLUICE_TOKEN.
        r = self.cli("--token", self.tok["tb-cons"], "stream", "get", "tb/n/s", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("publish", "ta/n/s", env={"SLUICE_TOKEN": self.tok["ta-prod"]}, stdin="cli-1\ncli-2\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("consume", "ta/n/s", "--max", "100", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cli-2", r.stdout)
        # --follow subscribes over a WebSocket with the token.
        r = self.cli("consume", "ta/n/s", "--follow", "--max", "2", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("consume", "tb/n/s", "--follow", "--max", "2", env={"SLUICE_TOKEN": self.tok["ta-cons"]})
        self.assertEqual(r.returncode, 1)
        self.assertIn("403", r.stderr)
        for args in (["--help"], ["token", "hash", "--help"]):
            r = self.cli(*args)
            self.assertEqual(r.returncode, 0)
            self.assertIn("SLUICE_TOKEN" if args == ["--help"] else "--roles", r.stdout)
        self.assertIn("--token", self.cli("--help").stdout)

    def test_cli_token_hash_lines_work_after_sighup(self):
        r = self.cli("token", "hash", "--roles", "consume:tb/n,produce:tb/n/s", "--name", "cli-made")
        self.assertEqual(r.returncode, 0, r.stderr)
        tok, entry = r.stdout.splitlines()
        SECRETS.append(tok)
        self.assertEqual(len(tok), 64)
        self.assertEqual(entry, "sha256:%s cli-made consume:tb/n produce:tb/n/s" % hashlib.sha256(tok.encode()).hexdigest())
        mine = token("given")
        r = self.cli("token", "hash", "--roles", "admin", "-", stdin=mine + "\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        h = hashlib.sha256(mine.encode()).hexdigest()
        self.assertEqual(r.stdout.splitlines(), ["sha256:%s token-%s admin" % (h, h[:8])])
        for bad in (["token", "hash"], ["token", "hash", "--roles", "root"], ["token", "hash", "--roles", "produce"],
                    ["token", "hash", "--roles", "admin", "--name", "a b"], ["token", "nope"]):
            r = self.cli(*bad)
            self.assertEqual(r.returncode, 2, bad)
        try:
            self.write_tokens(self.base_tokens() + entry + "\n")
            self.hup_and_wait("reload: 9 tokens", occurrence=self.node.current_log().count("reload: 9 tokens") + 1)
            r = self.cli("consume", "tb/n/s", "--max", "100", env={"SLUICE_TOKEN": tok})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("tb-0", r.stdout)
        finally:
            self.write_tokens(self.base_tokens())
            self.node.proc.send_signal(signal.SIGHUP)


class InsecureStart(unittest.TestCase):
    @staticmethod
    def no_tokens(n):
        """Auth on with a tokens file that grants nothing."""
        path = os.path.join(n.workdir, "tokens")
        with open(path, "w") as f:
            f.write("# nobody\n")
        n.extra["auth.tokens_file"] = path

    def test_non_loopback_without_auth_is_refused(self):
        n = Node(extra={"http.address": "0.0.0.0"})
        self.addCleanup(scanned(n))
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("without authentication", out)
        self.assertIn("auth.allow_insecure", out)
        self.assertFalse(os.path.exists(os.path.join(n.data_dir, "meta.properties")), "a refused start leaves nothing")

    def test_allow_insecure_starts_with_a_warning(self):
        # Bound to every address, but the test talks to loopback only.
        n = Node(extra={"http.address": "0.0.0.0", "auth.allow_insecure": "true"})
        self.addCleanup(scanned(n))
        n.start()
        self.assertIn("auth.enabled = false", n.current_log())
        self.assertIn("WARN", [l for l in n.current_log().splitlines() if "auth.enabled = false" in l][0])

    def test_auth_with_a_reachable_peer_transport_without_tls_is_refused(self):
        """Regression (review): the peer transport's only check without TLS is the cluster
        id, which any broker sends first; a client that reaches it makes Node calls past
        every token. With auth on, a non-loopback transport.address needs transport.tls.*."""
        n = Node(extra={"auth.enabled": "true", "transport.address": "0.0.0.0:0"})
        self.addCleanup(scanned(n))
        self.no_tokens(n)
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("peer transport on 0.0.0.0:0 without TLS", out)
        self.assertIn("transport.tls.cert_file", out)
        # Accepting the risk (bound to every address; the test talks to loopback only).
        n.extra["auth.allow_insecure"] = "true"
        n.start()
        self.assertEqual(call(n, "GET", "/v1/cluster")[0], 401)

    def test_enabled_without_tokens_file_or_with_a_bad_one_is_refused(self):
        n = Node(extra={"auth.enabled": "true"})
        self.addCleanup(scanned(n))
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("auth.tokens_file", out)
        bad = os.path.join(n.workdir, "tokens")
        with open(bad, "w") as f:
            f.write("sha256:00 x admin\n")
        n.extra["auth.tokens_file"] = bad
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("line 1", out)

    def test_metrics_open(self):
        n = Node(extra={"auth.enabled": "true", "auth.metrics_open": "true"})
        self.addCleanup(scanned(n))
        self.no_tokens(n)
        n.start()
        self.assertEqual(call(n, "GET", "/metrics")[0], 200)
        self.assertEqual(call(n, "GET", "/v1/cluster")[0], 401)


@unittest.skipUnless(PG_URL, "SLUICE_TEST_PG_URL is not set: run through ctest (fixture sluice_pg)")
class ForwardingWithAuth(unittest.TestCase):
    """Two brokers on one PostgreSQL catalog, auth on both: calls for broker B's shard made
    through broker A with a tenant's tokens are forwarded over the peer transport."""

    def test_forwarded_calls_work_with_tokens(self):
        import random
        prod, cons, adm = token("fwd-prod"), token("fwd-cons"), token("fwd-admin")
        # Under ctest the URL carries the fixture's password role's password (scram): it must
        # appear in no log and not in --print-config.
        m = re.search(r"password=(\S+)", PG_URL)
        pw = m.group(1) if m else None
        if pw:
            SECRETS.append(pw)
        schema = "it_%08x" % random.getrandbits(32)
        nodes = [Node(), Node()]
        tokens = os.path.join(nodes[0].workdir, "tokens")
        with open(tokens, "w") as f:
            f.write(line(adm, "root", "admin") + line(prod, "p", "produce:t/n") + line(cons, "c", "consume:t"))
        peers = "1=127.0.0.1:%d,2=127.0.0.1:%d" % (nodes[0].peer_port, nodes[1].peer_port)
        for i, n in enumerate(nodes):
            n.extra.update({"node.id": str(i + 1), "node.roles": "broker", "metadata.backend": "postgres",
                            "metadata.postgres.url": PG_URL,
                            "metadata.postgres.schema": schema, "broker.session_timeout_ms": "3000",
                            "transport.peers": peers, "auth.enabled": "true", "auth.tokens_file": tokens})
            n.token = adm
            self.addCleanup(scanned(n))
        a, b = nodes
        a.start()
        b.start()
        poll(lambda: len(a.request("GET", "/v1/brokers")["brokers"]) == 2, "both brokers registered")
        a.create_stream("fwd", shards=2)

        def shards(node):
            st, _, body = call(node, "GET", node.ns_path() + "/streams/fwd/shards", tok=adm)
            return json.loads(body)["shards"] if st == 200 else None
        got = poll(lambda: shards(a) if shards(b) else None, "both brokers to apply the create")
        shard_b = {s["leader"]: s["shard"] for s in got}[2]
        base = a.ns_path() + "/streams/fwd"
        st, _, body = call(a, "POST", base + "/records", {"records": [{"value": "x", "shard": shard_b}]}, tok=prod)
        self.assertEqual(st, 200, body)
        st, _, body = call(a, "GET", base + "/shards/%d/records?offset=0" % shard_b, tok=cons)
        self.assertEqual(st, 200, body)
        self.assertEqual([r["value"] for r in json.loads(body)["records"]], ["x"])
        st, _, body = call(a, "GET", base + "/groups/g/shards/%d/records" % shard_b, tok=cons)
        self.assertEqual(st, 200, body)
        # Refusals happen at the broker the client called, before anything is forwarded.
        self.assertEqual(call(a, "POST", base + "/records", {"records": [{"value": "y", "shard": shard_b}]}, tok=cons)[0], 403)
        self.assertEqual(call(a, "GET", base + "/shards/%d/records?offset=0" % shard_b)[0], 401)
        st, _, body = call(b, "GET", base + "/shards/%d/records?offset=0" % shard_b, tok=adm)
        self.assertEqual([r["value"] for r in json.loads(body)["records"]], ["x"])
        # --print-config shows the URL without its password.
        out = subprocess.run(a.args() + ["--print-config"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        if pw:
            self.assertIn("password=***", out.stdout)
            self.assertNotIn(pw, out.stdout + out.stderr)
        # A WebSocket subscription through A to B's shard, with the consume token.
        async def first_record():
            async with websockets.connect("ws://127.0.0.1:%d%s/shards/%d/subscribe?offset=0&format=json" % (
                    a.http_port, base, shard_b), extra_headers={"Authorization": "Bearer " + cons},
                    open_timeout=30) as ws:
                await ws.send(json.dumps({"credit": 10}))
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if msg.get("records"):
                        return msg["records"][0]["value"]
        self.assertEqual(asyncio.run(first_record()), "x")


if __name__ == "__main__":
    unittest.main()
