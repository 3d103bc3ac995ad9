"""A multi-member raft-meta control plane (issue 4): three sluiced controllers and a broker on
loopback, real processes and real HTTP.

- the leader is SIGKILLed during a stream of creates and deletes: the group continues and
  every acknowledged operation is present;
- a rolling upgrade 8 -> 10 -> 14, one member at a time, with creates and deletes running
  throughout, then the finalize of both features; member states stay identical;
- rolling upgrades 17 -> 18 (counters) and 18 -> 19 (batch entries: none applied while a
  member is at 18, then concurrent creates share them and the floor rises to 19);
- a member restarted at level 8 after the floor rose is refused and says why;
- a member of another cluster is refused, naming both ids;
- bad input: a duplicate node id (409), removing the last voter (409), a finalize sent to a
  follower (forwarded), a malformed RPC frame (that connection closed and logged, the member
  keeps serving).

Nothing sleeps to wait for a condition: every wait polls with a generous deadline.
"""
import json
import os
import socket
import struct
import threading
import time
import unittest

from harness import cleanup_all, HttpError, Node, poll, record_value

FAST = {"raft.election_timeout_ms": "1000", "raft.heartbeat_timeout_ms": "100",
        "metadata.timeout_ms": "15000", "metadata.start_timeout_ms": "60000"}


class Group:
    """Three controllers (node ids 1..3); 2 and 3 join through 1."""

    def __init__(self, level="14", extra=None):
        self.nodes = []
        self.broker = None
        first = Node(extra=dict(FAST, **{"node.id": "1", "node.roles": "controller",
                                         "metadata.level": level}, **(extra or {})))
        self.nodes.append(first)
        for i in (2, 3):
            self.nodes.append(Node(extra=dict(FAST, **{
                "node.id": str(i), "node.roles": "controller", "metadata.level": level,
                "metadata.join": "127.0.0.1:%d" % first.rpc_port}, **(extra or {}))))

    def start(self, broker=True):
        for n in self.nodes:
            n.start()
        poll(lambda: self.converged(3), "three members with identical state")
        if broker:
            # Stream creates need a registered broker to place shards on.
            self.broker = Node(extra=dict(FAST, **{"node.id": "4", "node.roles": "broker",
                                                   "metadata.controllers": self.rpc_list()}))
            self.broker.start()
            poll(lambda: any(b["id"] == 4 for b in self.nodes[0].request("GET", "/v1/brokers")["brokers"]),
                 "the broker to register")
        return self

    def rpc_list(self, exclude=None):
        return ",".join("127.0.0.1:%d" % n.rpc_port for n in self.nodes if n is not exclude)

    def alive(self):
        return [n for n in self.nodes if n.proc and n.proc.poll() is None]

    def members(self, via=None):
        for n in ([via] if via else self.alive()):
            try:
                return n.request("GET", "/v1/metadata/members", timeout=10)
            except (OSError, HttpError):
                continue
        return None

    def leader(self):
        m = self.members()
        if not m or not m["leader"]:
            return None
        for n in self.nodes:
            if n.extra["node.id"] == str(m["leader"]):
                return n
        return None

    def converged(self, count):
        """All `count` members answer, at the same applied index, with the same state hash."""
        m = self.members()
        if not m or len(m["members"]) != count:
            return False
        ms = m["members"]
        if any(x["role"] in ("unreachable", "unavailable") or x["held"] for x in ms):
            return False
        return len({(x["applied"], x["state_hash"]) for x in ms}) == 1 and m

    def cleanup(self):
        cleanup_all(self.nodes + [self.broker])


