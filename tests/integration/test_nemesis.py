"""A seeded nemesis (issue 11): three brokers on PostgreSQL, one stream with replication
factor 3 and min_insync 2, publishes with ack=quorum and consumer-group acks running
throughout, and one fault per round, chosen by the seed:

  kill9      SIGKILL a broker (maybe the leader, maybe the controller), restart it later;
  stop       SIGSTOP a broker for a while, then SIGCONT;
  partition  cut a broker off on the peer transport (failpoints), then heal;
  wipe       SIGKILL a broker, delete its data directory (a new directory.id), restart it;
  lose_copy  SIGKILL a broker, delete its copy of the shard alone (the same directory.id: a
             lost copy, docs/replication.md "A lost shard copy"), restart it;
  controller (RaftNemesis only) SIGKILL the raft-meta leader, where the controller loop
             runs, and restart it later. On PostgreSQL the controller is the broker holding
             the lease, so kill9 and stop hit it whenever they hit that broker.

After every round everything is healed and restarted, the in-sync set is whole again, and
the checks run: tools/check_replicas.py (every acknowledged record at its offset on every
replica, replicas byte-equal below the high watermark, contiguous offsets, one incarnation),
every broker's view agrees on one leader per epoch, no (shard log, epoch) was ever led by
two brokers (every broker's whole log), and the group's committed position
never goes back. SLUICE_NEMESIS_SEED=n reruns one seed; SLUICE_NEMESIS_ROUNDS=n (CI: 5;
`./dev nemesis --rounds 100` for the long form). Every load loop is bounded in count and
time; nothing sleeps to wait for a condition (waits poll), only to let a fault last.
"""
import glob
import os
import random
import shutil
import signal
import sys
import threading
import time
import unittest

import test_replication as base
import test_replication_raft as raft
from harness import HttpError, poll

ROUNDS = int(os.environ.get("SLUICE_NEMESIS_ROUNDS", "5"))
SEED = int(os.environ.get("SLUICE_NEMESIS_SEED", str(random.randrange(1 << 30))))


class Nemesis(base.Replication):
    FAULTS = ["kill9", "stop", "partition", "wipe", "lose_copy"]

    def inject(self, fault, victim, hold):
        """One fault for `hold` seconds, then its end (the caller heals and SIGCONTs)."""
        n = self.nodes[victim]
        if fault == "kill9":
            n.kill()
            time.sleep(hold)  # the fault lasts this long
            n.start()
        elif fault == "stop":
            n.proc.send_signal(signal.SIGSTOP)
            time.sleep(hold)
            n.proc.send_signal(signal.SIGCONT)
        elif fault == "partition":
            self.partition(victim)
            time.sleep(hold)
            self.heal()
        elif fault == "wipe":
            n.kill()
            shutil.rmtree(n.data_dir)
            time.sleep(hold)
            n.start()
        elif fault == "lose_copy":
            n.kill()
            dirs = glob.glob(os.path.join(n.data_dir, "shards", "t", "n", "r", "0-*"))
            self.assertEqual(len(dirs), 1, "the broker's copy of the shard: %s" % dirs)
            shutil.rmtree(dirs[0])
            time.sleep(hold)
            n.start()
        else:
            raise AssertionError("unknown fault %s" % fault)

    def test_nemesis(self):
        rng = random.Random(SEED)
        print("\nnemesis (%s): SLUICE_NEMESIS_SEED=%d, %d rounds" % (type(self).__name__, SEED, ROUNDS),
              file=sys.stderr, flush=True)
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        acked = {}
        lock = threading.Lock()
        committed_seen = [0]
        group = self.nodes[1].ns_path() + "/streams/r/groups/nemesis"

        def load(stop, counter):
            deadline = time.monotonic() + 120
            i = 0
            while not stop.is_set() and time.monotonic() < deadline and i < 3000:
                node = self.nodes[1 + (i % 3)]
                v = "n%d-%d" % (counter, i)
                try:
                    for res in self.publish(node, [v], timeout=20):
                        with lock:
                            acked[res["offset"]] = v
                except (HttpError, OSError):
                    time.sleep(0.05)
                if i % 10 == 0:  # consume and ack through the group, wherever it is led
                    try:
                        got = node.request("GET", group + "/shards/0/records?max=20&ack_timeout_ms=600000",
                                           timeout=20)["records"]
                        if got:
                            node.request("POST", group + "/shards/0/ack",
                                         {"offsets": [r["offset"] for r in got]}, timeout=20)
                    except (HttpError, OSError):
                        pass
                i += 1

        for rnd in range(1, ROUNDS + 1):
            fault = rng.choice(self.FAULTS)
            victim = rng.choice([1, 2, 3])
            hold = rng.uniform(1.0, 4.0)
            print("nemesis: round %d/%d: %s broker %d for %.1f s (leader %s)" %
                  (rnd, ROUNDS, fault, victim, hold, self.leader()), file=sys.stderr, flush=True)
            stop = threading.Event()
            t = threading.Thread(target=load, args=(stop, rnd))
            t.start()
            n = self.nodes[victim]
            try:
                time.sleep(0.5)
                self.inject(fault, victim, hold)
            finally:
                if n.proc and n.proc.poll() is None:
                    n.proc.send_signal(signal.SIGCONT)
                self.heal()
                time.sleep(1.0)  # load on the healed cluster too
                stop.set()
                t.join(timeout=180)
            self.assertFalse(t.is_alive(), "the load did not stop")
            # Healed: whole in-sync set, everybody caught up, then the checks.
            self.wait_in_sync([1, 2, 3])
            self.wait_caught_up()
            views = {(s["leader_epoch"], s["leader"]) for s in (self.shard(x) for x in self.nodes.values())}
            self.assertEqual(len(views), 1, "brokers disagree on (epoch, leader): %s" % views)
            with lock:
                snapshot = dict(acked)
            self.check_replicas(snapshot)
            led = self.check_one_leader_per_epoch()
            pos = self.nodes[self.leader()].request("GET", group)["positions"][0]
            self.assertGreaterEqual(pos["committed"], committed_seen[0], "the group's position went back")
            committed_seen[0] = pos["committed"]
            print("nemesis: round %d ok: %d acknowledged records, epoch %s, group committed %d, "
                  "%d (log, epoch) leaderships each held by one broker" %
                  (rnd, len(snapshot), next(iter(views))[0], pos["committed"], len(led)),
                  file=sys.stderr, flush=True)


class RaftNemesis(Nemesis, raft.RaftReplication):
    """The same on three raft-meta controllers, with the controller's own death as a fault."""
    FAULTS = Nemesis.FAULTS + ["controller"]

    def inject(self, fault, victim, hold):
        if fault != "controller":
            return super().inject(fault, victim, hold)
        c = self.raft_leader()
        self.assertIsNotNone(c, "a raft-meta leader")
        c.kill()
        time.sleep(hold)
        c.start()


def load_tests(loader, tests, pattern):
    """Only the nemesis: the replication tests it inherits helpers from run in their own file."""
    return unittest.TestSuite([Nemesis("test_nemesis"), RaftNemesis("test_nemesis")])


if __name__ == "__main__":
    unittest.main()
