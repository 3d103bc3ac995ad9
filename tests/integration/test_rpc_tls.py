"""TLS with mutual authentication on the controller RPC (issue 14; docs/security.md
"Controller RPC"): a controller and brokers as real processes on loopback, certificates made
at run time by `openssl` (test_certs.py).

- a broker with a certificate of the cluster's CA registers and serves a stream end to end;
- a broker with a certificate of another CA, and a broker without TLS, never reach the
  catalog: both sides say why, and the controller serves on;
- a plain-text client on the TLS port gets no RPC answer and is closed;
- only some of the three keys set refuses the start;
- SIGHUP rotates the certificates on a controller and a broker (a two-step CA rotation), and
  a file that does not load keeps the previous ones.

Nothing sleeps to wait for a condition: every wait polls with a generous deadline.
"""
import json
import os
import signal
import socket
import ssl
import struct
import tempfile
import unittest

from harness import Node, poll, record_value
from test_certs import CA
from test_raft_group import FAST as RAFT_FAST, Group

FAST = {"metadata.timeout_ms": "5000", "metadata.start_timeout_ms": "60000",
        "broker.session_timeout_ms": "5000"}


def tls_keys(ca, cert_key):
    cert, key = cert_key
    return {"metadata.rpc_tls.cert_file": cert, "metadata.rpc_tls.key_file": key,
            "metadata.rpc_tls.ca_file": ca.cert}


def log_has(node, text):
    with open(node.log_path, "rb") as f:
        return text.encode() in f.read()


def log_count(node, text):
    with open(node.log_path, "rb") as f:
        return f.read().count(text.encode())


