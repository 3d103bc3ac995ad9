"""Replicated shards end to end (issue 10): three real sluiced brokers on one PostgreSQL
catalog, talking over the peer transport on loopback. Needs the `sluice_pg` ctest fixture.

Every test ends with tools/check_replicas.py, which re-reads every replica's segment files
and checks that they agree byte for byte below the high watermark and hold every
acknowledged record."""
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import threading
import subprocess
import sys
import tempfile
import time
import unittest

from harness import cleanup_all, DEADLINE_S, SLUICE_CLI, HttpError, Node, poll, record_value

PG_URL = os.environ.get("SLUICE_TEST_PG_URL", "")
CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "check_replicas.py")
MAX_LAG_MS = 1500
# What a broker logs when its storage takes the leader role (replica_manager.cc assign).
LEADING = re.compile(rb"replication: (.*): leading in epoch (\d+)\s*$")

ERRC = {1: "invalid_argument", 2: "malformed_body", 6: "not_found", 12: "fenced", 13: "stale_route", 14: "not_leader", 22: "not_supported"}


class PeerClient:
    """A minimal client of the peer transport (docs/replication.md "Frames", "Hello",
    "Replication messages"), to speak to a broker as another replica would."""

    def __init__(self, port, cluster_id, node_id, directory_id):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        hello = b"SLUICEPT" + struct.pack("<HI", 1, node_id) + self.s16(cluster_id) + self.s16(directory_id)
        self.sock.sendall(self.frame(0, 0, 0, hello))
        kind, _, _, payload = self.read_frame()
        assert kind == 0 and payload.startswith(b"SLUICEPT"), payload
        self.next_id = 1

    @staticmethod
    def s16(text):
        b = text.encode()
        return struct.pack("<H", len(b)) + b

    @staticmethod
    def frame(flags, mtype, rid, payload):
        return struct.pack("<BBHQI", 0xC5, 0x10 | flags, mtype, rid, len(payload)) + payload

    def read_exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def read_frame(self):
        magic, vf, mtype, rid, n = struct.unpack("<BBHQI", self.read_exact(16))
        assert magic == 0xC5
        return mtype, vf & 0x0F, rid, self.read_exact(n)

    def request(self, mtype, payload):
        """(True, payload) or (False, errc name, message)."""
        rid = self.next_id
        self.next_id += 1
        self.sock.sendall(self.frame(0, mtype, rid, payload))
        while True:
            _, flags, got, body = self.read_frame()
            if got == rid:
                break
        if flags & 0x2:
            code, _outcome = struct.unpack_from("<HB", body)
            return False, ERRC.get(code, code), body[3:].decode(errors="replace")
        return True, body

    def fetch(self, stream, incarnation, shard, epoch, sender, directory_id, offset=0):
        env = b"".join(self.s16(x) for x in ("t", "n", stream))
        env += struct.pack("<QIQI", incarnation, shard, epoch, sender) + self.s16(directory_id)
        env += b"\x00"  # the log: 0 = the shard's records, 1 = its group log
        return self.request(0x0101, env + struct.pack("<QQII", offset, offset, 1 << 20, 0))

    def close(self):
        self.sock.close()


