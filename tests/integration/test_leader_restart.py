"""A restarted leader never continues its epoch (docs/replication.md "Shipping before the
leader's sync"): a leader ships records to its followers before its own fdatasync is done,
so after a power cut its followers may hold a tail that its own disk lost. Were it to lead
on in the same epoch, it would write other records at those offsets and the epoch history
could not tell the copies apart. So a replica that led epoch E before it was reopened asks
the catalog for E + 1 before it leads again.

Three real brokers, on one PostgreSQL (LeaderRestart) and on three raft-meta controllers
(RaftLeaderRestart); the session timeout is long, so the controller does not elect another
leader while the killed one is down."""
import unittest

import test_replication as base
import test_replication_raft as raft
from harness import poll


class LeaderRestartTests:
    def test_a_restarted_leader_leads_again_only_in_a_new_epoch(self):
        # On raft-meta the controllers decide liveness with their own session timeout: a
        # broker-only setting would let them fail the killed leader over while it restarts.
        for n in list(self.nodes.values()) + getattr(self, "controllers", []):
            n.extra["broker.session_timeout_ms"] = "60000"
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        leader = self.leader()
        self.wait_serving(leader)
        epoch = self.shard(self.nodes[leader])["leader_epoch"]
        acked = {}
        for i in range(20):
            for res in self.publish(self.nodes[leader], ["before-%d" % i]):
                acked[res["offset"]] = "before-%d" % i

        self.nodes[leader].kill()
        self.nodes[leader].start()
        # The same broker leads again (its session never ended), in the next epoch.
        poll(lambda: (lambda s: s and s["leader"] == leader and s["leader_epoch"] == epoch + 1
                      and s.get("leading"))(self.shard(self.nodes[leader])),
             "broker %d to lead again in epoch %d" % (leader, epoch + 1))
        with open(self.nodes[leader].log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        self.assertIn("led epoch %d before this restart; asking the catalog for epoch %d" % (epoch, epoch + 1),
                      log)
        self.check_one_leader_per_epoch()

        for i in range(20):
            for res in self.publish(self.nodes[leader], ["after-%d" % i]):
                acked[res["offset"]] = "after-%d" % i
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.check_replicas(acked)


class LeaderRestart(LeaderRestartTests, base.Replication):
    pass


class RaftLeaderRestart(LeaderRestartTests, raft.RaftReplication):
    pass


def load_tests(loader, tests, pattern):
    """Only the tests of this file (the replication tests it builds on run in their own)."""
    names = [n for n in dir(LeaderRestartTests) if n.startswith("test_")]
    return unittest.TestSuite([cls(n) for cls in (LeaderRestart, RaftLeaderRestart) for n in names])


if __name__ == "__main__":
    unittest.main()
