"""GET /metrics on a real node: the publish latency histogram (docs/operations.md
"Metrics") counts each successful publish once, under its ack mode, with cumulative
buckets that agree with its count; failed publishes are not in it."""
import os
import re
import unittest
import urllib.request

from harness import HttpError, Node, poll, record_value


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

    def test_shard_size_and_preallocated_bytes_add_up_to_the_files_on_disk(self):
        """docs/operations.md "Metrics": sluice_shard_size_bytes counts batches, and
        sluice_shard_preallocated_bytes the zeros held ahead of the writes (a spare, a
        preallocated active segment's unwritten end); together they are the segment files'
        size on disk. Small segments and small syncs, so that a spare is made and taken."""
        seg = 1 << 20
        n = Node(extra={"storage.segment_bytes": str(seg)})
        self.node.cleanup()
        self.node = n
        n.start()
        n.create_stream("pm", shards=1)
        labels = 'tenant="t",namespace="n",stream="pm",shard="0"'

        def shard_metric(text, name):
            m = re.search(r"^%s\{%s,incarnation=\"\d+\"\} (\S+)$" % (name, labels), text, re.M)
            return None if m is None else int(float(m.group(1)))

        def on_disk():
            dirs = n.stream_dirs("t", "n", "pm")
            self.assertEqual(len(dirs), 1, dirs)
            log = os.path.join(n.data_dir, "shards", "t", "n", "pm", dirs[0], "log")
            return sum(os.path.getsize(os.path.join(log, f)) for f in os.listdir(log)
                       if f.endswith(".log") or f == "next-segment.tmp")

        def agree():
            text = scrape(n)
            size, pre = shard_metric(text, "sluice_shard_size_bytes"), shard_metric(text, "sluice_shard_preallocated_bytes")
            disk = on_disk()
            agree.last = (size, pre, disk)
            return size is not None and pre is not None and size + pre == disk and (size, pre)
        agree.last = None

        # 16 KiB per request, one sync each: past half a segment a spare is made.
        value = b"p" * 1000
        sent = 0
        while sent < 48:
            n.publish_binary("pm", [(b"k", value)] * 16, ack="leader")
            sent += 1
        size, pre = poll(lambda: agree() and agree.last[1] >= seg and agree.last[:2],
                         lambda: "a spare's zeros in the metrics (size, preallocated, on disk): %s" % (agree.last,))
        self.assertGreater(size, 48 * 16 * 1000)
        # Then the roll takes the spare: the active segment's unwritten end is what is left.
        while sent < 80:
            n.publish_binary("pm", [(b"k", value)] * 16, ack="leader")
            sent += 1
        size, pre = poll(agree, lambda: "metrics that add up to the files (size, preallocated, on disk): %s" % (agree.last,))
        self.assertGreater(pre, 0, "the active segment should be a preallocated one by now")
        self.assertLess(pre, 2 * seg)
        hwm = shard_metric(scrape(n), "sluice_shard_high_watermark")
        self.assertEqual(hwm, sent * 16)


if __name__ == "__main__":
    unittest.main()
