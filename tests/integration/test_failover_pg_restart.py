"""PostgreSQL restarts during a leader failover (issue 11, postgres-meta): three brokers on a
PostgreSQL of this test's own (tests/support/pg_test_server.sh on a free port, so the shared
test server keeps serving the other tests). The shard's leader is SIGKILLed and PostgreSQL
is stopped at once: no controller can write a decision while it is down, and the shard
stays with its old (dead) leader in the catalog. When PostgreSQL returns, the failover
completes; every broker sees one leader per epoch, publishing continues, and every
acknowledged record is there."""
import os
import socket
import subprocess
import tempfile
import time
import unittest

import test_replication as base
from harness import poll

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support", "pg_test_server.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgRestartDuringFailover(base.Replication):
    def metadata_config(self):
        self.pg_dir = tempfile.mkdtemp(prefix="sluice-pg-")
        os.rmdir(self.pg_dir)  # the script creates it
        self.pg_port = free_port()
        self.pg("start", str(self.pg_port))
        self.addCleanup(lambda: self.pg("stop", check=False))
        return {"metadata.backend": "postgres",
                "metadata.postgres.url": "host=127.0.0.1 port=%d user=postgres dbname=sluice_test" % self.pg_port,
                "metadata.postgres.schema": "failover"}

    def pg(self, cmd, *args, check=True):
        p = subprocess.run(["bash", SCRIPT, cmd, self.pg_dir] + list(args), capture_output=True, text=True,
                           timeout=180)
        if check:
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_postgres_restart_during_a_failover_leaves_one_leader_per_epoch(self):
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old_id = self.leader()
        before = self.shard(self.nodes[old_id])
        acked = {}
        vals = ["a-%d" % i for i in range(20)]
        for res, v in zip(self.publish(self.nodes[old_id], vals), vals):
            acked[res["offset"]] = v
        others = [i for i in self.nodes if i != old_id]
        # The catalog goes down first: were the leader killed first, its session could lapse
        # (1-3 s) and the failover be written before a slow halt finished.
        self.pg("halt")
        self.nodes[old_id].kill()
        # Beyond the session timeout (3 s): the old leader is dead, yet no decision can be
        # written while the catalog is down.
        time.sleep(5)
        self.assertEqual(self.shard(self.nodes[others[0]])["leader"], old_id,
                         "no failover decision while the catalog is down")
        self.pg("resume")
        poll(lambda: self.shard(self.nodes[others[0]])["leader"] in others, "a new shard leader", timeout=120)
        new_id = self.shard(self.nodes[others[0]])["leader"]
        self.wait_serving(new_id)
        # Each broker learns of the decision through its own change feed, which reconnects
        # after the restart: they agree once both have applied it.
        poll(lambda: len({(v["leader_epoch"], v["leader"]) for v in
                          [self.shard(self.nodes[i]) for i in others]}) == 1,
             "both surviving brokers to see the same leader and epoch")
        views = [self.shard(self.nodes[i]) for i in others]
        self.assertEqual(len({(v["leader_epoch"], v["leader"]) for v in views}), 1, views)
        self.assertGreater(views[0]["leader_epoch"], before["leader_epoch"])
        vals = ["b-%d" % i for i in range(20)]
        for res, v in zip(self.publish(self.nodes[new_id], vals), vals):
            acked[res["offset"]] = v
        self.nodes[old_id].start()
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.check_replicas(acked)
        self.check_one_leader_per_epoch()


def load_tests(loader, tests, pattern):
    return unittest.TestSuite([PgRestartDuringFailover("test_postgres_restart_during_a_failover_leaves_one_leader_per_epoch")])


if __name__ == "__main__":
    unittest.main()
