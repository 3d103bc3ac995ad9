"""Forwarding to the shard's leader (issue 10, "Clients"; docs/replication.md "Forwarding"):
two brokers on one PostgreSQL catalog, a stream with one shard on each; every call for the
shard broker B leads is made through broker A. Needs the `sluice_pg` ctest fixture."""
import asyncio
import json
import os
import random
import threading
import time
import unittest
import urllib.error
import urllib.request

import websockets

from harness import Node, poll

PG_URL = os.environ.get("SLUICE_TEST_PG_URL", "")


def call(node, method, path, body=None, timeout=30):
    """(status, headers, parsed body or None) without raising on HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(node.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, headers, payload = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, headers, payload = e.code, e.headers, e.read()
    return status, headers, (json.loads(payload) if payload else None)


class Forwarding(unittest.TestCase):
    def setUp(self):
        self.assertTrue(PG_URL, "SLUICE_TEST_PG_URL is not set: run through ctest (fixture sluice_pg)")
        schema = "it_%08x" % random.getrandbits(32)
        cfg = {"node.roles": "broker", "metadata.backend": "postgres",
               "metadata.postgres.url": PG_URL, "metadata.postgres.schema": schema,
               "broker.session_timeout_ms": "3000"}
        self.a = Node(extra=dict(cfg, **{"node.id": "1"}))
        self.b = Node(extra=dict(cfg, **{"node.id": "2"}))
        # A static peer directory as well (it wins over the catalog's peer addresses): the
        # test does not depend on when each broker learns the other's registration.
        peers = "1=127.0.0.1:%d,2=127.0.0.1:%d" % (self.a.peer_port, self.b.peer_port)
        for n in (self.a, self.b):
            n.extra["transport.peers"] = peers
        self.addCleanup(self.a.cleanup)
        self.addCleanup(self.b.cleanup)
        self.a.start()
        self.b.start()
        poll(lambda: len(self.a.request("GET", "/v1/brokers")["brokers"]) == 2, "both brokers registered")
        self.a.create_stream("fwd", shards=2)
        shards = poll(lambda: self._shards(self.a, "fwd") if self._shards(self.b, "fwd") else None,
                      "both brokers to apply the create")
        leaders = {s["leader"]: s["shard"] for s in shards}
        self.assertEqual(sorted(leaders), [1, 2], "one shard placed on each broker")
        self.shard_a, self.shard_b = leaders[1], leaders[2]
        self.b_address = "127.0.0.1:%d" % self.b.http_port
        self.base = self.a.ns_path() + "/streams/fwd"

    def _shards(self, node, stream):
        st, _, body = call(node, "GET", node.ns_path() + "/streams/%s/shards" % stream)
        return body["shards"] if st == 200 else None

    def publish(self, node, shard, values):
        return call(node, "POST", self.base + "/records",
                    {"records": [{"value": v, "shard": shard} for v in values]})

    def fetch(self, node, shard, offset, wait_ms=0, timeout=30):
        q = "%s/shards/%d/records?offset=%s" % (self.base, shard, offset)
        if wait_ms:
            q += "&wait_ms=%d" % wait_ms
        return call(node, "GET", q, timeout=timeout)

    def test_calls_for_the_other_brokers_shard_are_forwarded_to_it(self):
        # Publish through A to B's shard: B's offsets, and B named as the leader.
        st, hdr, body = self.publish(self.a, self.shard_b, ["v0", "v1"])
        self.assertEqual(st, 200, body)
        self.assertEqual(body["results"], [{"shard": self.shard_b, "offset": 0},
                                           {"shard": self.shard_b, "offset": 1}])
        self.assertEqual(hdr.get("Sluice-Leader"), self.b_address)
        # A's own shard names A.
        st, hdr, _ = self.publish(self.a, self.shard_a, ["mine"])
        self.assertEqual(st, 200)
        self.assertEqual(hdr.get("Sluice-Leader"), "127.0.0.1:%d" % self.a.http_port)
        # Key-partitioned across both shards in one request: both land.
        st, _, body = call(self.a, "POST", self.base + "/records",
                           {"records": [{"key": "k%d" % i, "value": "x"} for i in range(16)]})
        self.assertEqual(st, 200, body)
        self.assertEqual({r["shard"] for r in body["results"]}, {0, 1})

        # Fetch through A equals fetch on B.
        st, hdr, via_a = self.fetch(self.a, self.shard_b, 0)
        self.assertEqual(st, 200, via_a)
        self.assertEqual(hdr.get("Sluice-Leader"), self.b_address)
        _, _, on_b = self.fetch(self.b, self.shard_b, 0)
        self.assertEqual(via_a, on_b)
        self.assertEqual([r["value"] for r in via_a["records"]][:2], ["v0", "v1"])
        end = via_a["high_watermark"]
        st, _, latest = self.fetch(self.a, self.shard_b, "latest")
        self.assertEqual((st, latest["next_offset"]), (200, end))

        # A long poll through A returns as soon as a record arrives on B.
        result = {}

        def long_poll():
            t0 = time.monotonic()
            result["answer"] = self.fetch(self.a, self.shard_b, end, wait_ms=20000, timeout=40)
            result["took"] = time.monotonic() - t0

        t = threading.Thread(target=long_poll)
        t.start()
        st, _, _ = self.publish(self.b, self.shard_b, ["late"])
        self.assertEqual(st, 200)
        t.join(40)
        self.assertFalse(t.is_alive(), "the long poll did not return")
        st, _, got = result["answer"]
        self.assertEqual(st, 200, got)
        self.assertEqual([r["value"] for r in got["records"]], ["late"])
        self.assertLess(result["took"], 15, "answered by the record, not by the wait running out")

        # A consumer group through A: fetch, ack, position.
        g = self.base + "/groups/workers"
        st, hdr, d = call(self.a, "GET", g + "/shards/%d/records?max=2" % self.shard_b)
        self.assertEqual(st, 200, d)
        self.assertEqual(hdr.get("Sluice-Leader"), self.b_address)
        self.assertEqual([(r["offset"], r["value"]) for r in d["records"]], [(0, "v0"), (1, "v1")])
        st, hdr, _ = call(self.a, "POST", g + "/shards/%d/ack" % self.shard_b, {"offsets": [0, 1]})
        self.assertEqual(st, 204)
        self.assertEqual(hdr.get("Sluice-Leader"), self.b_address)
        st, _, pos = call(self.a, "GET", g)
        self.assertEqual(st, 200, pos)
        self.assertEqual(pos["positions"][self.shard_b]["committed"], 2)
        st, _, pos_b = call(self.b, "GET", g)
        self.assertEqual(pos_b["positions"][self.shard_b]["committed"], 2)

    def test_subscriptions_through_a_read_bs_shard(self):
        """WebSocket subscribe (docs/api.md "Subscribe") on A for B's shard: A reads and waits
        through B; a group subscription's acks reach B's group."""
        self.assertEqual(self.publish(self.a, self.shard_b, ["w0", "w1"])[0], 200)
        ws_base = "ws://127.0.0.1:%d%s" % (self.a.http_port, self.base)

        async def run():
            async def take(ws, n):
                got = []
                while len(got) < n:
                    got += json.loads(await asyncio.wait_for(ws.recv(), 60))["records"]
                return got
            async with websockets.connect("%s/shards/%d/subscribe?offset=0" % (ws_base, self.shard_b)) as ws:
                got = await take(ws, 2)
                # Caught up: the wait is B's; a record published on B arrives.
                await asyncio.to_thread(self.publish, self.b, self.shard_b, ["w2"])
                got += await take(ws, 1)
            async with websockets.connect("%s/groups/g/shards/%d/subscribe" % (ws_base, self.shard_b)) as ws:
                delivered = await take(ws, 3)
                await ws.send(json.dumps({"ack": [r["offset"] for r in delivered]}))
                acked = json.loads(await asyncio.wait_for(ws.recv(), 60))
            return got, delivered, acked
        got, delivered, acked = asyncio.run(run())
        self.assertEqual([(r["offset"], r["value"]) for r in got], [(0, "w0"), (1, "w1"), (2, "w2")])
        self.assertEqual([r["value"] for r in delivered], ["w0", "w1", "w2"])
        self.assertEqual(acked, {"acked": [0, 1, 2]})
        st, _, body = call(self.b, "GET", self.base + "/groups/g")
        self.assertEqual(st, 200)
        self.assertEqual(body["positions"][self.shard_b]["committed"], 3)

    def test_bad_input_answers_as_on_the_leader(self):
        for path in (self.base + "/shards/7/records?offset=0",
                     self.a.ns_path() + "/streams/nope/shards/%d/records?offset=0" % self.shard_b,
                     self.base + "/shards/%d/records?offset=banana" % self.shard_b):
            st_a, _, body_a = call(self.a, "GET", path)
            st_b, _, body_b = call(self.b, "GET", path)
            self.assertEqual((st_a, body_a["code"]), (st_b, body_b["code"]), path)
            self.assertIn(st_a, (400, 404))
        # A group that never consumed the shard, and a bad body: the same answer either way.
        for group, body in (("nobody", {"offsets": [0]}), ("g", {"offsets": []})):
            path = self.base + "/groups/%s/shards/%d/ack" % (group, self.shard_b)
            st_a, _, body_a = call(self.a, "POST", path, body)
            st_b, _, body_b = call(self.b, "POST", path, body)
            self.assertEqual((st_a, body_a["code"]), (st_b, body_b["code"]), path)
            self.assertIn(st_a, (400, 404))

    def test_the_leader_down_is_503_unavailable_at_once(self):
        st, _, _ = self.publish(self.a, self.shard_b, ["before"])
        self.assertEqual(st, 200)
        self.b.kill()  # SIGKILL
        t0 = time.monotonic()
        st, hdr, body = self.fetch(self.a, self.shard_b, 0)
        self.assertEqual((st, body["code"]), (503, "unavailable"), body)
        self.assertEqual(hdr.get("Sluice-Leader"), self.b_address)
        st, _, body = self.publish(self.a, self.shard_b, ["after"])
        self.assertEqual((st, body["code"]), (503, "unavailable"), body)
        st, _, body = call(self.a, "GET", self.base + "/groups/g/shards/%d/records" % self.shard_b)
        self.assertEqual((st, body["code"]), (503, "unavailable"), body)
        self.assertLess(time.monotonic() - t0, 10, "failed fast, not after a hang")
        # A's own shard is still served.
        st, _, _ = self.publish(self.a, self.shard_a, ["still"])
        self.assertEqual(st, 200)

    def test_shutdowns_with_a_forwarded_long_poll_pending(self):
        result = {}

        def long_poll():
            t0 = time.monotonic()
            result["answer"] = self.fetch(self.a, self.shard_b, 0, wait_ms=30000, timeout=60)
            result["took"] = time.monotonic() - t0

        t = threading.Thread(target=long_poll)
        t.start()
        # B stops cleanly while A waits on it: A's poll ends (503, or empty if it had not
        # yet asked), well before its 30 s.
        self.assertEqual(self.b.stop(), 0)
        t.join(40)
        self.assertFalse(t.is_alive(), "the long poll did not return")
        st, _, body = result["answer"]
        self.assertIn(st, (200, 503), body)
        self.assertLess(result["took"], 25)
        # A stops cleanly too (its forwarding handlers and waits wind down).
        self.assertEqual(self.a.stop(), 0)


if __name__ == "__main__":
    unittest.main()