def rpc_over_tls(port, ca_file, cert_key=None):
    """An RPC hello over TLS from Python's ssl: what came back before the controller closed
    (b"" when it refused). Under TLS 1.3 the client's handshake can finish before the server
    has checked the client's certificate, so only the answer tells."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.check_hostname = False
    if cert_key:
        ctx.load_cert_chain(*cert_key)
    body = json.dumps({"cluster_id": "", "method": "hello"}).encode()
    got = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(struct.pack("<I", len(body)) + body)
                # One answer frame, or the end of the connection.
                while len(got) < 4 or len(got) < 4 + struct.unpack("<I", got[:4])[0]:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    return got


class RpcTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-rpc-tls-")
        cls.ca = CA(cls.dir, "cluster")
        cls.other = CA(cls.dir, "other")

    def setUp(self):
        self.cleanups = []

    def tearDown(self):
        for c in reversed(self.cleanups):
            c()

    def node(self, **extra):
        n = Node(extra=dict(FAST, **extra))
        self.cleanups.append(n.cleanup)
        return n

    def controller(self):
        c = self.node(**dict({"node.id": "1", "node.roles": "controller"},
                             **tls_keys(self.ca, self.ca.issue("controller"))))
        return c.start()

    def test_a_broker_of_the_cluster_ca_serves_and_others_are_refused(self):
        c = self.controller()
        rpc = "127.0.0.1:%d" % c.rpc_port
        self.assertTrue(log_has(c, "(TLS, client certificates required)"))
        b = self.node(**dict({"node.id": "2", "node.roles": "broker", "metadata.controllers": rpc},
                             **tls_keys(self.ca, self.ca.issue("broker-2")))).start()
        poll(lambda: any(x["id"] == 2 for x in c.request("GET", "/v1/brokers")["brokers"]),
             "broker 2 to register over TLS")
        b.create_stream("s", shards=1)
        b.publish_binary("s", [(b"k", b"over tls")])
        self.assertEqual([record_value(r) for r in b.fetch_all("s", 0)], [b"over tls"])

        # Another CA's certificate: the handshake fails both ways, saying why.
        rogue = self.node(**dict({"node.id": "3", "node.roles": "broker", "metadata.controllers": rpc,
                                  "metadata.start_timeout_ms": "3000"},
                                 **tls_keys(self.other, self.other.issue("broker-3"))))
        code, out = rogue.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("TLS handshake failed", out)
        poll(lambda: log_has(c, "refused a connection from 127.0.0.1:"), "the controller to log it")
        # No TLS at all.
        plain = self.node(**{"node.id": "4", "node.roles": "broker", "metadata.controllers": rpc,
                             "metadata.start_timeout_ms": "3000"})
        code, out = plain.start_expect_failure()
        self.assertNotEqual(code, 0)
        ids = {x["id"] for x in c.request("GET", "/v1/brokers")["brokers"]}
        self.assertEqual(ids, {2}, "neither refused broker registered")
        # The controller and the good broker serve on.
        b.publish_binary("s", [(b"k", b"after")])
        self.assertEqual([record_value(r) for r in b.fetch_all("s", 0)], [b"over tls", b"after"])

    def test_a_plain_text_client_on_the_tls_port_gets_no_answer(self):
        c = self.controller()
        body = json.dumps({"cluster_id": "", "method": "hello"}).encode()
        with socket.create_connection(("127.0.0.1", c.rpc_port), timeout=30) as s:
            s.sendall(struct.pack("<I", len(body)) + body)
            got = b""
            while True:
                try:
                    chunk = s.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
        # Whatever came back (a TLS alert at most) is not an RPC answer.
        self.assertNotIn(b"cluster_id", got)
        poll(lambda: log_has(c, "TLS handshake failed"), "the controller to log the refusal")
        self.assertEqual(c.request("GET", "/v1/cluster")["node_id"], 1)

    def test_the_controller_checks_client_certificates_itself(self):
        # These clients trust the cluster's CA, so any refusal is the controller's own.
        c = self.controller()
        good = rpc_over_tls(c.rpc_port, self.ca.cert, self.ca.issue("client-good"))
        self.assertIn(b"cluster_id", good, "a client of the cluster's CA gets an answer")
        before = log_count(c, "TLS handshake failed")
        self.assertEqual(rpc_over_tls(c.rpc_port, self.ca.cert), b"", "no client certificate")
        poll(lambda: log_count(c, "TLS handshake failed") > before, "the controller to refuse it")
        self.assertTrue(log_has(c, "certificate"), "the refusal names the certificate")
        before = log_count(c, "TLS handshake failed")
        self.assertEqual(rpc_over_tls(c.rpc_port, self.ca.cert, self.other.issue("client-other")), b"",
                         "a client certificate of another CA")
        poll(lambda: log_count(c, "TLS handshake failed") > before, "the controller to refuse it")
        self.assertTrue(log_has(c, "certificate verify failed"))

    def test_three_controllers_join_and_forward_over_tls(self):
        keys = tls_keys(self.ca, self.ca.issue("member"))
        g = Group(extra=keys)
        self.cleanups.append(g.cleanup)
        g.start(broker=False)  # polls until all three members answer with the same state
        ms = g.members()["members"]
        self.assertEqual(len(ms), 3)
        self.assertFalse([m for m in ms if m["role"] == "unreachable"], ms)
        # A write sent to a follower is forwarded to the leader over the TLS RPC.
        follower = next(n for n in g.nodes if n is not g.leader())
        follower.request("POST", "/v1/tenants", {"name": "via-follower"})
        self.assertIn("via-follower", {t["name"] for t in g.leader().request("GET", "/v1/tenants")["tenants"]})
        for n in g.nodes:
            self.assertFalse(log_has(n, "refused a connection"), "no plain-text RPC between members")

    def test_sighup_rotates_the_rpc_certificates(self):
        # Each node reads fixed paths; a rotation replaces the files (atomically, as an
        # operator's `mv` does) and sends SIGHUP.
        new = CA(self.dir, "rotated")
        third = CA(self.dir, "third")

        def install(node_dir, ca_files, cert_key):
            os.makedirs(node_dir, exist_ok=True)
            paths = {k: os.path.join(node_dir, k) for k in ("ca.pem", "node.crt", "node.key")}
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            bundle = b"".join(read(f) for f in ca_files)
            for name, data in (("ca.pem", bundle), ("node.crt", read(cert_key[0])),
                               ("node.key", read(cert_key[1]))):
                tmp = paths[name] + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.chmod(tmp, 0o600)
                os.replace(tmp, paths[name])
            return {"metadata.rpc_tls.cert_file": paths["node.crt"],
                    "metadata.rpc_tls.key_file": paths["node.key"],
                    "metadata.rpc_tls.ca_file": paths["ca.pem"]}

        cdir, bdir = os.path.join(self.dir, "rot-c"), os.path.join(self.dir, "rot-b")
        ckeys = install(cdir, [self.ca.cert], self.ca.issue("rot-controller"))
        c = self.node(**dict({"node.id": "1", "node.roles": "controller"}, **ckeys)).start()
        rpc = "127.0.0.1:%d" % c.rpc_port
        bkeys = install(bdir, [self.ca.cert], self.ca.issue("rot-broker"))
        b = self.node(**dict({"node.id": "2", "node.roles": "broker", "metadata.controllers": rpc},
                             **bkeys)).start()
        b.create_stream("rot", shards=1)
        b.publish_binary("rot", [(b"k", b"v0")])
        new_client = new.issue("rot-client")
        self.assertEqual(rpc_over_tls(c.rpc_port, new.cert, new_client), b"",
                         "before the rotation the controller neither presents nor trusts the new CA")

        def hup_all(expect):
            for n in (c, b):
                before = log_count(n, expect)
                n.proc.send_signal(signal.SIGHUP)
                poll(lambda: log_count(n, expect) > before, "node %s to log %r" % (n, expect))

        # Step 1: every node trusts both CAs; the certificates stay the old CA's.
        install(cdir, [self.ca.cert, new.cert], self.ca.issue("rot-controller"))
        install(bdir, [self.ca.cert, new.cert], self.ca.issue("rot-broker"))
        hup_all("reload done")
        # Step 2: every node presents a certificate of the new CA.
        install(cdir, [self.ca.cert, new.cert], new.issue("rot-controller-2"))
        install(bdir, [self.ca.cert, new.cert], new.issue("rot-broker-2"))
        hup_all("reload done")
        self.assertTrue(log_has(c, "controller RPC certificates reloaded"))
        # A client that trusts only the new CA, with a certificate of it, gets an answer now:
        # the controller presents the new pair and trusts the new CA, without a restart.
        self.assertIn(b"cluster_id", rpc_over_tls(c.rpc_port, new.cert, new_client))
        self.assertEqual(rpc_over_tls(c.rpc_port, new.cert, third.issue("rot-third")), b"",
                         "a third CA's client is still refused")
        # The broker serves on through the rotation (its open connection keeps its session).
        b.create_stream("rot2", shards=1)
        b.publish_binary("rot2", [(b"k", b"v1")])
        self.assertEqual([record_value(r) for r in b.fetch_all("rot", 0)], [b"v0"])
        self.assertEqual([record_value(r) for r in b.fetch_all("rot2", 0)], [b"v1"])

        # A certificate file that does not load: the reload fails, saying so, and the
        # previous pair stays in force.
        with open(os.path.join(cdir, "node.crt"), "wb") as f:
            f.write(b"-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
        before = log_count(c, "reload failed, the previous state stays in force")
        c.proc.send_signal(signal.SIGHUP)
        poll(lambda: log_count(c, "reload failed, the previous state stays in force") > before,
             "the controller to log the failed reload")
        self.assertIn(b"cluster_id", rpc_over_tls(c.rpc_port, new.cert, new_client))
        self.assertIsNone(c.proc.poll(), "the controller serves on")
        b.publish_binary("rot2", [(b"k", b"v2")])
        self.assertEqual([record_value(r) for r in b.fetch_all("rot2", 0)], [b"v1", b"v2"])

    def test_only_some_keys_refuse_the_start(self):
        cert, key = self.ca.issue("half")
        n = self.node(**{"node.roles": "controller", "metadata.rpc_tls.cert_file": cert,
                         "metadata.rpc_tls.key_file": key})
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("go together", out)


if __name__ == "__main__":
    unittest.main()
