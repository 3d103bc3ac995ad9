"""The OpenAPI document a node serves is one a code generator can use: the pinned
@redocly/cli (tests/openapi-lint/package.json) lints it with docs/redocly.yaml, the
recommended rules, and finds no errors and no warnings.

`./dev deps` installs npm and the pinned linter (into the npm cache directory below).
Without them this test fails with what to run: it never skips, so CI cannot pass
without linting."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import Node

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PIN = os.path.join(ROOT, "tests", "openapi-lint", "package.json")
CONFIG = os.path.join(ROOT, "docs", "redocly.yaml")
# The same directory as ./dev's lint_tools().
NPM_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sluice", "npm")


def pinned_redocly():
    """The pinned redocly executable; an AssertionError saying what to run if it is missing."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise AssertionError("node and npm are needed to lint the OpenAPI document: "
                             "`./dev deps` installs them (Debian: apt-get install nodejs npm)")
    with open(PIN) as f:
        want = json.load(f)["dependencies"]["@redocly/cli"]
    try:
        with open(os.path.join(NPM_DIR, "node_modules", "@redocly", "cli", "package.json")) as f:
            have = json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        have = None
    if have != want:
        raise AssertionError("@redocly/cli %s is not installed in %s (found: %s): run `./dev deps`"
                             % (want, NPM_DIR, have or "none"))
    return os.path.join(NPM_DIR, "node_modules", ".bin", "redocly")


class OpenApiLint(unittest.TestCase):
    def setUp(self):
        self.redocly = pinned_redocly()  # before starting a node: fail fast and clearly
        self.tmp = tempfile.mkdtemp(prefix="sluice-openapi-")
        self.node = Node()

    def tearDown(self):
        self.node.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_the_served_document_lints_without_errors_or_warnings(self):
        self.node.start()
        status, served = self.node.request("GET", "/openapi.yaml", raw=True)
        self.assertEqual(status, 200)
        path = os.path.join(self.tmp, "openapi.yaml")
        with open(path, "wb") as f:
            f.write(served)
        env = dict(os.environ, REDOCLY_TELEMETRY="off", REDOCLY_SUPPRESS_UPDATE_NOTICE="true",
                   NO_COLOR="1")
        r = subprocess.run([self.redocly, "lint", path, "--config", CONFIG, "--format=json"],
                           capture_output=True, text=True, cwd=self.tmp, env=env, timeout=300)
        try:
            report = json.loads(r.stdout)
        except ValueError:
            self.fail("redocly lint exited %d without a JSON report:\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
        problems = "\n".join("%s %s: %s at %s" % (p["severity"], p["ruleId"], p["message"],
                                                  ", ".join(l.get("pointer", "?") for l in p["location"]))
                             for p in report["problems"])
        self.assertEqual(report["totals"]["errors"], 0, problems)
        self.assertEqual(report["totals"]["warnings"], 0, problems)
        self.assertEqual(report["problems"], [], problems)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
