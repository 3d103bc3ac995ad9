"""Issue 13: background compaction of cache and counter keyed logs (docs/architecture.md
"Cache compaction") against real processes.

With a small cache.compact_min_bytes and small segments, a few keys overwritten many times
make the backing shard's leader restate the live keys at the log end and delete the old
segments: the log start moves up and the bytes on disk shrink, while every key keeps its
last value, revision and expiry, a compare-and-set with a revision from before still wins,
and deleted keys stay deleted -- also after a SIGKILL, on the followers of a replicated
cache (which trim too), through a broker whose index predates the trim, and for counters
(sums and idempotent retries unchanged)."""
import os
import re
import time
import unittest

from harness import Node, poll
from cache_support import CacheClient, create_cache

COMPACT = {"cache.compact_min_bytes": "262144", "storage.segment_bytes": "65536", "cache.shards": "1",
           "cache.compact_sweep_ms": "1000"}
VALUE_BYTES = 2048
# Bounds of every write loop (count and time).
MAX_WRITES = 4000
WRITE_BUDGET_S = 240


def backing_segments(node, prefix="__cache."):
    """{segment base: bytes} of every backing shard whose stream name starts with `prefix`
    in the node's data directory."""
    out = {}
    for root, _, files in os.walk(node.data_dir):
        # <shard dir>/log only: a replicated shard's <shard dir>/group-log/log is another log.
        if prefix not in root or os.path.basename(root) != "log" or "group-log" in root:
            continue
        for f in files:
            m = re.fullmatch(r"(\d{20})\.log", f)
            if m:
                try:
                    out[int(m.group(1))] = os.path.getsize(os.path.join(root, f))
                except FileNotFoundError:
                    pass  # a compaction deleted it after the listing: it is not there
    return out


def metric(node, name):
    st, body = node.request("GET", "/metrics", raw=True)
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError("no %s in /metrics" % name)


def churn(write, keys, until, what):
    """Overwrites `keys` round robin with write(key, i) until until() holds; bounded."""
    deadline = time.monotonic() + WRITE_BUDGET_S
    for i in range(MAX_WRITES):
        if i % 50 == 0 and until():
            return i
        if time.monotonic() > deadline:
            break
        write(keys[i % len(keys)], i)
    if until():
        return MAX_WRITES
    raise AssertionError("no compaction after %d writes: %s" % (MAX_WRITES, what()))


