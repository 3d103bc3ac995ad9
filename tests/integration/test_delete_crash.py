"""delete_crash_at_each_step: SIGKILL at each step of the storage delete protocol (test
failpoints, sdk/include/sluice/failpoint.h); the next start completes the delete, and no
record of the deleted incarnation is ever served again."""
import os
import unittest

from harness import HttpError, Node, poll

STEPS = ["storage.delete.after_marker", "storage.delete.after_move", "storage.delete.after_unmark"]


class DeleteCrash(unittest.TestCase):
    def test_delete_crash_at_each_step(self):
        for step in STEPS:
            with self.subTest(step=step):
                self.run_step(step)

    def run_step(self, step):
        n = Node(env={"SLUICE_FAILPOINTS": step})
        try:
            n.start()
            old = n.create_stream("doomed", shards=2)
            n.publish_binary("doomed", [(b"k%d" % i, b"old-%d" % i) for i in range(50)])
            try:
                n.request("DELETE", n.ns_path() + "/streams/doomed", timeout=30)
            except (HttpError, OSError):
                pass  # the process dies inside the delete; the catalog change is committed
            n.proc.wait(timeout=60)
            self.assertEqual(n.proc.returncode, -9, "the failpoint %s was not reached:\n%s" % (step, n.log_tail()))
            self.assertIn("reached " + step, n.current_log())

            n.env = {}
            n.start()
            shards_dir = os.path.join(n.data_dir, "shards")
            self.assertEqual(n.stream_dirs("t", "n", "doomed"), [], "old incarnation directories remain")
            pending = os.path.join(shards_dir, ".delete-pending")
            self.assertEqual(os.listdir(pending) if os.path.isdir(pending) else [], [], "a marker remains")
            deleted = os.path.join(shards_dir, ".deleted")
            self.assertEqual(os.listdir(deleted) if os.path.isdir(deleted) else [], [])
            with self.assertRaises(HttpError) as e:
                n.fetch("doomed", 0, 0)
            self.assertEqual(e.exception.status, 404)
            new = n.create_stream("doomed", shards=2)
            self.assertGreater(new["incarnation"], old["incarnation"])
            for s in range(2):
                self.assertEqual(n.fetch("doomed", s, "earliest")["records"], [])
        finally:
            n.cleanup()


if __name__ == "__main__":
    unittest.main()