class Replication(unittest.TestCase):
    """Three brokers on one PostgreSQL (postgres-meta). test_replication_raft.py runs the same
    tests on three raft-meta controllers."""

    BROKERS = (1, 2, 3)  # test_reassign.py runs four

    def metadata_config(self):
        """The metadata keys of every broker (the raft subclass gives controllers instead)."""
        self.assertTrue(PG_URL, "SLUICE_TEST_PG_URL is not set: run through ctest (fixture sluice_pg)")
        self.schema = "rep_%08x" % random.getrandbits(32)
        return {"metadata.backend": "postgres", "metadata.postgres.url": PG_URL,
                "metadata.postgres.schema": self.schema}

    def start_control_plane(self):
        pass

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-rep-")
        self.failpoints = {}
        self.nodes = {}
        meta = self.metadata_config()
        # Peer addresses come from the catalog (each broker registers its transport.address,
        # which the harness gives a free port): no static transport.peers here.
        for i in self.BROKERS:
            fp = os.path.join(self.workdir, "failpoints-%d" % i)
            open(fp, "w").close()
            self.failpoints[i] = fp
            self.nodes[i] = Node(extra=dict(meta, **{
                "node.id": str(i), "node.roles": "broker",
                "broker.session_timeout_ms": "3000",
                "transport.failpoint_file": fp,
                "replication.max_lag_ms": str(MAX_LAG_MS),
            }))
        self.peer_ports = {i: n.peer_port for i, n in self.nodes.items()}

    def tearDown(self):
        cleanup_all(self.nodes.values())

    # --- helpers ---------------------------------------------------------------------
    def start_all(self):
        self.start_control_plane()
        for n in self.nodes.values():
            n.start()
        poll(lambda: len(self.nodes[1].request("GET", "/v1/brokers")["brokers"]) == len(self.nodes),
             "%d brokers registered" % len(self.nodes))

    def shard(self, node, stream="r", shard=0):
        st, body = node.request("GET", node.ns_path() + "/streams/%s/shards" % stream, raw=True)
        if st != 200:
            return None
        return json.loads(body)["shards"][shard]

    def leader(self, stream="r"):
        return self.shard(self.nodes[1], stream)["leader"]

    def in_sync(self, stream="r"):
        return sorted(m["broker"] for m in self.shard(self.nodes[1], stream)["in_sync"])

    def partition(self, node_id):
        """Cuts node_id off from both other brokers on the peer transport (failpoints)."""
        for i, fp in self.failpoints.items():
            with open(fp, "w") as f:
                if i == node_id:
                    f.write("".join("drop %d\n" % j for j in self.nodes if j != node_id))
                else:
                    f.write("drop %d\n" % node_id)

    def heal(self):
        for fp in self.failpoints.values():
            with open(fp, "w"):
                pass

    def publish(self, node, values, ack="quorum", stream="r", timeout=DEADLINE_S):
        return node.request("POST", node.ns_path() + "/streams/%s/records?ack=%s" % (stream, ack),
                            {"records": [{"value": v, "shard": 0} for v in values]}, timeout=timeout)["results"]

    def shard_dir(self, node_id, info, stream="r"):
        return os.path.join(self.nodes[node_id].data_dir, "shards", "t", "n", stream,
                            "%d-%016x" % (info["shard"], info["incarnation"]))

    def check_replicas(self, acked, stream="r"):
        """The replica checker over every replica's copy of shard 0 (the leader's list)."""
        leader = self.nodes[self.leader(stream)]
        info = self.shard(leader, stream)
        hwm = info["high_watermark"]
        dirs = [self.shard_dir(i, info, stream) for i in info["replicas"]]
        ack_file = os.path.join(self.workdir, "acked")
        with open(ack_file, "wb") as f:
            for off, v in sorted(acked.items()):
                f.write(b"%d %s\n" % (off, v.encode()))
        args = [sys.executable, CHECKER, "--hwm", str(hwm), "--acked", ack_file]
        for d in dirs:
            args += ["--replica", d]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return hwm

    def check_one_leader_per_epoch(self):
        """Every broker's whole log (all its starts): no (shard log, epoch) was led by two
        brokers. Returns {(shard log, epoch): {broker}}."""
        leaders = {}
        for i, n in self.nodes.items():
            with open(n.log_path, "rb") as f:
                for line in f:
                    m = LEADING.search(line)
                    if m:
                        leaders.setdefault((m.group(1).decode(), int(m.group(2))), set()).add(i)
        two = {k: v for k, v in leaders.items() if len(v) > 1}
        self.assertFalse(two, "two leaders in one epoch: %s" % two)
        self.assertTrue(leaders, "no broker logged leading a shard")
        return leaders

    def metric(self, node, name, label=""):
        """The value of one per-shard sample of stream r (and `label`, if given) in /metrics."""
        _, body = node.request("GET", "/metrics", raw=True)
        for line in body.decode().splitlines():
            if line.startswith(name + "{") and 'stream="r"' in line and label in line:
                return int(float(line.rsplit(" ", 1)[1]))
        return None

    def wait_serving(self, node_id, stream="r"):
        """node_id leads the shard in its storage AND serves it: its broker has published the
        assignment (the storage leads a moment before the broker routes to it)."""
        node = self.nodes[node_id]
        poll(lambda: (lambda s: s and s["leader"] == node_id and s.get("leading"))(self.shard(node, stream)),
             "broker %d to lead and serve the shard" % node_id)

    def wait_in_sync(self, brokers, stream="r"):
        try:
            poll(lambda: self.in_sync(stream) == sorted(brokers), "the in-sync set to be %s" % sorted(brokers))
        except AssertionError as e:
            # What each broker said about the in-sync set, to tell a stuck leader from a slow one.
            said = []
            for i, n in sorted(self.nodes.items()):
                lines = [l for l in n.log_tail(4000).splitlines() if "in-sync" in l or "epoch" in l]
                said.append("broker %d:\n%s" % (i, "\n".join(lines[-15:])))
            try:
                catalog = self.in_sync(stream)
            except Exception as ex:  # noqa: BLE001 - a diagnostic only
                catalog = "unknown (%s)" % ex
            raise AssertionError("%s; the catalog says %s\n%s" % (e, catalog, "\n".join(said)))

    def wait_caught_up(self, stream="r"):
        """Every replica's durable end reaches the leader's log end (the leader's view)."""
        def done():
            s = self.shard(self.nodes[self.leader(stream)], stream) or {}
            prog = s.get("replica_progress", [])
            return len(prog) == len(s["replicas"]) and all(p["durable_end"] == s["log_end"] for p in prog) and \
                s["high_watermark"] == s["log_end"]
        poll(done, "every replica to catch up")
        # Each replica's own high watermark and log end, in the listing: a follower learns
        # the leader's high watermark with its next fetch answer.
        def every_replica_knows():
            # The leader read from broker 1's view may have moved by the time its own listing
            # answers (then that listing has no replica_progress): poll again.
            s = self.shard(self.nodes[self.leader(stream)], stream)
            prog = (s or {}).get("replica_progress") or []
            return len(prog) == len(s["replicas"]) and all(
                p["high_watermark"] == s["high_watermark"] and p["log_end"] == s["log_end"] for p in prog)
        poll(every_replica_knows, "every replica's high watermark to reach the leader's")

    # --- tests -----------------------------------------------------------------------
    def test_quorum_acks_survive_a_follower_sigkill_and_it_rejoins(self):
        self.start_all()
        created = self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        self.assertEqual((created["replication_factor"], created["min_insync"]), (3, 2))
        self.assertEqual(created["ack"], "quorum", "replicated streams default to ack=quorum")
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        info = self.shard(self.nodes[1])
        self.assertEqual(sorted(info["replicas"]), [1, 2, 3])
        self.assertEqual(info["leader_epoch"], 1)
        self.wait_in_sync([1, 2, 3])
        leader = self.nodes[info["leader"]]
        follower_id = next(i for i in self.nodes if i != info["leader"])
        follower = self.nodes[follower_id]

        # A follower serves clients by forwarding to the leader (docs/replication.md
        # "Forwarding"): a read through it is the leader's (empty so far).
        self.assertEqual(follower.fetch("r", 0, 0)["records"], [])

        acked = {}
        for i in range(40):
            vals = ["a%d-%d" % (i, j) for j in range(5)]
            for res, v in zip(self.publish(leader, vals), vals):
                acked[res["offset"]] = v
            if i == 15:
                follower.kill()  # SIGKILL: no goodbye; the leader must notice by lag
        # The set shrank to the two live replicas (never below min_insync=2) and acks went on.
        self.wait_in_sync(sorted(i for i in self.nodes if i != follower_id))
        poll(lambda: self.metric(leader, "sluice_shard_under_replicated") == 1, "the leader to report under-replication")
        # Back, the follower catches up from its own disk and rejoins the in-sync set.
        follower.start()
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        poll(lambda: self.metric(leader, "sluice_shard_under_replicated") == 0, "under-replication to clear")
        self.assertEqual(self.metric(leader, "sluice_shard_in_sync_replicas"), 3)
        self.assertEqual(self.metric(leader, "sluice_shard_replica_lag_records", 'replica="%d"' % follower_id), 0)
        hwm = self.check_replicas(acked)
        self.assertGreaterEqual(hwm, 200)
        got = {r["offset"]: record_value(r).decode() for r in leader.fetch_all("r", 0)}
        for off, v in acked.items():
            self.assertEqual(got.get(off), v)

    def deposed_leader_acknowledges_nothing(self, with_data):
        """Seed pulsar-fenced-empty-ledger-loss: the leader is SIGSTOPped with a quorum append
        pending, an operator raises the epoch, the old leader is SIGCONTed. The pending append
        fails with 409 fenced; nothing the old leader said was acknowledged is lost."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old_id = self.leader()
        old = self.nodes[old_id]
        acked = {}
        if with_data:
            vals = ["before-%d" % i for i in range(10)]
            for res, v in zip(self.publish(old, vals), vals):
                acked[res["offset"]] = v
        # The followers stop hearing the old leader, so its next quorum append cannot complete.
        self.partition(old_id)
        pending = {}

        def publish_pending():
            try:
                pending["result"] = self.publish(old, ["pending"], timeout=90)
            except HttpError as e:
                pending["error"] = (e.status, e.problem.get("code"), e.problem.get("detail"))

        t = threading.Thread(target=publish_pending)
        t.start()
        poll(lambda: self.shard(old)["log_end"] > self.shard(old)["high_watermark"],
             "the pending append to reach the old leader's log, unacknowledged")
        old.proc.send_signal(signal.SIGSTOP)
        try:
            # An operator raises the epoch, moving leadership to an in-sync follower (unless
            # the controller, seeing the stopped leader's heartbeats lapse, got there first).
            def move():
                for i in self.nodes:
                    if i == old_id:
                        continue
                    info = self.shard(self.nodes[i])
                    if info["leader"] not in (0, old_id) and info["leader_epoch"] >= 2:
                        return info
                    target = next(m["broker"] for m in info["in_sync"] if m["broker"] != old_id)
                    st, body = self.nodes[i].request(
                        "POST", self.nodes[i].ns_path() + "/streams/r/shards/0/leader", {"broker": target}, raw=True)
                    if st == 200:
                        return json.loads(body)
                return None
            moved = poll(move, "the operator's leader move")
            self.assertEqual(moved["leader_epoch"], 2)
            new_id = moved["leader"]
        finally:
            old.proc.send_signal(signal.SIGCONT)
        t.join(timeout=120)
        self.assertFalse(t.is_alive(), "the pending append never completed")
        self.assertNotIn("result", pending, "a deposed leader acknowledged a pending quorum append")
        self.assertEqual(pending["error"][:2], (409, "fenced"), pending)
        # Healed: later appends sent to the old leader are never acknowledged by it. It now
        # forwards them to the new leader (docs/replication.md "Forwarding"), which
        # acknowledges them on the new epoch's in-sync set: they must then survive.
        self.heal()
        for i in range(3):
            try:
                for res in self.publish(self.nodes[old_id], ["later-%d" % i], timeout=60):
                    acked[res["offset"]] = "later-%d" % i
            except HttpError as e:
                self.assertIn((e.status, e.problem.get("code")),
                              [(409, "fenced"), (421, "not_leader"), (503, "unavailable"),
                               (504, "timeout")], e.body)
        # The new leader takes quorum writes with the third replica.
        new = self.nodes[new_id]
        self.wait_serving(new_id)
        vals = ["after-%d" % i for i in range(10)]
        for res, v in zip(self.publish(new, vals), vals):
            acked[res["offset"]] = v
        # The old leader follows, drops its unacknowledged suffix, and catches up.
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.check_replicas(acked)
        values = [record_value(r).decode() for r in new.fetch_all("r", 0)]
        self.assertNotIn("pending", values)

    def test_a_wiped_follower_is_a_new_replica_until_it_has_caught_up(self):
        """Seed kafka-15495: a follower back with an empty disk (a new directory.id) counts for
        nothing until it has caught up and the leader recorded its new directory."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        leader_id = self.leader()
        leader = self.nodes[leader_id]
        acked = {}
        for i in range(20):
            vals = ["w%d-%d" % (i, j) for j in range(5)]
            for res, v in zip(self.publish(leader, vals), vals):
                acked[res["offset"]] = v
        f_id = next(i for i in self.nodes if i != leader_id)
        f = self.nodes[f_id]
        old_dir = next(m["directory_id"] for m in self.shard(leader)["in_sync"] if m["broker"] == f_id)
        self.assertEqual(f.stop(), 0)
        shutil.rmtree(f.data_dir)
        f.start()
        new_dir = f.request("GET", "/v1/cluster")["directory_id"]
        self.assertNotEqual(new_dir, old_dir)
        for i in range(20, 30):
            vals = ["w%d-%d" % (i, j) for j in range(5)]
            for res, v in zip(self.publish(leader, vals), vals):
                acked[res["offset"]] = v
        # It rejoins only under its new directory id, once it holds everything.
        poll(lambda: {m["broker"]: m["directory_id"] for m in self.shard(leader)["in_sync"]}.get(f_id) == new_dir,
             "the wiped follower to rejoin the in-sync set under its new directory id")
        self.wait_caught_up()
        self.check_replicas(acked)

    def test_deposed_leader_acknowledges_nothing(self):
        self.deposed_leader_acknowledges_nothing(with_data=True)

    def test_deposed_leader_with_an_empty_log_acknowledges_nothing(self):
        self.deposed_leader_acknowledges_nothing(with_data=False)

    def test_a_restarted_follower_refuses_the_old_leader_and_replicas_check_every_envelope(self):
        """A follower down during an epoch change restarts from its own directory: it takes
        the new epoch from the catalog, persists it, and refuses messages of the old epoch,
        as every replica refuses another incarnation, an unknown shard, a sender that is not
        its hello, a malformed message and an unknown type."""
        self.start_all()
        info = self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        inc = info["incarnation"]
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old_id = self.leader()
        acked = {}
        vals = ["e1-%d" % i for i in range(10)]
        for res, v in zip(self.publish(self.nodes[old_id], vals), vals):
            acked[res["offset"]] = v
        f_id, new_id = [i for i in self.nodes if i != old_id]
        f = self.nodes[f_id]
        self.assertEqual(f.stop(), 0)
        moved = self.nodes[new_id].request("POST", self.nodes[new_id].ns_path() + "/streams/r/shards/0/leader",
                                           {"broker": new_id})
        self.assertEqual(moved["leader_epoch"], 2)
        new = self.nodes[new_id]
        self.wait_serving(new_id)
        vals = ["e2-%d" % i for i in range(10)]
        for res, v in zip(self.publish(new, vals), vals):
            acked[res["offset"]] = v
        f.start()
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.assertEqual(self.shard(f)["leader_epoch"], 2)

        cluster = f.request("GET", "/v1/cluster")["cluster_id"]
        old_dir = self.nodes[old_id].request("GET", "/v1/cluster")["directory_id"]
        # The old leader's voice (epoch 1) is refused by the restarted follower and the new leader.
        for target in (f_id, new_id):
            c = PeerClient(self.peer_ports[target], cluster, old_id, old_dir)
            try:
                got = c.fetch("r", inc, 0, 1, old_id, old_dir)
                self.assertEqual(got[:2], (False, "fenced"), got)
                self.assertIn("epoch 1", got[2])
                # Another incarnation, an unknown stream, a sender other than the hello.
                got = c.fetch("r", inc + 1, 0, 2, old_id, old_dir)
                self.assertEqual(got[:2], (False, "stale_route"), got)
                self.assertIn(str(inc), got[2])
                self.assertEqual(c.fetch("nope", inc, 0, 2, old_id, old_dir)[:2], (False, "not_found"))
                self.assertEqual(c.fetch("r", inc, 7, 2, old_id, old_dir)[:2], (False, "not_found"))
                got = c.fetch("r", inc, 0, 2, 99, old_dir)  # the hello said broker old_id
                self.assertEqual(got[:2], (False, "invalid_argument"), got)
                self.assertEqual(c.request(0x0101, b"\x01\x02")[:2], (False, "malformed_body"))
                self.assertEqual(c.request(0x01FE, b"")[:2], (False, "not_supported"))
            finally:
                c.close()
        # The broker serves on, and the replicas agree.
        self.check_replicas(acked)

    def test_a_follower_asleep_through_a_delete_and_recreate_gets_stale_route_and_serves_nothing_old(self):
        """Delete and recreate the stream while a follower is SIGSTOPped. Messages naming the
        old incarnation are answered stale_route by every broker; the follower, woken, drops
        the old incarnation's data and replicates only the new one."""
        self.start_all()
        old_inc = self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)["incarnation"]
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        leader_id = self.leader()
        self.publish(self.nodes[leader_id], ["old-%d" % i for i in range(10)])
        f_id = next(i for i in self.nodes if i != leader_id)
        f = self.nodes[f_id]
        f.proc.send_signal(signal.SIGSTOP)
        try:
            self.nodes[leader_id].request("DELETE", self.nodes[leader_id].ns_path() + "/streams/r")
            new_inc = self.nodes[leader_id].create_stream("r", shards=1, replication_factor=3,
                                                          min_insync=2)["incarnation"]
            self.assertGreater(new_inc, old_inc)
            poll(lambda: (self.shard(self.nodes[leader_id]) or {}).get("incarnation") == new_inc, "the recreate")
            new_leader = self.nodes[self.leader()]
            poll(lambda: self.shard(new_leader).get("leading"), "the new incarnation's leader to lead")
            acked = {}
            vals = ["new-%d" % i for i in range(10)]
            for res, v in zip(self.publish(new_leader, vals, timeout=90), vals):
                acked[res["offset"]] = v
            # Any replica named with the old incarnation answers stale_route, naming both.
            cluster = new_leader.request("GET", "/v1/cluster")["cluster_id"]
            for i in self.nodes:
                if i == f_id:
                    continue
                other = next(j for j in self.nodes if j not in (i, f_id))  # speak as the third broker
                other_dir = self.nodes[other].request("GET", "/v1/cluster")["directory_id"]
                c = PeerClient(self.peer_ports[i], cluster, other, other_dir)
                try:
                    got = c.fetch("r", old_inc, 0, 1, other, other_dir)
                    self.assertEqual(got[:2], (False, "stale_route"), got)
                    self.assertIn(str(new_inc), got[2])
                finally:
                    c.close()
        finally:
            f.proc.send_signal(signal.SIGCONT)
        # Woken, the follower applies the delete and recreate: the old incarnation's data is
        # gone from its disk, and it holds the new one like the others.
        old_dir = "0-%016x" % old_inc
        poll(lambda: old_dir not in f.stream_dirs("t", "n", "r"), "the follower to delete the old incarnation")
        self.wait_in_sync([1, 2, 3])
        self.wait_caught_up()
        self.check_replicas(acked)
        values = [record_value(r).decode() for r in new_leader.fetch_all("r", 0)]
        self.assertFalse([v for v in values if v.startswith("old-")], values)

    def test_an_idempotent_producer_is_deduplicated_across_a_change_of_leader(self):
        """Producer state is rebuilt from the replicated batches: a retry of the last batch
        sent to the new leader is answered with its original offsets and written once."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old = self.nodes[self.leader()]
        acked = {}
        first = None
        for seq in range(5):
            res = old.publish_binary("r", [(None, b"p-%d-%d" % (seq, j)) for j in range(3)], ack="quorum",
                                     producer=(42, seq))
            for j, r in enumerate(res):
                acked[r["offset"]] = "p-%d-%d" % (seq, j)
            first = res if seq == 4 else first
        new_id = next(m["broker"] for m in self.shard(old)["in_sync"] if m["broker"] != self.leader())
        new = self.nodes[new_id]
        moved = new.request("POST", new.ns_path() + "/streams/r/shards/0/leader", {"broker": new_id})
        self.assertEqual(moved["leader"], new_id)
        self.wait_serving(new_id)
        # The retry of sequence 4 (its ack was "lost"): the original offsets, nothing written.
        retry = new.publish_binary("r", [(None, b"p-4-%d" % j) for j in range(3)], ack="quorum", producer=(42, 4))
        self.assertEqual([r["offset"] for r in retry], [r["offset"] for r in first])
        nxt = new.publish_binary("r", [(None, b"p-5-0")], ack="quorum", producer=(42, 5))
        acked[nxt[0]["offset"]] = "p-5-0"
        self.assertEqual(nxt[0]["offset"], first[-1]["offset"] + 1)
        # A gap is refused on the new leader as on the old.
        with self.assertRaises(HttpError) as e:
            new.publish_binary("r", [(None, b"gap")], ack="quorum", producer=(42, 9))
        self.assertEqual(e.exception.problem.get("code"), "sequence_gap")
        self.wait_caught_up()
        self.check_replicas(acked)
        values = [record_value(r).decode() for r in new.fetch_all("r", 0)]
        self.assertEqual(values.count("p-4-0"), 1, values)

    def test_group_positions_and_dead_letters_survive_a_change_of_leader(self):
        """Acks, dead letters (with their content) and replays go through the shard's
        replicated group log: after a leader move the new leader answers the same position,
        lists the same dead letters, and never delivers an acked or dead-lettered record;
        moving back, the first leader applies what the second one committed."""
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        first = self.nodes[self.leader()]
        acked = {}
        for r in self.publish(first, ["job-%d" % i for i in range(10)]):
            acked[r["offset"]] = "job-%d" % r["offset"]
        grp = first.ns_path() + "/streams/r/groups/w"
        base = grp + "/shards/0"
        q = "/records?max=20&max_deliveries=1&ack_timeout_ms=600000"
        got = first.request("GET", base + q)["records"]
        self.assertEqual([r["offset"] for r in got], list(range(10)))
        first.request("POST", base + "/ack", {"offsets": [0, 1, 2, 3, 4, 5]})
        first.request("POST", base + "/nack", {"offsets": [6, 7]})
        # A second delivery would exceed max_deliveries=1: 6 and 7 become dead letters 0 and 1.
        self.assertEqual(first.request("GET", base + q)["records"], [])
        replayed = first.request("POST", base + "/dead-letters/replay", {"from": 0, "to": 1})
        self.assertEqual(replayed["replayed"], 1)
        acked[10] = "job-6"
        before = first.request("GET", grp)["positions"][0]
        self.assertEqual((before["committed"], before["dead_letter_start"], before["dead_letter_end"]),
                         (8, 1, 2), before)

        def check_on(node, committed):
            self.assertEqual(node.request("GET", first.ns_path() + "/streams/r/groups")["groups"], ["w"])
            pos = node.request("GET", grp)["positions"][0]
            self.assertEqual((pos["committed"], pos["dead_letter_start"], pos["dead_letter_end"]),
                             (committed, 1, 2), pos)
            dl = node.request("GET", base + "/dead-letters")["records"]
            self.assertEqual([(record_value(r), r["headers"]["sluice-original-offset"]) for r in dl],
                             [(b"job-7", "7")])

        second_id = next(b for b in self.in_sync() if b != self.leader())
        second = self.nodes[second_id]
        moved = second.request("POST", second.ns_path() + "/streams/r/shards/0/leader", {"broker": second_id})
        self.assertEqual(moved["leader"], second_id)
        self.wait_serving(second_id)
        # A new leader serves below its high watermark, which it learns from its followers'
        # next fetches (the replayed record 10 included): wait for it, not for a race.
        poll(lambda: self.shard(second)["high_watermark"] >= 11, "the new leader's high watermark to reach 11")
        check_on(second, 8)
        # Outstanding records (8, 9) are delivered again; the replayed dead letter (10) is
        # new; nothing acked or dead-lettered comes back.
        again = second.request("GET", base + q)["records"]
        self.assertEqual(sorted(r["offset"] for r in again), [8, 9, 10])
        self.assertEqual(record_value(next(r for r in again if r["offset"] == 10)), b"job-6")
        second.request("POST", base + "/ack", {"offsets": [8, 9, 10]})
        check_on(second, 11)

        # Back to the first leader: it applies the acks the second one committed.
        self.wait_in_sync([1, 2, 3])
        first_id = int(first.extra["node.id"])
        first.request("POST", first.ns_path() + "/streams/r/shards/0/leader", {"broker": first_id})
        self.wait_serving(first_id)
        check_on(first, 11)
        self.assertEqual(first.request("GET", base + q)["records"], [])
        self.wait_caught_up()
        self.check_replicas(acked)

    # --- failover (the controller; docs/replication.md "The controller") ------------------
    def two_replica_stream(self, min_insync):
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=2, min_insync=min_insync)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        info = self.shard(self.nodes[1])
        leader_id = info["leader"]
        f_id = next(b for b in info["replicas"] if b != leader_id)
        other_id = next(i for i in self.nodes if i not in info["replicas"])
        self.wait_in_sync(info["replicas"])
        acked = {}
        for res in self.publish(self.nodes[leader_id], ["r-%d" % i for i in range(5)]):
            acked[res["offset"]] = "r-%d" % res["offset"]
        self.assertEqual(sorted(acked), [0, 1, 2, 3, 4])
        return leader_id, f_id, other_id, acked

    def assert_unavailable_then_elect_uncleanly(self, ask, f_id):
        """The shard has no leader: a publish is refused (503). The follower f_id, down until
        now, still holds the 5 acknowledged records of two_replica_stream: it is started and
        an operator elects it (shard elect --unclean), after which it serves them."""
        with self.assertRaises(HttpError) as e:
            self.publish(ask, ["x"], timeout=30)
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (503, "shard_unavailable"))
        f = self.nodes[f_id]
        f.start()
        poll(lambda: self.shard(f) and self.shard(f).get("log_end") == 5, "the follower to reopen its 5 records")
        done = self.cli(ask, "shard", "elect", "t/n/r", "0", "--unclean", "--broker", str(f_id), "--yes")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.wait_serving(f_id)
        self.assertEqual([record_value(r).decode() for r in f.fetch_all("r", 0)], ["r-%d" % i for i in range(5)])

    def wipe_and_restart(self, node_id):
        n = self.nodes[node_id]
        n.kill()
        shutil.rmtree(n.data_dir)
        n.start()

    def cli(self, node, *args):
        return subprocess.run([SLUICE_CLI, "--url", node.url] + list(args), capture_output=True, text=True,
                              timeout=120)

    def test_only_insync_replica_returns_with_empty_disk(self):
        """Seed kafka-15495 step by step: RF 2, min_insync 1. The in-sync set shrinks to the
        leader; the leader comes back with an empty disk. It must not lead, nobody is
        elected, the shard says why; the follower keeps its 5 records until an operator
        elects it uncleanly."""
        leader_id, f_id, other_id, acked = self.two_replica_stream(min_insync=1)
        self.nodes[f_id].kill()
        self.wait_in_sync([leader_id])
        self.wipe_and_restart(leader_id)
        ask = self.nodes[other_id]

        # The reason comes from the registered brokers as this broker last read them (at most
        # a second old): poll until it names the new directory.
        why = "the only in-sync replica, broker %d, came back with a new directory" % leader_id

        def leaderless():
            s = self.shard(ask)
            return s if s["leader"] == 0 and why in s.get("unavailable_reason", "") else None
        info = poll(leaderless, "the controller to leave the shard without a leader, saying why")
        self.assertIn(why, info["unavailable_reason"])
        self.assertGreaterEqual(info["leader_epoch"], 2, "the old leader's epoch is closed")
        with self.assertRaises(HttpError) as e:
            self.publish(ask, ["x"], timeout=30)
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (503, "shard_unavailable"))
        self.assertIn("came back with a new directory", e.exception.problem.get("detail"))
        with self.assertRaises(HttpError) as e:
            ask.fetch("r", 0, 0)
        self.assertEqual(e.exception.problem.get("code"), "shard_unavailable")
        _, body = ask.request("GET", "/metrics", raw=True)
        self.assertIn('sluice_shard_leaderless{tenant="t",namespace="n",stream="r"', body.decode())
        table = self.cli(ask, "shards", "t/n/r")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("NO LEADER: the only in-sync replica, broker %d" % leader_id, table.stdout)

        # Bad elections: a broker that is down, a broker that is not a replica.
        poll(lambda: not next(b for b in ask.request("GET", "/v1/brokers")["brokers"] if b["id"] == f_id)["live"],
             "the killed follower's session to expire")
        elect = ask.ns_path() + "/streams/r/shards/0/elect"
        for body, want in (({"broker": f_id, "unclean": True}, (409, "conflict", "is down")),
                           ({"broker": other_id, "unclean": True}, (400, "invalid_argument", "not one of its replicas"))):
            with self.assertRaises(HttpError) as e:
                ask.request("POST", elect, body)
            self.assertEqual((e.exception.status, e.exception.problem.get("code")), want[:2])
            self.assertIn(want[2], e.exception.problem.get("detail"))
        self.assertEqual(self.shard(ask)["leader"], 0)

        # The follower returns: it left the in-sync set, so it is not elected by itself.
        f = self.nodes[f_id]
        f.start()
        poll(lambda: self.shard(f) and self.shard(f).get("log_end") == 5, "the follower to reopen its 5 records")
        seen = ask.request("GET", "/v1/brokers")["brokers"]
        self.assertTrue(all(b["live"] for b in seen), seen)
        time.sleep(2)  # several controller passes (controller.interval_ms 500): not a sync point
        info = self.shard(f)
        self.assertEqual((info["leader"], info["log_end"]), (0, 5), info)

        # An operator's unclean election: refused without --yes, naming what it holds.
        refused = self.cli(ask, "shard", "elect", "t/n/r", "0", "--unclean", "--broker", str(f_id))
        self.assertEqual(refused.returncode, 1, refused.stdout + refused.stderr)
        self.assertIn("broker %d holds offsets [0, 5)" % f_id, refused.stdout)
        self.assertIn("refused without --yes", refused.stderr)
        self.assertEqual(self.shard(ask)["leader"], 0)
        done = self.cli(ask, "shard", "elect", "t/n/r", "0", "--unclean", "--broker", str(f_id), "--yes")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.wait_serving(f_id)
        values = [record_value(r).decode() for r in f.fetch_all("r", 0)]
        self.assertEqual(values, ["r-%d" % i for i in range(5)])
        logs = ""
        for n in self.nodes.values():
            with open(n.log_path) as fh:
                logs += fh.read()
        self.assertIn("UNCLEAN election", logs)

    def test_a_leader_whose_shard_directory_was_wiped_does_not_lead_on_its_old_word(self):
        """Seed kafka-15495 through storage.dir: the shard copies may live on a disk of their
        own. Wiped (a replaced disk), they come back empty beside a meta.properties that kept
        its directory.id. The broker must get a new directory.id, and must not lead with an
        empty log as the only in-sync replica the catalog recorded."""
        leader_id, f_id, other_id, acked = self.two_replica_stream(min_insync=1)
        self.nodes[f_id].kill()
        self.wait_in_sync([leader_id])
        n = self.nodes[leader_id]
        old_dir = n.request("GET", "/v1/cluster")["directory_id"]
        n.kill()
        shutil.rmtree(os.path.join(n.data_dir, "shards"))
        self.assertTrue(os.path.exists(os.path.join(n.data_dir, "meta.properties")))
        n.start()
        new_dir = n.request("GET", "/v1/cluster")["directory_id"]
        self.assertNotEqual(new_dir, old_dir, "empty shard copies kept the recorded directory.id")
        with open(n.log_path) as fh:
            self.assertIn("shard copies are gone", fh.read())
        why = "the only in-sync replica, broker %d, came back with a new directory" % leader_id
        ask = self.nodes[other_id]
        poll(lambda: self.shard(ask)["leader"] == 0 and why in self.shard(ask).get("unavailable_reason", ""),
             "the controller to leave the shard without a leader, saying why")
        self.assert_unavailable_then_elect_uncleanly(ask, f_id)

    def test_default_min_insync_keeps_the_follower_eligible(self):
        """The same steps with the default min_insync (2 of 2): the in-sync set never shrinks
        to the leader, so when the wiped leader returns the follower is elected without an
        operator and serves all 5 records."""
        leader_id, f_id, other_id, acked = self.two_replica_stream(min_insync=2)
        self.nodes[f_id].kill()
        time.sleep(MAX_LAG_MS * 2 / 1000)  # past max_lag: a shrink would have happened
        self.assertEqual(self.in_sync(), sorted([leader_id, f_id]), "shrunk below min_insync")
        self.wipe_and_restart(leader_id)
        self.nodes[f_id].start()
        self.wait_serving(f_id)
        # Its high watermark restarts low after a SIGKILL and rises once the in-sync set has
        # reported: poll until the 5 records are visible.
        poll(lambda: len(self.nodes[f_id].fetch_all("r", 0)) >= 5, "the 5 records to be visible on the new leader")
        values = [record_value(r).decode() for r in self.nodes[f_id].fetch_all("r", 0)]
        self.assertEqual(values, ["r-%d" % i for i in range(5)])
        # The wiped broker catches up as a new replica and is recorded under its new directory.
        new_dir = self.nodes[leader_id].request("GET", "/v1/cluster")["directory_id"]
        poll(lambda: {m["broker"]: m["directory_id"] for m in self.shard(self.nodes[f_id])["in_sync"]}
             .get(leader_id) == new_dir, "the wiped broker to rejoin under its new directory")
        for res in self.publish(self.nodes[other_id], ["after"]):
            acked[res["offset"]] = "after"

    def test_a_killed_leader_is_replaced_and_no_acknowledged_record_is_lost(self):
        """SIGKILL the leader of an RF 3 shard during ack=quorum publishes: the controller
        elects an in-sync replica within the session timeout plus a few seconds; every
        acknowledged record is there and publishing continues. Once the old leader is back in
        sync, the controller moves leadership back to the shard's first (preferred) replica."""
        for n in list(self.nodes.values()) + getattr(self, "controllers", []):  # raft: the controllers
            n.extra["controller.preferred_leader_interval_ms"] = "2000"
        self.start_all()
        self.nodes[1].create_stream("r", shards=1, replication_factor=3, min_insync=2)
        poll(lambda: all(self.shard(n) for n in self.nodes.values()), "every broker to apply the create")
        self.wait_in_sync([1, 2, 3])
        old_id = self.leader()
        others = [i for i in self.nodes if i != old_id]
        acked = {}
        stop = threading.Event()
        errors = []

        def load():
            i = 0
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline and i < 5000:
                target = self.nodes[others[i % 2]]
                try:
                    for res in self.publish(target, ["k-%d" % i], timeout=30):
                        acked[res["offset"]] = "k-%d" % i
                except (HttpError, OSError) as e:
                    errors.append(str(e)[:200])
                    time.sleep(0.05)
                i += 1
        t = threading.Thread(target=load)
        t.start()
        poll(lambda: len(acked) >= 50, "some acknowledged publishes")
        self.nodes[old_id].kill()
        killed_at = time.monotonic()
        poll(lambda: self.shard(self.nodes[others[0]])["leader"] in others, "a new leader", timeout=60)
        elected_in = time.monotonic() - killed_at
        self.assertLess(elected_in, 3.0 + 10.0, "session timeout 3 s plus a few seconds")
        before = len(acked)
        poll(lambda: len(acked) >= before + 50, "publishing to continue on the new leader")
        stop.set()
        t.join(timeout=120)
        self.assertFalse(t.is_alive())
        new_id = self.shard(self.nodes[others[0]])["leader"]
        self.assertGreaterEqual(self.shard(self.nodes[new_id])["leader_epoch"], 2)
        self.nodes[old_id].start()
        self.wait_in_sync([1, 2, 3])
        preferred = self.shard(self.nodes[others[0]])["replicas"][0]
        self.wait_serving(preferred)
        elect = self.nodes[1].ns_path() + "/streams/r/shards/0/elect"
        with self.assertRaises(HttpError) as e:
            self.nodes[preferred].request("POST", elect, {"preferred": True})
        self.assertEqual((e.exception.status, e.exception.problem.get("code")), (409, "conflict"))
        self.assertIn("already leads", e.exception.problem.get("detail"))
        with self.assertRaises(HttpError) as e:
            self.nodes[preferred].request("POST", elect, {"preferred": True, "broker": preferred})
        self.assertEqual(e.exception.status, 400)
        self.wait_caught_up()
        self.check_replicas(acked)
        self.check_one_leader_per_epoch()


if __name__ == "__main__":
    unittest.main()
