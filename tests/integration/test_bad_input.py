"""Acceptance 4: bad input gets a clear, typed error and changes nothing."""
import json
import os
import subprocess
import time
import unittest

from harness import HttpError, Node, poll


class BadInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.node = Node(extra={"http.max_body_bytes": "65536", "storage.segment_bytes": "4096",
                               "storage.retention_interval_ms": "100"}).start()
        cls.node.create_stream("ok", shards=1)

    @classmethod
    def tearDownClass(cls):
        cls.node.cleanup()

    def curl(self, method, path, data=None, ctype="application/json", host=None):
        """Real curl; --path-as-is so that '..' reaches the server unnormalised."""
        args = ["curl", "-s", "--path-as-is", "-o", "-", "-w", "\n%{http_code}", "-X", method,
                self.node.url + path]
        if host is not None:
            args += ["-H", "Host: " + host]
        if data is not None:
            args += ["-H", "Content-Type: " + ctype, "--data-binary", "@-"]
        p = subprocess.run(args, input=data if isinstance(data, bytes) else (data or "").encode(),
                           capture_output=True, timeout=60)
        body, _, code = p.stdout.decode(errors="replace").rpartition("\n")
        return int(code), body

    def assertProblem(self, status, body, want_status, want_code):
        self.assertEqual(status, want_status, body)
        p = json.loads(body)
        self.assertEqual(p["status"], want_status)
        self.assertEqual(p["code"], want_code)
        self.assertTrue(p["detail"])
        self.assertIn(want_code, p["type"])

    def disk_entries(self):
        out = set()
        for root, dirs, files in os.walk(os.path.join(self.node.data_dir, "shards")):
            for d in dirs:
                out.add(os.path.join(root, d))
        return out

    def test_bad_names_get_400_and_create_nothing_on_disk(self):
        before = self.disk_entries()
        bad_in_body = ["..", ".", "a/b", "a\u0000b", "", "x" * 256, "bell\u0007", "new\nline", "../../etc"]
        for name in bad_in_body:
            for path in ("/v1/tenants", "/v1/tenants/t/namespaces", "/v1/tenants/t/namespaces/n/streams"):
                body = {"name": name, "shards": 1} if path.endswith("streams") else {"name": name}
                status, body = self.curl("POST", path, json.dumps(body))
                with self.subTest(name=repr(name), path=path):
                    self.assertProblem(status, body, 400, "invalid_name")
        bad_in_path = ["..", "%2E%2E", "a%2Fb", "a%00b", "%0A", "x" * 256, "%7F"]
        for seg in bad_in_path:
            for path in ("/v1/tenants/%s/namespaces/n/streams/s" % seg,
                         "/v1/tenants/t/namespaces/%s/streams/s/records" % seg,
                         "/v1/tenants/t/namespaces/n/streams/%s/records" % seg):
                status, body = self.curl("POST" if path.endswith("records") else "GET", path,
                                         json.dumps({"records": [{"value": "v"}]}))
                with self.subTest(seg=seg, path=path):
                    self.assertProblem(status, body, 400, "invalid_name")
        self.assertEqual(self.disk_entries(), before)
        names = [s["name"] for s in self.node.request("GET", "/v1/tenants")["tenants"]]
        self.assertEqual(names, ["t"])

    def test_a_node_without_auth_answers_only_requests_addressed_to_the_local_machine(self):
        """Regression (review): DNS rebinding. A web page whose own name was rebound to
        127.0.0.1 reached every route of a node without auth from the user's browser, deletes
        included; its requests carry the page's name as the Host."""
        port = self.node.http_port
        for host in ("evil.example:%d" % port, "evil.example", "127.0.0.1.evil.example:%d" % port):
            with self.subTest(host=host):
                status, body = self.curl("DELETE", "/v1/tenants/t/namespaces/n/streams/ok", host=host)
                self.assertProblem(status, body, 403, "forbidden")
                self.assertIn("local machine", json.loads(body)["detail"])
        status, _ = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/ok", host="evil.example")
        self.assertEqual(status, 403)
        # The stream is still there; local names are served.
        for host in ("localhost:%d" % port, "127.0.0.1:%d" % port, "LocalHost"):
            with self.subTest(host=host):
                status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/ok", host=host)
                self.assertEqual(status, 200, body)

    def test_oversized_body_gets_413(self):
        status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams/ok/records",
                                 json.dumps({"records": [{"value": "x" * 70000}]}))
        self.assertProblem(status, body, 413, "body_too_large")
        self.assertEqual(self.node.fetch("ok", 0, "latest")["next_offset"],
                         self.node.fetch("ok", 0, "latest")["next_offset"])

    def test_malformed_json_gets_400(self):
        for bad in ['{"records": [', "not json", '{"records": "x"}', '[]']:
            status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams/ok/records", bad)
            with self.subTest(body=bad):
                self.assertEqual(status, 400, body)
                self.assertIn(json.loads(body)["code"], ("malformed_body", "invalid_argument"))
        status, body = self.curl("POST", "/v1/tenants", "{bad")
        self.assertProblem(status, body, 400, "malformed_body")

    def test_unknown_field_gets_400(self):
        status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams",
                                 json.dumps({"name": "u", "shards": 1, "replicas": 3}))
        self.assertProblem(status, body, 400, "unknown_field")
        self.assertIn("replicas", json.loads(body)["detail"])

    def test_unknown_stream_gets_404(self):
        status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/nope")
        self.assertProblem(status, body, 404, "not_found")
        status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams/nope/records",
                                 json.dumps({"records": [{"value": "v"}]}))
        self.assertProblem(status, body, 404, "not_found")
        status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/nope/shards/0/records?offset=0")
        self.assertProblem(status, body, 404, "not_found")
        status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/ok/shards/9/records?offset=0")
        self.assertProblem(status, body, 404, "not_found")

    def test_bad_spec_and_bad_offsets(self):
        for spec in ({"name": "z", "shards": 0}, {"name": "z", "shards": 100000},
                     {"name": "z", "shards": "four"}, {"name": "z", "ack": "sometimes"}):
            status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams", json.dumps(spec))
            with self.subTest(spec=spec):
                self.assertEqual(status, 400, body)
        for off in ("-1", "abc", "1e3"):
            status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/ok/shards/0/records?offset=" + off)
            with self.subTest(offset=off):
                self.assertEqual(status, 400, body)

    def test_bad_replication_specs_get_400_naming_the_field_and_create_nothing(self):
        base = "/v1/tenants/t/namespaces/n/streams"
        for spec, field in (({"name": "r", "replication_factor": 0}, "replication_factor"),
                            ({"name": "r", "replication_factor": 6}, "replication_factor"),
                            ({"name": "r", "replication_factor": -1}, "replication_factor"),
                            ({"name": "r", "replication_factor": "three"}, "replication_factor"),
                            ({"name": "r", "min_insync": 0}, "min_insync"),
                            ({"name": "r", "min_insync": 2}, "min_insync"),
                            ({"name": "r", "replication_factor": 3, "min_insync": 4}, "min_insync")):
            status, body = self.curl("POST", base, json.dumps(spec))
            with self.subTest(spec=spec):
                self.assertProblem(status, body, 400, "invalid_argument")
                self.assertIn(field, json.loads(body)["detail"])
        # Structurally valid, but one live broker cannot hold three copies: 503 naming how
        # many it needs; never created with fewer copies than asked for.
        status, body = self.curl("POST", base, json.dumps({"name": "r", "replication_factor": 3}))
        self.assertProblem(status, body, 503, "not_enough_replicas")
        self.assertIn("3", json.loads(body)["detail"])
        status, _ = self.curl("GET", base + "/r")
        self.assertEqual(status, 404)
        # One copy, asked for explicitly: created, and described with its replication.
        status, body = self.curl("POST", base, json.dumps({"name": "r1", "replication_factor": 1}))
        self.assertEqual(status, 201, body)
        status, body = self.curl("GET", base + "/r1")
        self.assertEqual(status, 200, body)
        got = json.loads(body)
        self.assertEqual((got["replication_factor"], got["min_insync"]), (1, 1))

    def test_bad_leader_moves_get_clear_errors_and_change_nothing(self):
        shards = "/v1/tenants/t/namespaces/n/streams/ok/shards"
        status, body = self.curl("GET", shards)
        self.assertEqual(status, 200, body)
        before = json.loads(body)["shards"][0]
        leader = before["leader"]
        path = shards + "/0/leader"
        cases = (
            ("{", 400, "malformed_body", None),
            ("[]", 400, "invalid_argument", None),
            (json.dumps({}), 400, "invalid_argument", "broker"),
            (json.dumps({"broker": 2, "colour": "red"}), 400, "unknown_field", "colour"),
            (json.dumps({"broker": "two"}), 400, "invalid_argument", "broker"),
            (json.dumps({"broker": 0}), 400, "invalid_argument", "broker"),
            (json.dumps({"broker": -3}), 400, "invalid_argument", "broker"),
            (json.dumps({"broker": 99}), 400, "invalid_argument", "not one of its replicas"),
            (json.dumps({"broker": leader}), 409, "conflict", "already leads"),
        )
        for data, want_status, want_code, detail in cases:
            status, body = self.curl("POST", path, data)
            with self.subTest(body=data):
                self.assertProblem(status, body, want_status, want_code)
                if detail:
                    self.assertIn(detail, json.loads(body)["detail"])
        for bad_path, want_status, want_code in ((shards + "/9/leader", 404, "not_found"),
                                                 (shards + "/x/leader", 400, "invalid_argument"),
                                                 ("/v1/tenants/t/namespaces/n/streams/nope/shards/0/leader", 404,
                                                  "not_found")):
            status, body = self.curl("POST", bad_path, json.dumps({"broker": 2}))
            with self.subTest(path=bad_path):
                self.assertProblem(status, body, want_status, want_code)
        status, body = self.curl("GET", path)
        self.assertEqual(status, 405, body)
        status, body = self.curl("GET", shards)
        self.assertEqual(json.loads(body)["shards"][0], before)

    def test_bad_elections_get_clear_errors_and_change_nothing(self):
        shards = "/v1/tenants/t/namespaces/n/streams/ok/shards"
        before = json.loads(self.curl("GET", shards)[1])["shards"][0]
        path = shards + "/0/elect"
        cases = (
            ("{", 400, "malformed_body", None),
            (json.dumps({"unclean": True}), 400, "invalid_argument", "broker"),
            (json.dumps({"broker": 1, "unclean": True, "force": 1}), 400, "unknown_field", "force"),
            (json.dumps({"broker": 1, "unclean": "yes"}), 400, "invalid_argument", "unclean"),
            (json.dumps({"broker": 1}), 400, "invalid_argument", "unclean"),
            (json.dumps({"broker": 1, "unclean": False}), 400, "invalid_argument", "unclean"),
            (json.dumps({"preferred": True, "unclean": True, "broker": 1}), 400, "invalid_argument", "either"),
            (json.dumps({"preferred": True, "broker": 1}), 400, "invalid_argument", "names no broker"),
            (json.dumps({"preferred": True}), 400, "invalid_argument", "one replica"),
            # An unreplicated shard has nobody else to elect.
            (json.dumps({"broker": 1, "unclean": True}), 400, "invalid_argument", "one replica"),
        )
        for data, want_status, want_code, detail in cases:
            status, body = self.curl("POST", path, data)
            with self.subTest(body=data):
                self.assertProblem(status, body, want_status, want_code)
                if detail:
                    self.assertIn(detail, json.loads(body)["detail"])
        status, body = self.curl("POST", shards + "/9/elect", json.dumps({"broker": 1, "unclean": True}))
        self.assertProblem(status, body, 404, "not_found")
        self.assertEqual(json.loads(self.curl("GET", shards)[1])["shards"][0], before)

    def test_fetch_beyond_end_waits_then_returns_empty(self):
        hwm = self.node.fetch("ok", 0, "latest")["next_offset"]
        t0 = time.monotonic()
        r = self.node.fetch("ok", 0, hwm, wait_ms=700)
        self.assertGreaterEqual(time.monotonic() - t0, 0.6)  # it waited (a lower bound only)
        self.assertEqual(r["records"], [])
        self.assertEqual(r["next_offset"], hwm)

    def test_long_poll_returns_when_a_record_arrives(self):
        import threading
        hwm = self.node.fetch("ok", 0, "latest")["next_offset"]
        got = {}
        t = threading.Thread(target=lambda: got.update(self.node.fetch("ok", 0, hwm, wait_ms=30000)))
        t.start()
        time.sleep(0.2)  # let the fetch park; correctness does not depend on it
        self.node.publish_binary("ok", [(None, b"wake")])
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual([r["value"] for r in got["records"]], ["wake"])

    def test_fetch_before_retained_start_gets_typed_error(self):
        n = self.node
        n.create_stream("ret", shards=1, retention={"max_bytes": 8192})
        for i in range(60):
            n.publish_binary("ret", [(None, b"r" * 300)] * 3)
        poll(lambda: n.request("GET", n.ns_path() + "/streams/ret/shards")["shards"][0]["log_start"] > 0,
             "retention to remove the oldest segment")
        status, body = self.curl("GET", "/v1/tenants/t/namespaces/n/streams/ret/shards/0/records?offset=0")
        self.assertProblem(status, body, 416, "offset_out_of_range")
        start = n.fetch("ret", 0, "earliest")["records"][0]["offset"]
        self.assertGreater(start, 0)

    def test_wrong_content_type_gets_415(self):
        status, body = self.curl("POST", "/v1/tenants/t/namespaces/n/streams/ok/records", "x", "text/plain")
        self.assertProblem(status, body, 415, "unsupported_media")

    def test_unknown_route_and_method(self):
        status, body = self.curl("GET", "/v1/nothing-here")
        self.assertProblem(status, body, 404, "not_found")
        status, _ = self.curl("PUT", "/v1/tenants")
        self.assertEqual(status, 405)


if __name__ == "__main__":
    unittest.main()
