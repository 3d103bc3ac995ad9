"""GET /metrics on a real node: the publish latency histogram (docs/operations.md
"Metrics") counts each successful publish once, under its ack mode, with cumulative
buckets that agree with its count; failed publishes are not in it."""
import re
import unittest
import urllib.request

from harness import HttpError, Node, record_value


def scrape(node):
    with urllib.request.urlopen(node.url + "/metrics", timeout=30) as r:
        return r.read().decode()


def histogram(text, name, ack):
    buckets = []
    for m in re.finditer(r'^%s_bucket\{ack="%s",le="([^"]+)"\} (\S+)$' % (name, ack), text, re.M):
        buckets.append((m.group(1), float(m.group(2))))
    count = re.search(r'^%s_count\{ack="%s"\} (\S+)$' % (name, ack), text, re.M)
    total = re.search(r'^%s_sum\{ack="%s"\} (\S+)$' % (name, ack), text, re.M)
    return buckets, float(count.group(1)), float(total.group(1))


class Metrics(unittest.TestCase):
    def setUp(self):
        self.node = Node()

    def tearDown(self):
        self.node.cleanup()

    def test_publish_latency_histogram_counts_successes_by_ack_mode(self):
        n = self.node
        n.start()
        n.create_stream("m", shards=2)
        for _ in range(3):
            n.publish_binary("m", [(b"k", b"v" * 100)] * 5, ack="leader")
        n.publish_binary("m", [(b"k", b"v")], ack="none")
        with self.assertRaises(HttpError):
            n.publish_binary("no-such-stream", [(b"k", b"v")], ack="leader")

        text = scrape(n)
        self.assertIn("# TYPE sluice_publish_seconds histogram", text)
        for ack, expected in (("leader", 3), ("none", 1), ("quorum", 0)):
            buckets, count, total = histogram(text, "sluice_publish_seconds", ack)
            self.assertEqual(count, expected, ack)
            self.assertEqual(buckets[-1], ("+Inf", expected), ack)
            values = [v for _, v in buckets]
            self.assertEqual(values, sorted(values), "buckets must be cumulative: %s" % buckets)
            if expected:
                self.assertGreater(total, 0, ack)
                self.assertLess(total, 60 * expected, ack)
            else:
                self.assertEqual(total, 0, ack)

    def test_serial_publishes_complete_inline_and_survive_sigkill(self):
        """docs/architecture.md "Inline appends": a lone client's publish, with no other
        request in flight, is written, synced and answered on the I/O thread that read it
        (counted in sluice_publish_completed_inline_total). Every one acknowledged is there
        after a SIGKILL."""
        n = self.node
        n.start()
        n.create_stream("inl", shards=1)
        sent = []
        for i in range(40):
            value = b"inline-%d" % i
            n.publish_binary("inl", [(b"k", value)], ack="leader")
            sent.append(value)
        m = re.search(r"^sluice_publish_completed_inline_total (\S+)$", scrape(n), re.M)
        inline = float(m.group(1))
        # Not every one: the flusher may still be finishing the previous group when the
        # next request arrives, and then that request joins the flusher's queue.
        self.assertGreater(inline, 0)
        self.assertLessEqual(inline, 40)
        n.kill()
        n.start()
        got = [record_value(r) for r in n.fetch_all("inl", 0)]
        self.assertEqual(got, sent)


if __name__ == "__main__":
    unittest.main()