class CompactionSingle(unittest.TestCase):
    def setUp(self):
        self.node = Node(extra=COMPACT)
        self.node.start()

    def tearDown(self):
        self.node.cleanup()

    def test_overwrites_are_compacted_and_every_answer_survives(self):
        n = self.node
        create_cache(n)
        c = CacheClient(n)
        st, stable = c.put("stable", b"s0")
        self.assertEqual(st, 200, stable)
        st, ttl = c.put("ttl", b"t0", ttl_ms=3600000)
        self.assertEqual(st, 200, ttl)
        self.assertEqual(c.put("gone", b"g")[0], 200)
        self.assertEqual(c.delete("gone")[0], 200)
        hot = ["hot%d" % i for i in range(4)]
        first = dict(backing_segments(n))
        self.assertIn(0, first)

        def write(k, i):
            st, r = c.put(k, (b"%06d" % i) * (VALUE_BYTES // 6))
            self.assertEqual(st, 200, r)

        churn(write, hot, lambda: min(backing_segments(n) or {0: 0}) > 0 and metric(n, "sluice_cache_compactions_total") >= 1,
              lambda: sorted(backing_segments(n).items()))
        segs = backing_segments(n)
        self.assertGreater(min(segs), 0, "the log start moved up")
        self.assertGreaterEqual(metric(n, "sluice_cache_compacted_bytes_total"), 65536)
        # Far less on disk than was written (~MAX churn x 2 KiB): the live state is ~10 KiB.
        self.assertLess(sum(segs.values()), 1 << 20, segs)

        keys = ["stable", "ttl", "gone"] + hot
        before = {k: c.get(k) for k in keys}
        self.assertEqual(before["stable"][:3], (200, b"s0", stable["revision"]))
        self.assertEqual(before["ttl"][:4], (200, b"t0", ttl["revision"], ttl["expires_at_ms"]))
        self.assertEqual(before["gone"][0], 404)
        self.assertEqual(sorted(c.keys()), sorted(["stable", "ttl"] + hot))

        # SIGKILL: the index is rebuilt from the new log start with the same answers.
        n.kill()
        n.start()
        after = {k: c.get(k) for k in keys}
        for k in keys:
            if before[k][0] == 200:
                self.assertEqual(after[k], before[k], k)
            else:
                self.assertEqual((after[k][0], after[k][1]["code"]), (404, "not_found"), k)
        # A compare-and-set with the revision from before the compaction still wins; a
        # stale one still loses.
        st, r = c.put("stable", b"s1", if_revision=stable["revision"])
        self.assertEqual(st, 200, r)
        st, r = c.put("ttl", b"t1", if_revision=ttl["revision"] - 1 if ttl["revision"] > 1 else 999999)
        self.assertEqual(st, 409, r)
        st, r = c.put("gone", b"again", if_revision=0)
        self.assertEqual(st, 200, r)

    def test_a_cache_with_no_live_key_is_trimmed_too(self):
        """Regression (review): a shard with no live key (a lock table: put, then delete)
        was never trimmed, so its log grew for ever, and, still over the threshold, it was
        rolled and walked again every second. It is trimmed below its newest write. The log
        is filled with compaction held back, so no compaction sees a key live mid-churn."""
        self.node.cleanup()
        n = self.node = Node(extra=dict(COMPACT, **{"metadata.bootstrap_hold_back": "cache_compaction"}))
        n.start()
        create_cache(n)
        c = CacheClient(n)
        for i in range(300):  # ~600 KiB written, nothing live at the end: over compact_min_bytes
            st, r = c.put("lock%d" % (i % 4), b"x" * VALUE_BYTES)
            self.assertEqual(st, 200, r)
            st, r = c.delete("lock%d" % (i % 4))
            self.assertEqual(st, 200, r)
        self.assertEqual(c.keys(), [])
        self.assertEqual(min(backing_segments(n)), 0)
        n.request("POST", "/v1/features/cache_compaction/finalize")
        # Trimmed in passes (each below the newest write it saw): poll for the end state, not
        # for the first segment to go.
        poll(lambda: min(backing_segments(n) or {0: 0}) > 0 and sum(backing_segments(n).values()) < 256 << 10,
             "the backing shard with no live key to be trimmed below 256 KiB")
        # Writes go on after the trim (the writers' sequence survived it), and survive SIGKILL.
        st, r = c.put("after", b"v")
        self.assertEqual(st, 200, r)
        n.kill()
        n.start()
        self.assertEqual(c.get("after")[:2], (200, b"v"))
        self.assertEqual(c.put("after2", b"w")[0], 200)
        self.assertEqual(sorted(c.keys()), ["after", "after2"])
        self.assertEqual(c.get("lock0")[0], 404)

    def test_counter_sums_and_idempotent_retries_survive_compaction(self):
        n = self.node
        n.ensure_ns()
        base = n.ns_path() + "/counters"
        n.request("POST", base, {"name": "hits"})

        def add(key, delta, producer=None, seq=None):
            path = base + "/hits/keys/" + key + "/add"
            if producer is not None:
                path += "?producer_id=%d&sequence=%d" % (producer, seq)
            return n.request("POST", path, {"delta": delta})

        sums = {}
        seqs = {}  # per key: a producer's sequences are per (counter, key, producer)

        def write(k, i):
            seq = seqs.get(k, 0)
            r = add(k, i + 1, producer=5, seq=seq)
            seqs[k] = seq + 1
            sums[k] = sums.get(k, 0) + i + 1
            self.assertEqual(r["value"], sums[k], r)

        # Each add is ~100 bytes of window: many keys so the log grows fast enough.
        keys = ["k%d" % i for i in range(40)]
        churn(write, keys,
              lambda: min(backing_segments(n, "__counter.") or {0: 0}) > 0,
              lambda: sorted(backing_segments(n, "__counter.").items()))
        last_key = max(seqs, key=lambda k: seqs[k])
        last = seqs[last_key] - 1
        for k, v in sums.items():
            self.assertEqual(n.request("GET", base + "/hits/keys/" + k)["value"], v, k)
        dup = add(last_key, 12345, producer=5, seq=last)
        self.assertEqual(dup, {"key": last_key, "value": sums[last_key], "duplicate": True})
        n.kill()
        n.start()
        for k, v in sums.items():
            self.assertEqual(n.request("GET", base + "/hits/keys/" + k)["value"], v, k)
        dup = add(last_key, 12345, producer=5, seq=last)
        self.assertEqual(dup, {"key": last_key, "value": sums[last_key], "duplicate": True})
        self.assertEqual(add(last_key, 1, producer=5, seq=last + 1)["value"], sums[last_key] + 1)


class CompactionGate(unittest.TestCase):
    def test_nothing_is_compacted_until_the_feature_is_finalized(self):
        """An older broker would not understand restate records: with cache_compaction held
        back, a shard well past its thresholds keeps its whole log; once finalized it is
        compacted."""
        n = Node(extra=dict(COMPACT, **{"metadata.bootstrap_hold_back": "cache_compaction"}))
        try:
            n.start()
            create_cache(n)
            c = CacheClient(n)
            for i in range(600):  # ~1.2 MiB: over 4x cache.compact_min_bytes
                st, r = c.put("hot%d" % (i % 4), b"x" * VALUE_BYTES)
                self.assertEqual(st, 200, r)
            time.sleep(7)  # more than a sweep period (5 s) and a check period (1 s) -- the
            # assertion is that nothing happens, so there is no condition to poll for
            self.assertEqual(min(backing_segments(n)), 0)
            self.assertEqual(metric(n, "sluice_cache_compactions_total"), 0)
            feats = {f["name"]: f for f in n.request("GET", "/v1/features")["features"]}
            self.assertFalse(feats["cache_compaction"]["finalized"])
            self.assertEqual(feats["cache_compaction"]["required_level"], 18)
            n.request("POST", "/v1/features/cache_compaction/finalize")
            poll(lambda: min(backing_segments(n) or {0: 0}) > 0, "the backing shard to be compacted after the finalize")
            self.assertEqual(c.get("hot0")[:2], (200, b"x" * VALUE_BYTES))
        finally:
            n.cleanup()


class CompactionBrokers(unittest.TestCase):
    """One raft-meta controller and three brokers; the cache replicated on all three."""

    def setUp(self):
        self.controller = Node(extra={"node.id": "11", "node.roles": "controller", "broker.session_timeout_ms": "3000"})
        ctl = {"metadata.backend": "raft", "metadata.controllers": "127.0.0.1:%d" % self.controller.rpc_port}
        self.brokers = {i: Node(extra=dict(ctl, **COMPACT, **{
            "node.id": str(i), "node.roles": "broker", "broker.session_timeout_ms": "3000",
            "replication.max_lag_ms": "1500", "stream.default_replication_factor": "3"})) for i in (1, 2, 3)}

    def tearDown(self):
        for n in list(self.brokers.values()) + [self.controller]:
            n.cleanup()

    def test_followers_trim_and_a_stale_index_is_rebuilt(self):
        self.controller.start()
        for n in self.brokers.values():
            n.start()
        poll(lambda: len(self.controller.request("GET", "/v1/brokers")["brokers"]) == 3, "3 brokers registered")
        create_cache(self.brokers[1])
        clients = {i: CacheClient(self.brokers[i]) for i in (1, 2, 3)}
        c1 = clients[1]
        st, stable = c1.put("stable", b"s0")
        self.assertEqual(st, 200, stable)
        self.assertEqual(c1.put("gone", b"g")[0], 200)
        # Broker 3 builds its index now (it holds "gone") and is not asked again until the
        # log was trimmed past that index.
        self.assertEqual(clients[3].get("gone")[:2], (200, b"g"))
        self.assertEqual(c1.delete("gone")[0], 200)
        hot = ["hot%d" % i for i in range(4)]

        def write(k, i):
            st, r = c1.put(k, (b"%06d" % i) * (VALUE_BYTES // 6))
            self.assertEqual(st, 200, r)

        def all_trimmed():
            return all(min(backing_segments(b) or {0: 0}) > 0 for b in self.brokers.values())

        churn(write, hot, all_trimmed,
              lambda: {i: sorted(backing_segments(b)) for i, b in self.brokers.items()})
        want = {k: c1.get(k) for k in ["stable"] + hot}
        self.assertEqual(want["stable"][:3], (200, b"s0", stable["revision"]))
        for i in (3, 2):
            c = clients[i]
            st, p, _, _ = c.get("gone")
            self.assertEqual((st, p["code"]), (404, "not_found"), "broker %d kept a deleted key" % i)
            for k, v in want.items():
                self.assertEqual(c.get(k), v, "broker %d key %s" % (i, k))
        st, r = clients[2].put("stable", b"s1", if_revision=stable["revision"])
        self.assertEqual(st, 200, r)


if __name__ == "__main__":
    unittest.main()
