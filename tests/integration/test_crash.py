"""Acceptance 2: SIGKILL during a publish loop loses no acknowledged record and moves no
offset. Several seeds; each prints its seed."""
import threading
import time
import unittest

from harness import HttpError, Node, record_value, rng

SEEDS = [11, 23, 37, 41, 59, 71, 83, 97]


class CrashDurability(unittest.TestCase):
    def run_seed(self, seed):
        r = rng(seed)
        node = Node(extra={"storage.segment_bytes": str(r.choice([16384, 65536, 1 << 20]))})
        try:
            node.start()
            shards = r.choice([1, 2, 3])
            node.create_stream("crash", shards=shards)
            acked = {}  # (shard, offset) -> value
            lock = threading.Lock()
            stop = threading.Event()

            def producer(pid):
                i = 0
                while not stop.is_set():
                    batch = [(None if j % 3 else b"k%d" % j, b"p%d-%d-%d" % (pid, i, j))
                             for j in range(r.randint(1, 40) if pid == 0 else 5)]
                    i += 1
                    try:
                        res = node.publish_binary("crash", batch, ack="leader", timeout=10)
                    except (OSError, HttpError):
                        return  # the node died under us: this request was not acknowledged
                    with lock:
                        for (k, v), x in zip(batch, res):
                            acked[(x["shard"], x["offset"])] = v

            threads = [threading.Thread(target=producer, args=(p,)) for p in range(3)]
            for t in threads:
                t.start()
            # Kill at a random moment once some records are acknowledged.
            deadline = time.monotonic() + 60
            want = r.randint(50, 20000)
            while time.monotonic() < deadline:
                with lock:
                    if len(acked) >= want:
                        break
                time.sleep(0.005)
            node.kill()
            stop.set()
            for t in threads:
                t.join()
            with lock:
                snapshot = dict(acked)
            self.assertGreater(len(snapshot), 0, "nothing was acknowledged before the kill")

            node.start()
            found = {}
            for s in range(shards):
                for rec in node.fetch_all("crash", s):
                    found[(s, rec["offset"])] = record_value(rec)
            missing = [k for k in snapshot if k not in found]
            self.assertEqual(missing, [], "seed %d: acknowledged records lost: %s" % (seed, missing[:10]))
            for k, v in snapshot.items():
                self.assertEqual(found[k], v, "seed %d: record at %s changed" % (seed, k))
            # Offsets stay dense from 0: nothing was half-recovered.
            for s in range(shards):
                offs = sorted(o for (sh, o) in found if sh == s)
                self.assertEqual(offs, list(range(len(offs))))
            # The node keeps working after recovery.
            res = node.publish_binary("crash", [(None, b"after")])
            self.assertEqual(len(res), 1)
            print("seed %d: %d acknowledged, %d recovered" % (seed, len(snapshot), len(found)))
        finally:
            node.cleanup()

    def test_sigkill_during_publish_loses_no_acknowledged_record(self):
        for seed in SEEDS:
            with self.subTest(seed=seed):
                self.run_seed(seed)


if __name__ == "__main__":
    unittest.main()