class Client:
    """Creates and deletes through any live controller, recording what was acknowledged."""

    def __init__(self, group, prefix):
        self.g = group
        self.prefix = prefix
        self.acked = {}       # name -> "created" / "deleted" (last acknowledged op)
        self.gen = {}         # slot -> generation of its current name
        self.history = {}     # name -> [(op, status, time)]
        self.turn = 0
        self.uncertain = set()
        self.incarnations = {}
        self.stop = threading.Event()
        self.errors = []
        self.count = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def call(self, method, path, body=None):
        # One controller per operation, rotating: an operation is never re-sent elsewhere
        # (it may have happened where it was sent first).
        alive = self.g.alive()
        if not alive:
            raise OSError("no controller alive")
        self.turn += 1
        return alive[self.turn % len(alive)].request(method, path, body, raw=True, timeout=30)

    def one(self, i):
        slot = i % 12
        name = "%s-%d-%d" % (self.prefix, slot, self.gen.get(slot, 0))
        path = "/v1/tenants/t/namespaces/n/streams"
        exists = self.acked.get(name) == "created"
        try:
            if exists:
                status, body = self.call("DELETE", path + "/" + name)
            else:
                status, body = self.call("POST", path, {"name": name, "shards": 1})
        except OSError:
            status, body = 0, b""
        op = "deleted" if exists else "created"
        self.history.setdefault(name, []).append((op, status, time.time()))
        if status in (200, 201):
            self.acked[name] = op
            if op == "created":
                self.incarnations.setdefault(name, []).append(json.loads(body)["incarnation"])
            self.count += 1
        elif status in (0, 421, 503, 504):
            # No leader yet, unreachable or timed out: it may or may not have happened. The
            # name is left out of the check and the slot moves on to a fresh name.
            self.uncertain.add(name)
            self.gen[slot] = self.gen.get(slot, 0) + 1
            self.stop.wait(0.05)
        else:
            self.errors.append("%s %s -> %d %s (history %s)" % (op, name, status, body[:200],
                                                               self.history.get(name)))

    def run(self):
        i = 0
        while not self.stop.is_set():
            self.one(i)
            i += 1

    def start(self):
        self.thread.start()
        return self

    def finish(self):
        self.stop.set()
        self.thread.join(timeout=120)

    def check(self, test, via):
        """Every acknowledged operation is present (names with an uncertain op excluded)."""
        test.assertEqual(self.errors, [])
        streams = {s["name"] for s in via.request("GET", "/v1/tenants/t/namespaces/n/streams")["streams"]}
        checked = 0
        for name, op in self.acked.items():
            if name in self.uncertain:
                continue
            checked += 1
            if op == "created":
                test.assertIn(name, streams, "acknowledged create of %s lost" % name)
            else:
                test.assertNotIn(name, streams, "acknowledged delete of %s undone" % name)
        return checked


