"""Counters in the catalog (docs/api.md "Counters (catalog)", metadata level 18): REST and
CLI against a real sluiced. A recreated counter is a new, higher incarnation, also after a
restart; counters are refused until the fleet feature `counters` is finalized; bad input
gets its stable error code. The counter data plane (add/get of keys) is not served yet.
"""
import json
import subprocess
import unittest

from harness import SLUICE_CLI, Node


def problem(node, method, path, body=None):
    st, payload = node.request(method, path, body, raw=True)
    return st, json.loads(payload) if payload else None


class CountersTest(unittest.TestCase):
    def setUp(self):
        self.node = Node().start()
        self.node.ensure_ns()
        self.base = self.node.ns_path() + "/counters"

    def tearDown(self):
        self.node.cleanup()

    def create(self, name="hits"):
        return self.node.request("POST", self.base, {"name": name})

    def test_recreate_is_a_new_higher_incarnation_also_after_a_restart(self):
        seen = []
        for _ in range(3):
            c = self.create()
            self.assertEqual((c["tenant"], c["namespace"], c["name"]), ("t", "n", "hits"))
            self.assertGreater(c["incarnation"], 0)
            if seen:
                self.assertGreater(c["incarnation"], seen[-1])
            seen.append(c["incarnation"])
            self.assertEqual(self.node.request("GET", self.base + "/hits"), c)
            d = self.node.request("DELETE", self.base + "/hits")
            self.assertEqual(d, c)
        tombs = self.node.request("GET", "/v1/tombstones")
        self.assertNotIn("hits", json.dumps(tombs.get("tombstones", [])),
                         "counter tombstones are not stream tombstones")
        self.node.stop()
        self.node.start()
        c = self.create()
        self.assertGreater(c["incarnation"], seen[-1], "the tombstone survived the restart")
        self.assertEqual(self.node.request("GET", self.base)["counters"], [c])

    def test_bad_input_each_gets_its_code(self):
        cases = [
            ("POST", self.base, {"name": "bad name"}, 400, "invalid_name"),
            ("POST", self.base, {"name": ""}, 400, "invalid_name"),
            ("POST", self.base, {"name": "x" * 256}, 400, "invalid_name"),
            ("POST", self.base, {"name": "c", "spare": 1}, 400, "unknown_field"),
            ("POST", self.base, {}, 400, "invalid_argument"),
            ("POST", self.base, {"name": 5}, 400, "invalid_argument"),
            ("POST", self.base, b"{not json", 400, "malformed_body"),
            ("GET", self.base + "/nope", None, 404, "not_found"),
            ("DELETE", self.base + "/nope", None, 404, "not_found"),
            ("GET", "/v1/tenants/t/namespaces/none/counters", None, 404, "not_found"),
            ("POST", "/v1/tenants/t/namespaces/none/counters", {"name": "c"}, 404, "not_found"),
            ("GET", self.base + "/bad%00name", None, 400, "invalid_name"),
        ]
        for method, path, body, status, code in cases:
            with self.subTest(method=method, path=path, body=body):
                st, p = problem(self.node, method, path, body)
                self.assertEqual(st, status, p)
                self.assertEqual(p["code"], code, p)
        self.create()
        st, p = problem(self.node, "POST", self.base, {"name": "hits"})
        self.assertEqual((st, p["code"]), (409, "already_exists"), p)
        st, p = problem(self.node, "DELETE", self.node.ns_path(), None)
        self.assertEqual((st, p["code"]), (409, "conflict"), "a namespace with a counter is not deleted")

    def test_cli_create_show_list_delete(self):
        def cli(*args):
            p = subprocess.run([SLUICE_CLI, "--url", self.node.url, "counter"] + list(args),
                               capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr

        rc, out, err = cli("create", "t/n/a")
        self.assertEqual(rc, 0, err)
        a = json.loads(out)
        self.assertGreater(a["incarnation"], 0)
        self.assertEqual(cli("create", "t/n/b")[0], 0)
        rc, out, err = cli("show", "t/n/a")
        self.assertEqual((rc, json.loads(out)), (0, a), err)
        rc, out, err = cli("list", "t/n")
        self.assertEqual(rc, 0, err)
        self.assertEqual([json.loads(x)["name"] for x in out.splitlines()], ["a", "b"])
        rc, out, err = cli("delete", "t/n/a")
        self.assertEqual((rc, json.loads(out)), (0, a), err)
        rc, out, err = cli("show", "t/n/a")
        self.assertNotEqual(rc, 0)
        self.assertIn("not_found", out + err)
        rc, _, err = cli("list", "t")
        self.assertEqual(rc, 2, "TENANT/NS is required: a usage error")
        rc, _, err = cli("frobnicate", "t/n/a")
        self.assertEqual(rc, 2)


class CountersBeforeTheFinalizeTest(unittest.TestCase):
    """An upgraded cluster: `counters` held back at bootstrap, as on a cluster that was
    bootstrapped by a level-17 build."""

    def setUp(self):
        self.node = Node(extra={"metadata.bootstrap_hold_back": "counters"}).start()
        self.node.ensure_ns()
        self.base = self.node.ns_path() + "/counters"

    def tearDown(self):
        self.node.cleanup()

    def test_refused_until_finalized(self):
        st, p = problem(self.node, "POST", self.base, {"name": "hits"})
        self.assertEqual((st, p["code"]), (409, "conflict"), p)
        self.assertIn("counters", p["detail"])
        feats = {f["name"]: f for f in self.node.request("GET", "/v1/features")["features"]}
        self.assertFalse(feats["counters"]["finalized"])
        self.assertEqual(feats["counters"]["required_level"], 18)
        self.node.request("POST", "/v1/features/counters/finalize", {})
        c = self.node.request("POST", self.base, {"name": "hits"})
        self.assertGreater(c["incarnation"], 0)


if __name__ == "__main__":
    unittest.main()
