"""The replication and failover tests of test_replication.py on a raft-meta control plane:
three controllers (node ids 11-13, the controller loop runs on the Raft leader) and three
brokers (1-3) that reach them over the controller RPC. Also: the Raft leader is SIGKILLed
during a leader failover; the failover completes under the next Raft leader and no shard
ends with two leaders in one epoch.
"""
import threading
import time
import unittest

import test_replication as base
from harness import cleanup_all, Node, poll

FAST = {"raft.election_timeout_ms": "1000", "raft.heartbeat_timeout_ms": "100",
        "metadata.timeout_ms": "15000", "metadata.start_timeout_ms": "60000",
        "broker.session_timeout_ms": "3000"}


class RaftReplication(base.Replication):
    def metadata_config(self):
        first = Node(extra=dict(FAST, **{"node.id": "11", "node.roles": "controller"}))
        self.controllers = [first] + [
            Node(extra=dict(FAST, **{"node.id": str(i), "node.roles": "controller",
                                     "metadata.join": "127.0.0.1:%d" % first.rpc_port}))
            for i in (12, 13)]
        return {"metadata.backend": "raft",
                "metadata.controllers": ",".join("127.0.0.1:%d" % c.rpc_port for c in self.controllers)}

    def start_control_plane(self):
        for c in self.controllers:
            c.start()
        poll(lambda: len(self.controllers[0].request("GET", "/v1/metadata/members")["members"]) == 3,
             "three raft-meta members")

    def tearDown(self):
        super().tearDown()
        cleanup_all(self.controllers)

    def raft_leader(self):
        for c in self.controllers:
            if c.proc and c.proc.poll() is None:
                try:
                    view = c.request("GET", "/v1/metadata/members")
                except Exception:
                    continue
                if view.get("leader"):
                    return next(x for x in self.controllers if x.extra["node.id"] == str(view["leader"]))
        return None

    def test_a_killed_raft_leader_during_a_failover_leaves_one_leader_per_epoch(self):
        """The shard's leader and the Raft leader (where the controller runs) die together:
        the next Raft leader's controller finishes the failover; every epoch the shard went
        through had one leader, and every acknowledged record is there."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old_id = self.leader()
        acked = {}
        vals = ["a-%d" % i for i in range(20)]
        for res, v in zip(self.publish(self.nodes[old_id], vals), vals):
            acked[res["offset"]] = v
        raft = self.raft_leader()
        self.assertIsNotNone(raft)
        self.nodes[old_id].kill()
        raft.kill()
        others = [i for i in self.nodes if i != old_id]
        poll(lambda: self.shard(self.nodes[others[0]])["leader"] in others, "a new shard leader", timeout=90)
        new_id = self.shard(self.nodes[others[0]])["leader"]
        self.wait_serving(new_id)
        vals = ["b-%d" % i for i in range(20)]
        for res, v in zip(self.publish(self.nodes[new_id], vals), vals):
            acked[res["offset"]] = v
        # One leader per epoch: each live broker's view of (epoch -> leader) agrees.
        views = [self.shard(self.nodes[i]) for i in others]
        self.assertEqual(len({(v["leader_epoch"], v["leader"]) for v in views}), 1, views)
        raft.start()
        self.nodes[old_id].start()
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.check_replicas(acked)
        self.check_one_leader_per_epoch()

    def test_a_broker_starting_while_the_controllers_elect_waits_for_them(self):
        """A node whose start meets a control plane without a leader (two of three
        controllers down) retries its first catalog read instead of exiting; it starts once a
        leader is elected (nemesis seed 285976512 found a restarted controller exiting with
        "member 12 is not the leader and knows no leader yet")."""
        self.start_all()
        self.nodes[3].stop()
        leader = self.raft_leader()
        down = [c for c in self.controllers if c is not leader][:1] + [leader]
        for c in down:
            c.kill()
        started = []
        t = threading.Thread(target=lambda: started.append(self.nodes[3].start()))
        t.start()
        poll(lambda: "the catalog is not ready yet" in self.nodes[3].current_log(),
             "broker 3 to wait for the catalog")
        down[0].start()
        t.join(timeout=120)
        self.assertFalse(t.is_alive())
        self.assertEqual(len(started), 1, "broker 3 started")
        poll(lambda: next(b for b in self.nodes[1].request("GET", "/v1/brokers")["brokers"]
                          if b["id"] == 3)["live"], "broker 3 to be live again")
        down[1].start()


if __name__ == "__main__":
    unittest.main()