class RaftGroup(unittest.TestCase):
    def setUp(self):
        self.cleanups = []

    def tearDown(self):
        for c in reversed(self.cleanups):
            c()

    def group(self, **kw):
        g = Group(**kw)
        self.cleanups.append(g.cleanup)
        return g.start()

    def node(self, **extra):
        n = Node(extra=dict(FAST, **extra))
        self.cleanups.append(n.cleanup)
        return n

    def test_leader_sigkill_during_creates_and_deletes_loses_nothing_acknowledged(self):
        g = self.group()
        broker = g.broker
        g.nodes[0].ensure_ns()
        c = Client(g, "s").start()
        poll(lambda: c.count >= 20, "20 acknowledged operations before the kill")
        old = g.leader()
        self.assertIsNotNone(old)
        old.kill()
        before = c.count
        poll(lambda: c.count >= before + 20, "20 more acknowledged operations after the leader died")
        c.finish()
        survivors = [n for n in g.nodes if n is not old]
        new = g.leader()
        self.assertIsNotNone(new)
        self.assertIsNot(new, old)
        checked = c.check(self, survivors[0])
        self.assertGreater(checked, 5, "too few names with certain outcomes to mean anything")
        # The broker keeps serving through another controller: a new stream on it takes data.
        created = survivors[0].create_stream("after-kill")
        self.assertGreater(created["incarnation"], 0)
        res = poll(lambda: self._publish(broker, "after-kill"), "a publish through the broker")
        self.assertEqual(res, [{"shard": 0, "offset": 0}])
        # The killed member comes back and catches up to identical state.
        old.start()
        m = poll(lambda: g.converged(3), "the restarted member to catch up")
        self.assertEqual(len({x["state_hash"] for x in m["members"]}), 1)
        c.check(self, old)

    def _publish(self, broker, stream):
        try:
            return broker.request("POST", broker.ns_path() + "/streams/%s/records" % stream,
                                  {"records": [{"value": "x", "shard": 0}]})["results"]
        except HttpError:
            return None

    def test_rolling_upgrade_from_8_to_10_to_14_with_traffic_then_both_finalizes(self):
        g = self.group(level="8")
        g.nodes[0].ensure_ns()
        m = g.members()
        self.assertEqual(m["group_level"], 8)
        feats = {f["name"]: f for f in g.nodes[1].request("GET", "/v1/features")["features"]}
        self.assertFalse(feats["stream_incarnations"]["finalized"], "level 8 finalizes nothing")
        c = Client(g, "u").start()
        for level in ("10", "14"):
            for n in g.nodes:
                n.stop()
                n.extra["metadata.level"] = level
                n.start()
                before = c.count
                poll(lambda: c.count >= before + 3, "traffic after restarting member %s" % n.extra["node.id"])
                m = poll(lambda: g.converged(3), "identical states after upgrading member %s to %s"
                         % (n.extra["node.id"], level))
                levels = sorted(x["level"] for x in m["members"])
                self.assertEqual(m["group_level"], levels[0])
                if levels[0] < 14:
                    self.assertEqual(m["level_floor"], 8, "a flagged entry while a member is below 14")
                if level == "10" and n is g.nodes[0]:
                    # Members at 8 remain: the finalize is refused (409), through any member.
                    st, body = g.nodes[0].request("POST", "/v1/features/stream_incarnations/finalize", raw=True)
                    self.assertEqual(st, 409, body)
                    self.assertIn(b"level", body)
                if level == "14" and n is g.nodes[0]:
                    st, body = g.nodes[0].request("POST", "/v1/features/cache_incarnations/finalize", raw=True)
                    self.assertEqual(st, 409, body)
                    st, body = g.nodes[0].request("POST", g.nodes[0].ns_path() + "/caches", {"name": "c1"}, raw=True)
                    self.assertEqual(st, 409, body)  # a cache create while members are below 14
        self.assertEqual(g.members()["group_level"], 14)
        # Both finalizes, sent to a follower: forwarded to the leader.
        leader = g.leader()
        follower = next(n for n in g.nodes if n is not leader)
        for f in ("stream_incarnations", "cache_incarnations"):
            r = follower.request("POST", "/v1/features/%s/finalize" % f)
            self.assertTrue(r["finalized"], r)
        before = c.count
        poll(lambda: c.count >= before + 10, "traffic after the finalizes")
        c.finish()
        m = poll(lambda: g.converged(3), "identical states after the finalizes")
        self.assertEqual(m["level_floor"], 14, "flagged entries raised the floor")
        checked = c.check(self, g.nodes[2])
        self.assertGreater(checked, 5)
        # After the finalize creates get incarnations that only rise per name.
        for name, incs in c.incarnations.items():
            after = [i for i in incs if i > 0]
            self.assertEqual(after, sorted(set(after)), name)
        self.assertTrue(any(i > 0 for v in c.incarnations.values() for i in v))
        cache = follower.request("POST", follower.ns_path() + "/caches", {"name": "c1", "default_ttl_ms": 60000})
        self.assertGreater(cache["incarnation"], 0)

    def test_rolling_upgrade_from_17_to_18_then_counters(self):
        """Level 18 (counters) on real processes: refused while any member is at 17, the
        finalize waits for every member, the first counter raises the floor to 18, and a
        member restarted at 17 afterwards is refused at join."""
        g = self.group(level="17")
        g.nodes[0].ensure_ns()
        feats = {f["name"]: f for f in g.nodes[0].request("GET", "/v1/features")["features"]}
        self.assertFalse(feats["counters"]["finalized"], "a level-17 bootstrap does not finalize it")
        for n in g.nodes:
            n.stop()
            n.extra["metadata.level"] = "18"
            n.start()
            m = poll(lambda: g.converged(3), "identical states after upgrading member %s" % n.extra["node.id"])
            if sorted(x["level"] for x in m["members"])[0] < 18:
                st, body = n.request("POST", n.ns_path() + "/counters", {"name": "early"}, raw=True)
                self.assertEqual(st, 409, body)  # through an 18 member while one is at 17
                self.assertIn(b"level 18", body)
                st, body = n.request("POST", "/v1/features/counters/finalize", raw=True)
                self.assertEqual(st, 409, body)
        self.assertEqual(g.members()["group_level"], 18)
        leader = g.leader()
        follower = next(n for n in g.nodes if n is not leader)
        self.assertTrue(follower.request("POST", "/v1/features/counters/finalize")["finalized"])
        c = follower.request("POST", follower.ns_path() + "/counters", {"name": "hits"})
        self.assertGreater(c["incarnation"], 0)
        m = poll(lambda: g.converged(3), "identical states after the first counter")
        self.assertEqual(m["level_floor"], 18, "the first counter entry raised the floor")
        for n in g.nodes:
            self.assertEqual(n.request("GET", n.ns_path() + "/counters/hits"), c)
        # A follower: the leader restarted at 17 is refused too, but only once
        # metadata.start_timeout_ms has passed (its join is answered late after the
        # leadership moves; a known issue, docs/upgrades.md), which this test's deadline
        # would not tell from a hang.
        leader = poll(g.leader, "a leader")
        n = next(x for x in g.nodes if x is not leader)
        n.stop()
        n.extra["metadata.level"] = "17"
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertRegex(out, r"(floor|level 18)", out[-2000:])

    def test_rolling_upgrade_from_18_to_19_then_batches(self):
        """Level 19 (batch entries) on real processes: no batch is applied while any member
        is at 18 (the floor stays below 19, nobody is held); once every member is at 19,
        concurrent creates share batch entries (the first raises the floor to 19), every
        acknowledged operation is present, the members stay identical, and a member
        restarted at 18 afterwards is refused. The clients stop before each convergence
        check (members are compared at one applied sequence)."""
        g = self.group(level="18")
        g.nodes[0].ensure_ns()
        phase = [0]

        def clients():
            phase[0] += 1
            return [Client(g, "b%d-%d" % (phase[0], k)).start() for k in range(8)]

        def settle(cs, what):
            for c in cs:
                c.finish()
            m = poll(lambda: g.converged(3) or self._no_member_held(g), what)
            self.assertTrue(g.converged(3), what)
            for c in cs:
                c.check(self, g.nodes[2])
            return g.converged(3)

        for n in g.nodes:
            cs = clients()
            n.stop()
            n.extra["metadata.level"] = "19"
            n.start()
            poll(lambda: sum(c.count for c in cs) >= 16, "traffic after restarting member %s" % n.extra["node.id"])
            m = settle(cs, "identical states after upgrading member %s" % n.extra["node.id"])
            if sorted(x["level"] for x in m["members"])[0] < 19:
                self.assertLess(m["level_floor"], 19, "a batch applied while a member is at 18")
        self.assertEqual(g.members()["group_level"], 19)
        # Eight clients through rotating controllers: proposals meet an append in flight on
        # the leader, and the first batch applied raises the floor.
        cs = clients()
        poll(lambda: (g.members() or {}).get("level_floor") == 19, "a batch entry (the floor at 19)")
        before = sum(c.count for c in cs)
        poll(lambda: sum(c.count for c in cs) >= before + 50, "traffic after the first batch")
        m = settle(cs, "identical states after batching")
        self.assertEqual(m["level_floor"], 19)
        leader = poll(g.leader, "a leader")
        n = next(x for x in g.nodes if x is not leader)
        n.stop()
        n.extra["metadata.level"] = "18"
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertRegex(out, r"(floor|level 19)", out[-2000:])

    def _no_member_held(self, g):
        """Fails at once (rather than at the poll's deadline) if a member is held."""
        m = g.members()
        for x in (m or {}).get("members", []):
            self.assertFalse(x["held"], "member %s held: %s" % (x["id"], x.get("held_reason")))
        return False

    def test_a_member_restarted_at_level_8_after_the_floor_rose_is_refused(self):
        g = self.group()
        g.nodes[0].create_stream("x")  # flagged at 14: raises the floor
        g.nodes[0].request("DELETE", g.nodes[0].ns_path() + "/streams/x")
        m = poll(lambda: g.converged(3), "identical states")
        self.assertEqual(m["level_floor"], 14)
        n = g.nodes[2]
        n.stop()
        n.extra["metadata.level"] = "8"
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertRegex(out, r"(floor|level 14)", out[-2000:])
        m = g.members(via=g.nodes[0])
        rec = [x for x in m["members"] if x["id"] == 3][0]
        self.assertEqual(rec["level"], 14, "the refused member's record is unchanged")

    def test_a_member_of_another_cluster_is_refused_naming_both_ids(self):
        g = self.group()
        mine = g.nodes[0].request("GET", "/v1/cluster")["cluster_id"]
        other = self.node(**{"node.id": "7", "node.roles": "controller"}).start()
        theirs = other.request("GET", "/v1/cluster")["cluster_id"]
        other.stop()
        # Its data directory belongs to the other cluster; a fresh raft dir asks to join ours.
        import shutil, os
        shutil.rmtree(os.path.join(other.data_dir, "raft"))
        other.extra["metadata.join"] = "127.0.0.1:%d" % g.nodes[0].rpc_port
        code, out = other.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn(mine, out)
        self.assertIn(theirs, out)
        self.assertEqual(len(g.members()["members"]), 3)

    def test_bad_membership_requests(self):
        g = self.group()
        a = g.nodes[0]
        # A duplicate node id (at another address) is refused with 409.
        st, body = a.request("POST", "/v1/metadata/members",
                             {"id": 2, "raft_address": "127.0.0.1:1", "rpc_address": "127.0.0.1:2",
                              "level": 14}, raw=True)
        self.assertEqual(st, 409, body)
        self.assertIn(b"already a member", body)
        # Malformed bodies.
        for bad in ({"id": 0, "raft_address": "127.0.0.1:1", "rpc_address": "127.0.0.1:2", "level": 14},
                    {"id": 5, "raft_address": "nowhere", "rpc_address": "127.0.0.1:2", "level": 14},
                    {"id": 5, "raft_address": "127.0.0.1:1", "rpc_address": "127.0.0.1:2", "level": 14,
                     "extra": 1}):
            st, body = a.request("POST", "/v1/metadata/members", bad, raw=True)
            self.assertEqual(st, 400, body)
        st, body = a.request("DELETE", "/v1/metadata/members/abc", raw=True)
        self.assertEqual(st, 400, body)
        st, body = a.request("DELETE", "/v1/metadata/members/42", raw=True)
        self.assertEqual(st, 404, body)
        # A malformed RPC frame closes that connection with a logged reason; the member serves on.
        for payload in (b"\xff\xff\xff\x7f", struct.pack("<I", 5) + b"{", b"garbage!"):
            with socket.create_connection(("127.0.0.1", g.nodes[1].rpc_port), timeout=10) as s:
                s.sendall(payload)
                try:
                    # The member may already have closed (and reset) this connection: an
                    # oversized length is refused as soon as it is read.
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                s.settimeout(10)
                try:
                    while s.recv(4096):
                        pass
                except OSError:
                    pass
        poll(lambda: "closing connection" in g.nodes[1].current_log(), "the logged reason")
        self.assertTrue(g.converged(3))
        self.assertEqual(g.nodes[1].request("POST", "/v1/tenants", {"name": "still"})["name"], "still")

    def test_admin_rebuild_metadata_rebuilds_a_member_from_the_leaders_snapshot(self):
        import subprocess
        g = self.group(extra={"raft.snapshot_threshold": "16", "raft.snapshot_trailing": "4"})
        g.nodes[0].ensure_ns()
        for i in range(30):  # past the snapshot threshold: the rebuilt member gets a snapshot
            g.nodes[i % 3].create_stream("r%d" % i)
        n = g.nodes[2]
        n.stop()
        out = subprocess.run(n.args() + ["admin", "rebuild-metadata"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("moved", out.stdout)
        for i in range(30, 40):  # the group moves on while the member is away
            g.nodes[0].create_stream("r%d" % i)
        # Still a voter in the group: with an empty log it must not join under that id
        # (review: it voted at once, and with the leader down could elect a leader without
        # committed entries). Refused, naming the way out.
        code, out = n.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("is still in the group but its raft log is empty", out)
        self.assertIn("sluice members remove 3", out)
        g.nodes[0].request("DELETE", "/v1/metadata/members/3")
        poll(lambda: len(g.members(via=g.nodes[0])["members"]) == 2, "member 3 removed")
        n.start()
        m = poll(lambda: g.converged(3), "the rebuilt member to reach the group's state")
        self.assertEqual(len({x["state_hash"] for x in m["members"]}), 1)
        # Its raft directory was empty: the snapshot it restored is the leader's.
        self.assertIn("restored the catalog from a snapshot", n.current_log())
        names = {s["name"] for s in n.request("GET", "/v1/tenants/t/namespaces/n/streams")["streams"]}
        self.assertEqual(names, {"r%d" % i for i in range(40)})
        # Without metadata.join the command refuses (it would have nowhere to rebuild from).
        n.stop()
        del n.extra["metadata.join"]
        out = subprocess.run(n.args() + ["admin", "rebuild-metadata"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertIn("metadata.join", out.stderr)

    # Review finding: a seed (no metadata.join) whose raft directory was lost bootstrapped a
    # new one-member group under the old cluster's id; the old members, which still list
    # it, took its rewritten log (same indexes and terms) as theirs.
    def test_a_seed_that_lost_its_raft_log_is_refused_and_rejoins_after_removal(self):
        import shutil
        g = self.group()
        g.nodes[0].ensure_ns()
        g.nodes[0].create_stream("before")
        seed = g.nodes[0]
        seed.stop()
        shutil.rmtree(os.path.join(seed.data_dir, "raft"))
        code, out = seed.start_expect_failure()
        self.assertNotEqual(code, 0)
        self.assertIn("this member lost its log", out)
        self.assertFalse(os.path.exists(os.path.join(seed.data_dir, "raft", "metadata1")),
                         "libraft wrote a new log before the refusal")
        # The way out the message names: remove it, join through the others.
        rest = g.nodes[1]
        poll(lambda: rest.request("DELETE", "/v1/metadata/members/1", raw=True)[0] in (200, 204),
             "member 1 removed by the remaining two")
        seed.extra["metadata.join"] = "127.0.0.1:%d" % rest.rpc_port
        seed.start()
        m = poll(lambda: g.converged(3), "the rejoined seed to reach the group's state")
        self.assertEqual(len({x["state_hash"] for x in m["members"]}), 1)
        names = {x["name"] for x in seed.request("GET", "/v1/tenants/t/namespaces/n/streams")["streams"]}
        self.assertIn("before", names)

    # Review finding: three voters with one down, removing a live one left a configuration
    # that needed the dead one: nothing committed any more, the removal included. Refused
    # (409) naming the member that does not answer; removing the dead one works.
    def test_removing_a_live_member_while_another_is_down_is_refused(self):
        g = self.group()
        leader = g.leader()
        others = [n for n in g.nodes if n is not leader]
        dead, live = others
        dead.stop()
        status, body = leader.request("DELETE", "/v1/metadata/members/%s" % live.extra["node.id"], raw=True)
        self.assertEqual(status, 409, body)
        problem = json.loads(body)
        self.assertEqual(problem["code"], "conflict")
        self.assertIn("not answering: %s" % dead.extra["node.id"], problem["detail"])
        self.assertEqual(len(g.members(via=leader)["members"]), 3)
        leader.request("DELETE", "/v1/metadata/members/%s" % dead.extra["node.id"])
        m = poll(lambda: g.converged(2), "a two-member group")
        self.assertEqual(len(m["members"]), 2)
        self.assertEqual(leader.request("POST", "/v1/tenants", {"name": "after"})["name"], "after")

    def test_removing_members_down_to_one_then_the_last_voter_is_refused(self):
        g = self.group()
        leader = g.leader()
        others = [n for n in g.nodes if n is not leader]
        for n in others:
            leader.request("DELETE", "/v1/metadata/members/%s" % n.extra["node.id"])
            n.stop()
        m = poll(lambda: g.converged(1), "a one-member group")
        # The CLI shows the same, and refuses to remove the last voter (exit 1, the reason).
        import subprocess
        from harness import SLUICE_CLI
        out = subprocess.run([SLUICE_CLI, "--url", leader.url, "members", "list"], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(len(json.loads(out.stdout)["members"]), 1)
        out = subprocess.run([SLUICE_CLI, "--url", leader.url, "members", "remove", leader.extra["node.id"]],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("last voter", out.stderr)
        st, body = leader.request("DELETE", "/v1/metadata/members/%s" % leader.extra["node.id"], raw=True)
        self.assertEqual(st, 409, body)
        self.assertIn(b"last voter", body)
        self.assertEqual(leader.request("POST", "/v1/tenants", {"name": "alone"})["name"], "alone")


if __name__ == "__main__":
    unittest.main()
