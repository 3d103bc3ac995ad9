"""sluice-bench still runs end to end. --brokers: the replicated comparison starts one broker
and three brokers of its own, alternates the two loads in rounds, and reports every figure
with no failed request (docs/benchmarks.md "Replicated publish"). Figures are not asserted:
this machine's speed is not a test condition; that the run completes cleanly is."""
import os
import re
import subprocess
import tempfile
import unittest

from harness import SLUICED

BENCH = os.path.join(os.path.dirname(SLUICED), "sluice-bench")


class BenchSmoke(unittest.TestCase):
    def test_replicated_comparison_runs_in_rounds_without_failures(self):
        with tempfile.TemporaryDirectory(prefix="sluice-bench-smoke-") as d:
            p = subprocess.run([BENCH, "--brokers", "3", "--seconds", "2", "--rounds", "2",
                                "--connections", "2", "--dir", d],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=600)
            out = p.stdout
            self.assertEqual(p.returncode, 0, out[-3000:] + p.stderr[-3000:])
            rounds = re.findall(r"round +(\d+): 1 broker +(\d+) rec/s, 3 brokers +(\d+) rec/s", out)
            self.assertEqual([r[0] for r in rounds], ["1", "2"], out)
            for _, single, rep in rounds:
                self.assertGreater(int(single), 0, out)
                self.assertGreater(int(rep), 0, out)
            failed = re.findall(r"(1 broker, RF 1, leader|3 brokers, RF 3, quorum) .* failed (\d+)", out)
            self.assertEqual(len(failed), 2, out)
            for name, n in failed:
                self.assertEqual(n, "0", name + ": " + out)
            self.assertRegex(out, r"replicated / single +\d+\.\d\d")
            # Every process it started is gone (it stops them all at the end).
            left = subprocess.run(["pgrep", "-f", "data.dir=" + d], stdout=subprocess.PIPE, text=True)
            self.assertEqual(left.stdout.strip(), "", "sluiced processes left running")

    def test_single_node_run_reports_websocket_delivery_of_every_record(self):
        with tempfile.TemporaryDirectory(prefix="sluice-bench-smoke-") as d:
            p = subprocess.run([BENCH, "--seconds", "1", "--connections", "2", "--no-fetch", "--no-json",
                                "--no-idempotence", "--dir", d],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
            out = p.stdout
            self.assertEqual(p.returncode, 0, out[-3000:] + p.stderr[-3000:])
            self.assertRegex(out, r"keyless .* failed 0")
            m = re.search(r"websocket delivery +p50 +([\d.]+) ms +p99 +([\d.]+) ms .*\((\d+) of (\d+) published", out)
            self.assertIsNotNone(m, out)
            self.assertGreater(int(m.group(4)), 0, out)
            self.assertEqual(m.group(3), m.group(4), "every published record reaches the subscriber: " + out)
            self.assertLessEqual(float(m.group(1)), float(m.group(2)))

    def test_tls_comparison_runs_in_rounds_without_failures(self):
        """--tls: HTTP and HTTPS nodes of its own, alternating rounds, both totals and the ratio."""
        with tempfile.TemporaryDirectory(prefix="sluice-bench-smoke-") as d:
            p = subprocess.run([BENCH, "--tls", "--seconds", "2", "--rounds", "2", "--connections", "2",
                                "--dir", d],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
            out = p.stdout
            self.assertEqual(p.returncode, 0, out[-3000:] + p.stderr[-3000:])
            rounds = re.findall(r"round +(\d+): HTTP +(\d+) rec/s, HTTPS +(\d+) rec/s", out)
            self.assertEqual([r[0] for r in rounds], ["1", "2"], out)
            for _, plain, tls in rounds:
                self.assertGreater(int(plain), 0, out)
                self.assertGreater(int(tls), 0, out)
            failed = re.findall(r"^  (HTTP|HTTPS) .* failed (\d+)", out, re.M)
            self.assertEqual(sorted(failed), [("HTTP", "0"), ("HTTPS", "0")], out)
            self.assertRegex(out, r"HTTPS / HTTP +\d+\.\d\d")
            left = subprocess.run(["pgrep", "-f", "data.dir=" + d], stdout=subprocess.PIPE, text=True)
            self.assertEqual(left.stdout.strip(), "", "sluiced processes left running")

if __name__ == "__main__":
    unittest.main()
