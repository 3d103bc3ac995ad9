"""Reassignment and broker drains (issue 11; docs/replication.md "Reassignment"): four real
brokers, on one PostgreSQL (Reassign) and on three raft-meta controllers (RaftReassign).

A shard is reassigned under ack=quorum load, with the new broker partitioned at first so
the progress it waits on is visible; then a broker is drained. Nothing acknowledged is
lost (tools/check_replicas.py over the final replicas), leadership moves into the new
list, and the old replicas' directories are removed. Bad reassignment and drain requests
get their documented errors and change nothing."""
import os
import subprocess
import threading
import time
import unittest

import test_replication as base
import test_replication_raft as raft
from harness import HttpError, poll


class ReassignTests:
    BROKERS = (1, 2, 3, 4)

    def start_load(self, acked, errors, via):
        """ack=quorum publishes to shard 0 through the brokers `via` in turn (each forwards to
        the leader), bounded in count and time; returns (thread, stop event)."""
        stop = threading.Event()

        def load():
            i = 0
            deadline = time.monotonic() + 240
            while not stop.is_set() and time.monotonic() < deadline and i < 20000:
                node = self.nodes[via[i % len(via)]]
                try:
                    for res in self.publish(node, ["v-%d" % i], timeout=30):
                        acked[res["offset"]] = "v-%d" % i
                except (HttpError, OSError) as e:
                    errors.append(str(e)[:200])
                    time.sleep(0.05)
                i += 1
        t = threading.Thread(target=load)
        t.start()
        return t, stop

    def more(self, acked, n):
        before = len(acked)
        poll(lambda: len(acked) >= before + n, "%d more acknowledged publishes" % n)

    def test_reassign_under_load_then_drain_a_broker(self):
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        info = self.shard(self.nodes[1])
        old = info["replicas"]
        self.wait_in_sync(old)
        outside = next(i for i in self.BROKERS if i not in old)
        # Replace the shard's leader (its first replica) by the broker outside: leadership
        # must move before the old leader leaves.
        leader = info["leader"]
        target = [outside] + [b for b in old if b != leader]
        acked, errors = {}, []
        # Through the old replicas only: the new broker is cut off for a while below.
        t, stop = self.start_load(acked, errors, old)
        try:
            self.more(acked, 50)
            # The new broker cannot fetch yet: the move waits, and says what it waits for.
            self.partition(outside)
            path = self.nodes[1].ns_path() + "/streams/r/shards/0/reassign"
            st, body = self.nodes[2].request("POST", path, {"replicas": target}, raw=True)
            self.assertEqual(st, 202, body)

            seen = []

            def waiting():
                s = self.shard(self.nodes[3])
                seen[:] = [s]
                return s.get("target_replicas") == target and \
                    "waiting for broker [%d] to catch up" % outside in s.get("reassignment", "")
            try:
                poll(waiting, "the listing to show the move waiting for broker %d" % outside)
            except AssertionError:
                raise AssertionError("the listing shows %s" % seen)
            self.assertEqual(self.shard(self.nodes[1])["replicas"], old + [outside])
            self.more(acked, 50)
            # A second reassignment while one runs is refused.
            with self.assertRaises(HttpError) as e:
                self.nodes[1].request("POST", path, {"replicas": old})
            self.assertEqual((e.exception.status, e.exception.problem.get("code")), (409, "conflict"))
            self.assertIn("already moving", e.exception.problem.get("detail"))
            self.heal()

            def done():
                s = self.shard(self.nodes[1])
                return s["replicas"] == target and "target_replicas" not in s and s["leader"] in target
            poll(done, "the reassignment to finish", timeout=120)
            info = self.shard(self.nodes[1])
            self.assertEqual(info["leader"], outside, "the old leader left; the target's first replica leads")
            self.assertEqual(sorted(m["broker"] for m in info["in_sync"]), sorted(target))
            poll(lambda: not os.path.exists(self.shard_dir(leader, info)),
                 "broker %d to remove its copy" % leader)
            self.more(acked, 50)

            # Drain a broker that holds a copy: the CLI starts the move and waits for it.
            drained = target[1]
            p = subprocess.run([base.SLUICE_CLI, "--url", self.nodes[drained].url, "broker", "drain",
                                str(drained), "--timeout-s", "180"], capture_output=True, text=True, timeout=240)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("1 move(s) started, 0 refused", p.stdout)
            self.assertIn("t/n/r shard 0: done: replicas", p.stdout)
            info = self.shard(self.nodes[drained])  # the node the CLI watched
            self.assertNotIn(drained, info["replicas"])
            self.assertEqual(len(info["replicas"]), 3)
            poll(lambda: not os.path.exists(self.shard_dir(drained, info)),
                 "broker %d to remove its copy" % drained)
            self.more(acked, 50)
        finally:
            stop.set()
            t.join(timeout=120)
        self.assertFalse(t.is_alive())
        # A drained broker holds nothing more to move.
        p = subprocess.run([base.SLUICE_CLI, "--url", self.nodes[1].url, "broker", "drain", str(drained)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("0 move(s) started, 0 refused", p.stdout)
        self.wait_caught_up()
        self.check_replicas(acked)
        self.check_one_leader_per_epoch()

    def test_a_copy_on_a_broker_gone_for_good_moves_and_goes_when_it_returns(self):
        """A follower's broker dies for good: its copy is reassigned to the broker outside,
        from the live leader; when the dead broker comes back anyway, it removes its copy at
        start (it is no longer in the list)."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        info = self.shard(self.nodes[1])
        old = info["replicas"]
        self.wait_in_sync(old)
        leader = info["leader"]
        gone = next(b for b in old if b != leader)
        outside = next(i for i in self.BROKERS if i not in old)
        acked = {}
        vals = ["a-%d" % i for i in range(20)]
        for res, v in zip(self.publish(self.nodes[leader], vals), vals):
            acked[res["offset"]] = v
        self.nodes[gone].kill()
        n = self.nodes[leader]
        poll(lambda: not next(b for b in n.request("GET", "/v1/brokers")["brokers"] if b["id"] == gone)["live"],
             "broker %d to be seen dead" % gone)
        target = [outside if b == gone else b for b in old]
        st, body = n.request("POST", n.ns_path() + "/streams/r/shards/0/reassign", {"replicas": target}, raw=True)
        self.assertEqual(st, 202, body)
        poll(lambda: (lambda s: s["replicas"] == target and "target_replicas" not in s)(self.shard(n)),
             "the move off dead broker %d to finish" % gone, timeout=120)
        vals = ["b-%d" % i for i in range(20)]
        for res, v in zip(self.publish(n, vals), vals):
            acked[res["offset"]] = v
        self.assertTrue(os.path.exists(self.shard_dir(gone, info)), "the dead broker's copy is still on its disk")
        self.nodes[gone].start()
        poll(lambda: not os.path.exists(self.shard_dir(gone, info)), "broker %d to remove its old copy" % gone)
        self.wait_caught_up()
        self.check_replicas(acked)
        self.check_one_leader_per_epoch()

    def test_bad_reassignments_are_refused_and_change_nothing(self):
        self.start_all()
        n = self.nodes[1]
        n.create_stream("r", shards=2, replication_factor=3, min_insync=2)
        n.create_stream("single", shards=1)
        poll(lambda: all(self.shard(x) for x in self.nodes.values()), "every broker to apply the create")
        before = self.shard(n)
        self.wait_in_sync(before["replicas"])
        path = n.ns_path() + "/streams/r/shards/0/reassign"
        outside = next(i for i in self.BROKERS if i not in before["replicas"])
        keep = before["replicas"][1:]
        cases = [
            ({"replicas": keep + [99]}, 400, "invalid_argument", "not registered"),
            ({"replicas": keep + [keep[0]]}, 400, "invalid_argument", "twice"),
            ({"replicas": keep}, 400, "invalid_argument", "replication factor 3"),
            ({"replicas": keep + [0]}, 400, "invalid_argument", None),
            ({"replicas": before["replicas"]}, 409, "conflict", "already"),
            ({"replicas": keep + [outside], "force": True}, 400, "unknown_field", None),
            ({"replicas": "1,2,3"}, 400, "invalid_argument", None),
            ({}, 400, "invalid_argument", "required"),
        ]
        for body, status, code, detail in cases:
            with self.assertRaises(HttpError, msg=str(body)) as e:
                n.request("POST", path, body)
            self.assertEqual((e.exception.status, e.exception.problem.get("code")), (status, code), body)
            if detail:
                self.assertIn(detail, e.exception.problem.get("detail"), body)
        st, _ = n.request("POST", path, b"{not json", raw=True)
        self.assertEqual(st, 400)
        with self.assertRaises(HttpError) as e:
            n.request("POST", n.ns_path() + "/streams/r/shards/7/reassign", {"replicas": keep + [outside]})
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(HttpError) as e:
            n.request("POST", n.ns_path() + "/streams/single/shards/0/reassign", {"replicas": [outside]})
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (400, "invalid_argument"))
        self.assertIn("replication factor 1", e.exception.problem.get("detail"))
        # A dead broker cannot take a copy: stop the one outside and wait until it is not live.
        self.nodes[outside].kill()
        poll(lambda: not next(b for b in n.request("GET", "/v1/brokers")["brokers"] if b["id"] == outside)["live"],
             "broker %d to be seen dead" % outside)
        with self.assertRaises(HttpError) as e:
            n.request("POST", path, {"replicas": keep + [outside]})
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (409, "conflict"))
        self.assertIn("not live", e.exception.problem.get("detail"))
        # Drains: unknown broker, not a number, broker 0.
        for b, status in (("99", 404), ("abc", 400), ("0", 400)):
            with self.assertRaises(HttpError, msg=b) as e:
                n.request("POST", "/v1/brokers/%s/drain" % b, {})
            self.assertEqual(e.exception.status, status, b)
        with self.assertRaises(HttpError) as e:
            n.request("POST", "/v1/brokers/%d/drain" % outside, {"force": True})
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (400, "unknown_field"))
        st, _ = n.request("POST", "/v1/brokers/%d/drain" % outside, b"[1", raw=True)
        self.assertEqual(st, 400)
        # The CLI: --replicas is required; a drain that cannot move an RF 1 copy exits 1.
        p = subprocess.run([base.SLUICE_CLI, "--url", n.url, "stream", "reassign", "t/n/r", "--shard", "0"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        single = self.shard(n, "single")["leader"]
        p = subprocess.run([base.SLUICE_CLI, "--url", n.url, "broker", "drain", str(single), "--no-wait"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("t/n/single shard 0: NOT MOVED: ", p.stdout)
        self.assertIn("replication factor 1", p.stdout)
        # Nothing changed on shard 0 but what the drain started (it may move shards of r too).
        after = self.shard(n)
        if single not in before["replicas"]:
            self.assertEqual((after["replicas"], after["version"]), (before["replicas"], before["version"]))


class Reassign(ReassignTests, base.Replication):
    pass


class RaftReassign(ReassignTests, raft.RaftReplication):
    pass


def load_tests(loader, tests, pattern):
    """Only the tests of this file (the replication tests it builds on run in their own)."""
    names = [n for n in dir(ReassignTests) if n.startswith("test_")]
    return unittest.TestSuite([cls(n) for cls in (Reassign, RaftReassign) for n in names])


if __name__ == "__main__":
    unittest.main()
