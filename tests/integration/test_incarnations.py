"""Issue 3: stream incarnations, tombstones and fleet features, against real processes.
Each test is a named regression test from the felix post-mortem; see docs/upgrades.md."""
import json
import os
import shutil
import subprocess
import unittest

from harness import DEADLINE_S, SLUICE_CLI, cleanup_all, HttpError, Node, poll, record_value

# Every feature this build knows ("*"), so one added later is held back too: the "older
# build" brokers below report no feature.
HOLD_BACK = {"metadata.bootstrap_hold_back": "*"}


def dirs(node, stream):
    return node.stream_dirs("t", "n", stream)


class Incarnations(unittest.TestCase):
    def tearDown(self):
        cleanup_all(getattr(self, "nodes", []))

    def node(self, **kw):
        n = Node(**kw)
        self.nodes = getattr(self, "nodes", []) + [n]
        return n

    def problem(self, fn):
        with self.assertRaises(HttpError) as e:
            fn()
        return e.exception

    # felix #1208: a recreated stream gets nothing of the deleted one.
    def test_stream_recreate(self):
        n = self.node().start()
        feats = {f["name"]: f for f in n.request("GET", "/v1/features")["features"]}
        self.assertTrue(feats["stream_incarnations"]["finalized"], "a fresh cluster finalizes at bootstrap")
        first = n.create_stream("orders", shards=1)
        self.assertGreater(first["incarnation"], 0)
        res = n.publish_binary("orders", [(None, b"old-%d" % i) for i in range(5)], producer=(77, 0))
        self.assertEqual([r["offset"] for r in res], list(range(5)))
        n.publish_binary("orders", [(None, b"old-5")], producer=(77, 1))
        g = n.request("GET", n.ns_path() + "/streams/orders/groups/workers/shards/0/records?max=3")
        self.assertEqual(len(g["records"]), 3)
        n.request("POST", n.ns_path() + "/streams/orders/groups/workers/shards/0/ack", {"offsets": [0, 1]})
        # Record 2 nacked, then fetched with max_deliveries=1: it moves to the dead letters,
        # so the new incarnation's empty dead letters below mean something (seeds audit).
        n.request("POST", n.ns_path() + "/streams/orders/groups/workers/shards/0/nack", {"offsets": [2]})
        n.request("GET", n.ns_path() + "/streams/orders/groups/workers/shards/0/records?max=1&max_deliveries=1")
        old_dl = n.request("GET", n.ns_path() + "/streams/orders/groups/workers/shards/0/dead-letters")
        self.assertEqual([record_value(r) for r in old_dl["records"]], [b"old-2"])

        deleted = n.request("DELETE", n.ns_path() + "/streams/orders")
        self.assertEqual(deleted["incarnation"], first["incarnation"])
        tombs = n.request("GET", "/v1/tombstones")["tombstones"]
        self.assertIn({"tenant": "t", "namespace": "n", "name": "orders",
                       "deleted_up_to": first["incarnation"]},
                      [{k: t[k] for k in ("tenant", "namespace", "name", "deleted_up_to")} for t in tombs])
        self.assertEqual(dirs(n, "orders"), [], "the old incarnation's data is gone from disk")

        again = n.create_stream("orders", shards=1)
        self.assertGreater(again["incarnation"], first["incarnation"])
        self.assertEqual(n.fetch("orders", 0, "earliest")["records"], [], "the new stream gets nothing")
        # The same producer id and sequence is not a duplicate in the new incarnation.
        res = n.publish_binary("orders", [(None, b"new-0")], producer=(77, 0))
        self.assertEqual(res[0]["offset"], 0, "offsets start at 0")
        self.assertEqual([record_value(r) for r in n.fetch_all("orders", 0)], [b"new-0"])
        pos = n.request("GET", n.ns_path() + "/streams/orders/groups/workers")["positions"]
        self.assertEqual(pos[0]["committed"], 0)
        self.assertEqual(pos[0]["outstanding"], 0)
        dl = n.request("GET", n.ns_path() + "/streams/orders/groups/workers/shards/0/dead-letters")
        self.assertEqual(dl["records"], [])
        self.assertEqual(dirs(n, "orders"), ["0-%016x" % again["incarnation"]])

    # Review finding: a long poll parked on one incarnation read the next one, after a
    # delete and create, at the old offset, as if one continued the other. A fetch is now
    # pinned to the incarnation it began on: the poll ends 404, or (had it begun after the
    # create) answers the new incarnation, naming it.
    def test_a_long_poll_never_reads_the_next_incarnation_at_the_old_offset(self):
        import re
        import threading
        import urllib.request
        n = self.node().start()
        first = n.create_stream("lp", shards=1)
        n.publish_binary("lp", [(None, b"a-%d" % i) for i in range(3)])
        got = {}

        def poll_it():
            try:
                got["ok"] = n.request("GET", n.ns_path() + "/streams/lp/shards/0/records?offset=3&wait_ms=60000",
                                      timeout=120)
            except HttpError as e:
                got["err"] = e

        def in_flight():
            with urllib.request.urlopen(n.url + "/metrics", timeout=30) as r:
                m = re.search(r"^sluice_http_requests_in_flight (\S+)$", r.read().decode(), re.M)
            return float(m.group(1)) >= 2  # the poll and this scrape

        t = threading.Thread(target=poll_it)
        t.start()
        poll(in_flight, "the long poll to be in flight")
        n.request("DELETE", n.ns_path() + "/streams/lp")
        again = n.create_stream("lp", shards=1)
        self.assertGreater(again["incarnation"], first["incarnation"])
        n.publish_binary("lp", [(None, b"b-%d" % i) for i in range(5)])
        t.join(timeout=120)
        self.assertFalse(t.is_alive())
        if "err" in got:
            # Woken by the delete ("was deleted") or after the create ("... created again").
            self.assertEqual(got["err"].status, 404, got["err"])
            self.assertIn("stream t/n/lp was deleted", got["err"].problem["detail"])
        else:
            body = got["ok"]
            self.assertEqual(body.get("incarnation"), again["incarnation"],
                             "records of the new incarnation answered to a poll of the old one")
            self.assertEqual([record_value(r) for r in body["records"]], [b"b-3", b"b-4"])

    # The level-8 behaviour until the finalize, then the next delete removes the old data.
    def test_legacy_recreate_before_finalize(self):
        n = self.node(extra=HOLD_BACK).start()
        s = n.create_stream("legacy", shards=1)
        self.assertEqual(s["incarnation"], 0)
        n.publish_binary("legacy", [(None, b"old-%d" % i) for i in range(3)])
        n.request("DELETE", n.ns_path() + "/streams/legacy")
        self.assertEqual(n.request("GET", "/v1/tombstones")["tombstones"], [])
        self.assertEqual(dirs(n, "legacy"), ["0"], "level 8 leaves the data")
        again = n.create_stream("legacy", shards=1)
        self.assertEqual(again["incarnation"], 0)
        self.assertEqual([record_value(r) for r in n.fetch_all("legacy", 0)], [b"old-%d" % i for i in range(3)])

        f = n.request("POST", "/v1/features/stream_incarnations/finalize", {})
        self.assertTrue(f["finalized"])
        # A delete after the finalize removes the legacy data; the recreate is incarnated.
        n.request("DELETE", n.ns_path() + "/streams/legacy")
        self.assertEqual(dirs(n, "legacy"), [])
        third = n.create_stream("legacy", shards=1)
        self.assertGreater(third["incarnation"], 0)
        self.assertEqual(n.fetch("legacy", 0, "earliest")["records"], [])

    # felix: "a broker that slept through a delete and a recreate still removes the old data".
    def test_broker_slept_through_delete_and_recreate(self):
        n = self.node().start()
        old = n.create_stream("sleepy", shards=2)
        n.publish_binary("sleepy", [(b"k%d" % i, b"old") for i in range(20)])
        self.assertEqual(n.stop(), 0)
        # The control plane carries on while the broker role sleeps.
        n.extra["node.roles"] = "controller"
        n.start()
        n.request("DELETE", n.ns_path() + "/streams/sleepy")
        new = n.create_stream("sleepy", shards=2)
        self.assertGreater(new["incarnation"], old["incarnation"])
        self.assertEqual(n.stop(), 0)
        self.assertEqual(sorted(dirs(n, "sleepy")), ["0-%016x" % old["incarnation"], "1-%016x" % old["incarnation"]],
                         "nothing touched the broker's disk while it slept")
        # The broker comes back: tombstones first, then the new stream.
        del n.extra["node.roles"]
        n.start()
        log = n.current_log()
        self.assertLess(log.index("deleted 2 shard directories of t/n/sleepy"),
                        log.index("serving stream t/n/sleepy incarnation %d" % new["incarnation"]))
        self.assertEqual(sorted(dirs(n, "sleepy")), ["0-%016x" % new["incarnation"], "1-%016x" % new["incarnation"]])
        for s in range(2):
            self.assertEqual(n.fetch("sleepy", s, "earliest")["records"], [])

    # Regression (issue: "never serve a lower incarnation" lived only in memory): restore the
    # control plane to a backup taken before a delete and recreate, then restart the broker.
    # The restored catalog names the deleted incarnation; the broker's durable floors
    # (<data.dir>/broker/floors) refuse it, and keep the newer incarnation's data.
    def test_restored_control_plane_and_broker_restart_never_reopen_a_deleted_incarnation(self):
        n = self.node().start()
        old = n.create_stream("phoenix", shards=1)
        n.publish_binary("phoenix", [(None, b"old-%d" % i) for i in range(3)])
        self.assertEqual(n.stop(), 0)
        raft_dir = os.path.join(n.data_dir, "raft")
        backup = os.path.join(n.workdir, "raft-backup")
        shutil.copytree(raft_dir, backup)  # the control plane's state, copied while stopped
        n.start()
        n.request("DELETE", n.ns_path() + "/streams/phoenix")
        new = n.create_stream("phoenix", shards=1)
        self.assertGreater(new["incarnation"], old["incarnation"])
        n.publish_binary("phoenix", [(None, b"new-0")])
        self.assertEqual(dirs(n, "phoenix"), ["0-%016x" % new["incarnation"]])
        self.assertEqual(n.stop(), 0)
        # Restore the old control-plane state, then restart the broker.
        shutil.rmtree(raft_dir)
        shutil.copytree(backup, raft_dir)
        n.start()
        restored = n.request("GET", n.ns_path() + "/streams/phoenix")
        self.assertEqual(restored["incarnation"], old["incarnation"], "the catalog was rewound")
        e = self.problem(lambda: n.fetch("phoenix", 0, "earliest"))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        self.assertIn("incarnation %d is at or below" % old["incarnation"], e.problem["detail"])
        self.assertIn("durable floor", e.problem["detail"])
        e = self.problem(lambda: n.publish_binary("phoenix", [(None, b"into-the-dead")]))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        e = self.problem(lambda: n.request("GET", n.ns_path() + "/streams/phoenix/groups/workers"))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        # The deleted incarnation's directory was not reopened; the newer one was not deleted
        # on the restored control plane's word (it never gave one).
        self.assertEqual(dirs(n, "phoenix"), ["0-%016x" % new["incarnation"]])
        self.assertIn("not serving: stream t/n/phoenix incarnation %d" % old["incarnation"], n.current_log())
        self.assertEqual(n.request("GET", "/readyz", raw=True)[0], 200)
        # The way out: delete and recreate on the restored control plane. Deleted, the
        # refused name is gone here too (404, no longer the refusal's 409).
        n.request("DELETE", n.ns_path() + "/streams/phoenix")
        e = self.problem(lambda: n.fetch("phoenix", 0, "earliest"))
        self.assertEqual((e.status, e.problem["code"]), (404, "not_found"))
        fresh = n.create_stream("phoenix", shards=1)
        self.assertGreater(fresh["incarnation"], new["incarnation"])
        self.assertEqual(n.fetch("phoenix", 0, "earliest")["records"], [])
        self.assertEqual(n.publish_binary("phoenix", [(None, b"fresh")])[0]["offset"], 0)

    # The floors are written before the broker acts on them: SIGKILL once a delete is recorded
    # in the floors but before any data moved, then restore the control plane to before the
    # delete. The deleted incarnation's records are still on disk and the restored catalog
    # names it: the broker finishes the delete from its floors and refuses the incarnation.
    def test_crash_after_the_floors_then_restored_control_plane_never_serves_the_deleted_records(self):
        n = self.node().start()
        old = n.create_stream("lazarus", shards=1)
        n.publish_binary("lazarus", [(None, b"old-%d" % i) for i in range(3)])
        self.assertEqual(n.stop(), 0)
        raft_dir = os.path.join(n.data_dir, "raft")
        backup = os.path.join(n.workdir, "raft-backup")
        shutil.copytree(raft_dir, backup)
        n.env = {"SLUICE_FAILPOINTS": "broker.delete.after_floors"}
        n.start()
        try:
            n.request("DELETE", n.ns_path() + "/streams/lazarus", timeout=30)
        except (HttpError, OSError):
            pass  # the process dies applying the delete; the catalog change is committed
        n.proc.wait(timeout=60)
        self.assertEqual(n.proc.returncode, -9, "the failpoint was not reached:\n" + n.log_tail())
        self.assertIn("reached broker.delete.after_floors", n.current_log())
        self.assertEqual(dirs(n, "lazarus"), ["0-%016x" % old["incarnation"]], "no data moved before the crash")
        n.env = {}
        shutil.rmtree(raft_dir)
        shutil.copytree(backup, raft_dir)
        n.start()
        self.assertEqual(n.request("GET", n.ns_path() + "/streams/lazarus")["incarnation"], old["incarnation"])
        self.assertEqual(dirs(n, "lazarus"), [], "the delete recorded in the floors was finished")
        e = self.problem(lambda: n.fetch("lazarus", 0, "earliest"))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        self.assertIn("durable floor", e.problem["detail"])

    # felix: the recreated stream's first assignment must be taken by the broker that held
    # the old shard (incarnation compared first; the delete records an assignment change).
    def test_assignment_after_recreate_is_taken(self):
        n = self.node().start()
        n.create_stream("moves", shards=1)
        old = n.request("GET", n.ns_path() + "/streams/moves/shards")["shards"][0]
        n.publish_binary("moves", [(None, b"x")])
        n.request("DELETE", n.ns_path() + "/streams/moves")
        with self.assertRaises(HttpError):
            n.request("GET", n.ns_path() + "/streams/moves/shards")
        n.create_stream("moves", shards=1)
        new = n.request("GET", n.ns_path() + "/streams/moves/shards")["shards"][0]
        self.assertGreater(new["incarnation"], old["incarnation"])
        self.assertEqual(new["leader"], old["leader"])
        self.assertGreater(new["generation"], 0)
        self.assertEqual(n.publish_binary("moves", [(None, b"y")])[0]["offset"], 0)

    def test_finalize_refused_while_the_broker_lacks_it_then_old_build_refused(self):
        # The only broker runs as an older build (no stream_incarnations).
        n = self.node(extra=dict(HOLD_BACK, **{"broker.features": ""})).start()
        e = self.problem(lambda: n.request("POST", "/v1/features/stream_incarnations/finalize", {}))
        self.assertEqual(e.status, 409)
        self.assertEqual(e.problem["code"], "conflict")
        self.assertIn("lack it: 1", e.problem["detail"])
        feats = {f["name"]: f for f in n.request("GET", "/v1/features")["features"]}
        self.assertEqual(feats["stream_incarnations"]["lacking"], [1])
        self.assertEqual(n.stop(), 0)
        # Upgrade the broker: the finalize succeeds (idempotently).
        del n.extra["broker.features"]
        n.start()
        a = n.request("POST", "/v1/features/stream_incarnations/finalize", {})
        b = n.request("POST", "/v1/features/stream_incarnations/finalize", {})
        self.assertTrue(a["finalized"])
        self.assertEqual(a, b)
        self.assertEqual(n.stop(), 0)
        # The old build's registration is now refused, and it exits with a clear message.
        n.extra["broker.features"] = ""
        code, out = n.start_expect_failure()
        self.assertEqual(code, 3, "refused by the control plane: needs an operator, not a restart")
        self.assertIn("stream_incarnations is finalized", out)

    # Two broker processes, one an older build without the feature (docs/metadata-levels.md).
    def test_finalize_refused_while_a_broker_lacks_it(self):
        ctl = self.node(extra=dict(HOLD_BACK, **{"broker.session_timeout_ms": "1500"})).start()
        old = self.node(extra={"node.id": "2", "node.roles": "broker", "broker.features": "",
                               "metadata.controllers": "127.0.0.1:%d" % ctl.rpc_port})
        old.start()
        self.assertEqual(old.request("GET", "/v1/cluster")["cluster_id"],
                         ctl.request("GET", "/v1/cluster")["cluster_id"])
        brokers = {b["id"]: b for b in ctl.request("GET", "/v1/brokers")["brokers"]}
        self.assertEqual(sorted(brokers), [1, 2])
        self.assertEqual(brokers[2]["features"], [])
        e = self.problem(lambda: ctl.request("POST", "/v1/features/stream_incarnations/finalize", {}))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        self.assertIn("lack it: 2", e.problem["detail"])
        # Through the old broker's own API too: the request reaches the same control plane.
        e = self.problem(lambda: old.request("POST", "/v1/features/stream_incarnations/finalize", {}))
        self.assertEqual(e.status, 409)
        # Stop the old broker; once it stops counting as serving, the finalize succeeds.
        self.assertEqual(old.stop(), 0)

        def try_finalize():
            st, body = ctl.request("POST", "/v1/features/stream_incarnations/finalize", {}, raw=True)
            return json.loads(body) if st == 200 else None
        f = poll(try_finalize, "the finalize to succeed once broker 2 stopped serving")
        self.assertTrue(f["finalized"])
        # The old build's registration is now refused, and it exits with a clear message.
        code, out = old.start_expect_failure()
        self.assertEqual(code, 3)
        self.assertIn("stream_incarnations is finalized", out)

    # Review finding: a broker lacking the feature that was paused (not stopped) while the
    # finalize went through must not come back as serving, nor be given new shards.
    def test_paused_old_broker_is_refused_when_it_comes_back(self):
        import signal
        ctl = self.node(extra=dict(HOLD_BACK, **{"broker.session_timeout_ms": "1500"})).start()
        old = self.node(extra={"node.id": "2", "node.roles": "broker", "broker.features": "",
                               "broker.heartbeat_interval_ms": "200",
                               "metadata.controllers": "127.0.0.1:%d" % ctl.rpc_port}).start()
        old.proc.send_signal(signal.SIGSTOP)

        def try_finalize():
            st, body = ctl.request("POST", "/v1/features/stream_incarnations/finalize", {}, raw=True)
            return st == 200
        poll(try_finalize, "the finalize once the paused broker stopped counting as serving")
        s = ctl.create_stream("fresh", shards=4)
        leaders = {x["leader"] for x in ctl.request("GET", ctl.ns_path() + "/streams/fresh/shards")["shards"]}
        self.assertEqual(leaders, {1}, "no shard of an incarnated stream goes to the old broker")
        old.proc.send_signal(signal.SIGCONT)
        code = old.proc.wait(timeout=60)
        self.assertEqual(code, 3, "fenced: needs an operator, not a restart")
        self.assertIn("refuses this broker", old.current_log())
        self.assertIn("stream_incarnations is finalized", old.current_log())

    # Review finding: a member rolled back to level 8 after the finalize creates at
    # incarnation 0 (apply must store what level 8 stores, so members agree). A broker that
    # slept through the earlier legacy delete still has that name's legacy directory; it
    # must not serve the old records as the new stream's.
    def test_level8_create_after_finalize_is_not_served_over_legacy_data(self):
        # At level 10: a member at 14 flags its entries, which raises the floor to 14, and a
        # roll back to 8 is then refused (test_raft_group covers that).
        n = self.node(extra=dict(HOLD_BACK, **{"metadata.level": "10"})).start()
        self.assertEqual(n.create_stream("legacy", shards=1)["incarnation"], 0)
        n.publish_binary("legacy", [(None, b"old-%d" % i) for i in range(3)])
        n.request("POST", "/v1/features/stream_incarnations/finalize", {})
        self.assertEqual(n.stop(), 0)
        n.extra["node.roles"] = "controller"  # the broker sleeps through the delete
        n.start()
        n.request("DELETE", n.ns_path() + "/streams/legacy")
        self.assertEqual(n.stop(), 0)
        n.extra["metadata.level"] = "8"  # a rolled-back member proposes the recreate
        n.start()
        self.assertEqual(n.create_stream("legacy", shards=1)["incarnation"], 0)
        self.assertEqual(n.stop(), 0)
        del n.extra["node.roles"]
        n.extra["metadata.level"] = "10"
        n.start()
        self.assertEqual(n.request("GET", "/readyz", raw=True)[0], 200)
        e = self.problem(lambda: n.fetch("legacy", 0, 0))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        self.assertIn("predates incarnations", e.problem["detail"])
        e = self.problem(lambda: n.publish_binary("legacy", [(None, b"x")]))
        self.assertEqual(e.status, 409)
        # Deleting it removes the legacy data; the recreate is incarnated and empty.
        n.request("DELETE", n.ns_path() + "/streams/legacy")
        self.assertEqual(dirs(n, "legacy"), [])
        fresh = n.create_stream("legacy", shards=1)
        self.assertGreater(fresh["incarnation"], 0)
        self.assertEqual(n.fetch("legacy", 0, "earliest")["records"], [])

    def test_finalize_bad_input(self):
        n = self.node(extra=HOLD_BACK).start()
        e = self.problem(lambda: n.request("POST", "/v1/features/warp_drive/finalize", {}))
        self.assertEqual((e.status, e.problem["code"]), (404, "not_found"))

    def test_producer_duplicate_and_sequence_gap(self):
        n = self.node().start()
        n.create_stream("idem", shards=1)
        first = n.publish_binary("idem", [(None, b"a"), (None, b"b")], producer=(9, 0))
        dup = n.publish_binary("idem", [(None, b"a"), (None, b"b")], producer=(9, 0))
        self.assertEqual(dup, first, "a retry gets the original offsets")
        self.assertEqual(len(n.fetch_all("idem", 0)), 2, "and is not written twice")
        e = self.problem(lambda: n.publish_binary("idem", [(None, b"c")], producer=(9, 5)))
        self.assertEqual((e.status, e.problem["code"]), (409, "sequence_gap"))
        self.assertIn("1", e.problem["detail"])
        self.assertEqual(len(n.fetch_all("idem", 0)), 2)
        self.assertEqual(n.publish_binary("idem", [(None, b"c")], producer=(9, 1))[0]["offset"], 2)
        # Survives a crash: the state is rebuilt from the log.
        n.kill()
        n.start()
        self.assertEqual(n.publish_binary("idem", [(None, b"c")], producer=(9, 1))[0]["offset"], 2)
        self.assertEqual(len(n.fetch_all("idem", 0)), 3)

    def test_group_ack_nack_redelivery_and_dead_letters(self):
        n = self.node().start()
        n.create_stream("jobs", shards=1)
        n.publish_binary("jobs", [(None, b"job-%d" % i) for i in range(3)])
        base = n.ns_path() + "/streams/jobs/groups/w/shards/0"
        q = "/records?max=10&max_deliveries=2&ack_timeout_ms=60000"
        got = n.request("GET", base + q)["records"]
        self.assertEqual([(r["offset"], r["delivery"]) for r in got], [(0, 1), (1, 1), (2, 1)])
        n.request("POST", base + "/ack", {"offsets": [0]})
        e = self.problem(lambda: n.request("POST", base + "/ack", {"offsets": [0]}))
        self.assertEqual((e.status, e.problem["code"]), (400, "invalid_argument"))
        e = self.problem(lambda: n.request("POST", base + "/ack", {"offsets": [99]}))
        self.assertEqual(e.status, 400)
        n.request("POST", base + "/nack", {"offsets": [1, 2]})
        again = n.request("GET", base + q)["records"]
        self.assertEqual([(r["offset"], r["delivery"]) for r in again], [(1, 2), (2, 2)])
        n.request("POST", base + "/ack", {"offsets": [1]})
        n.request("POST", base + "/nack", {"offsets": [2]})
        # A third delivery would exceed max_deliveries=2: record 2 goes to the dead letters.
        self.assertEqual(n.request("GET", base + q)["records"], [])
        dl = n.request("GET", base + "/dead-letters")["records"]
        self.assertEqual([record_value(r) for r in dl], [b"job-2"])
        self.assertEqual(dl[0]["headers"]["sluice-original-offset"], "2")
        pos = n.request("GET", n.ns_path() + "/streams/jobs/groups/w")["positions"][0]
        self.assertEqual(pos["committed"], 3)
        # Acks survive a crash.
        n.kill()
        n.start()
        self.assertEqual(n.request("GET", base + q)["records"], [])
        replayed = n.request("POST", base + "/dead-letters/replay", {"from": 0, "to": 1})
        self.assertEqual(replayed["replayed"], 1)
        # Every dead letter replayed: the page is empty and names the end as next_offset, so
        # a client paging to the end stops (regression: it answered `from`, 0, for ever).
        dl = n.request("GET", base + "/dead-letters")
        self.assertEqual(dl["records"], [])
        self.assertGreaterEqual(dl["end"], 1)
        self.assertEqual(dl["next_offset"], dl["end"])
        redo = n.request("GET", base + q)["records"]
        self.assertEqual([record_value(r) for r in redo], [b"job-2"])
        self.assertEqual(redo[0]["offset"], 3)

    def test_an_ack_of_a_deleted_streams_offsets_never_settles_the_recreated_streams_group(self):
        """Regression (review): consumer 1 fetched offsets 0-2 of a stream; the stream was
        deleted and created again, and consumer 2 fetched the new stream's 0-2; consumer 1's
        late ack then committed the new records for the group, and had consumer 2 crashed
        they were never redelivered. The fetch names its incarnation; an ack or nack that
        sends it is refused (409) once the stream is another one."""
        n = self.node().start()
        n.create_stream("jobs2", shards=1)
        n.publish_binary("jobs2", [(None, b"old-%d" % i) for i in range(3)])
        base = n.ns_path() + "/streams/jobs2/groups/w/shards/0"
        q = "/records?max=10&ack_timeout_ms=600000"
        first = n.request("GET", base + q)
        self.assertEqual([r["offset"] for r in first["records"]], [0, 1, 2])
        self.assertEqual(first["incarnation"], n.request("GET", n.ns_path() + "/streams/jobs2")["incarnation"])
        n.request("DELETE", n.ns_path() + "/streams/jobs2")
        n.create_stream("jobs2", shards=1)
        n.publish_binary("jobs2", [(None, b"new-%d" % i) for i in range(3)])
        second = n.request("GET", base + q)
        self.assertEqual([record_value(r) for r in second["records"]], [b"new-0", b"new-1", b"new-2"])
        self.assertGreater(second["incarnation"], first["incarnation"])
        for op in ("ack", "nack"):
            e = self.problem(lambda: n.request("POST", base + "/" + op,
                                               {"offsets": [0, 1, 2], "incarnation": first["incarnation"]}))
            self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
            self.assertIn("created again", e.problem["detail"])
        pos = n.request("GET", n.ns_path() + "/streams/jobs2/groups/w")["positions"][0]
        self.assertEqual((pos["committed"], pos["outstanding"]), (0, 3), "nothing changed")
        for bad in (-1, "7", 1.5):
            e = self.problem(lambda: n.request("POST", base + "/ack", {"offsets": [0], "incarnation": bad}))
            self.assertEqual((e.status, e.problem["code"]), (400, "invalid_argument"), bad)
        n.request("POST", base + "/ack", {"offsets": [0, 1, 2], "incarnation": second["incarnation"]})
        pos = n.request("GET", n.ns_path() + "/streams/jobs2/groups/w")["positions"][0]
        self.assertEqual((pos["committed"], pos["outstanding"]), (3, 0))


    def test_a_replay_of_a_deleted_streams_dead_letters_never_replays_the_recreated_streams(self):
        """Regression (review): dead letters listed from one incarnation, then the stream
        deleted and created again with dead letters of its own: a replay of [0, 1) published
        the new stream's dead letter. The dead-letters answer names its incarnation; a replay
        that sends it is refused (409) once the stream is another one."""
        n = self.node().start()
        base = n.ns_path() + "/streams/dl/groups/w/shards/0"
        q = "/records?max=10&max_deliveries=1&ack_timeout_ms=600000"

        def one_dead_letter(value):
            n.create_stream("dl", shards=1)
            n.publish_binary("dl", [(None, value)])
            got = n.request("GET", base + q)["records"]
            self.assertEqual([record_value(r) for r in got], [value])
            n.request("POST", base + "/nack", {"offsets": [0]})
            self.assertEqual(n.request("GET", base + q)["records"], [])  # a second delivery: dead
            dl = n.request("GET", base + "/dead-letters")
            self.assertEqual([record_value(r) for r in dl["records"]], [value])
            self.assertEqual(dl["incarnation"], n.request("GET", n.ns_path() + "/streams/dl")["incarnation"])
            return dl["incarnation"]
        old = one_dead_letter(b"old")
        n.request("DELETE", n.ns_path() + "/streams/dl")
        new = one_dead_letter(b"new")
        self.assertGreater(new, old)
        e = self.problem(lambda: n.request("POST", base + "/dead-letters/replay",
                                           {"from": 0, "to": 1, "incarnation": old}))
        self.assertEqual((e.status, e.problem["code"]), (409, "conflict"))
        self.assertIn("nothing was replayed", e.problem["detail"])
        self.assertEqual(n.request("GET", base + q)["records"], [], "the new stream's dead letter was replayed")
        for bad in (-1, "7", 1.5):
            e = self.problem(lambda: n.request("POST", base + "/dead-letters/replay",
                                               {"from": 0, "to": 1, "incarnation": bad}))
            self.assertEqual((e.status, e.problem["code"]), (400, "invalid_argument"), bad)
        p = subprocess.run([SLUICE_CLI, "--url", n.url, "dead-letters", "replay", "t/n/dl", "w", "--shard", "0",
                            "--from", "0", "--to", "1", "--incarnation", str(old)],
                           capture_output=True, text=True, timeout=DEADLINE_S)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("409 conflict", p.stderr)
        p = subprocess.run([SLUICE_CLI, "--url", n.url, "dead-letters", "replay", "t/n/dl", "w", "--shard", "0",
                            "--from", "0", "--to", "1", "--incarnation", str(new)],
                           capture_output=True, text=True, timeout=DEADLINE_S)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["replayed"], 1)
        redo = n.request("GET", base + q)["records"]
        self.assertEqual([record_value(r) for r in redo], [b"new"])

if __name__ == "__main__":
    unittest.main()
