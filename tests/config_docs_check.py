#!/usr/bin/env python3
"""core/config_keys.cc is the list of keys sluiced accepts, with their defaults, and
docs/configuration.md documents them: this fails if a key is in one and not the other, or if
their defaults differ. It reads both files; nothing is built or run."""
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
code = (root / "core/config_keys.cc").read_text()
docs = (root / "docs/configuration.md").read_text()

keys = {}
for m in re.finditer(r'^\s*\{"([a-z0-9_.]+)", "((?:[^"\\]|\\.)*)",', code, re.M):
    keys[m.group(1)] = m.group(2).replace('\\"', '"')
documented = {}
for m in re.finditer(r'^\| `([a-z0-9_.]+)` \| *(?:`([^`]*)`)? *\|', docs, re.M):
    documented[m.group(1)] = m.group(2) or ""

problems = []
if len(keys) < 50:
    problems.append(f"only {len(keys)} keys parsed from core/config_keys.cc: the parser is out of date")
for k in sorted(keys.keys() - documented.keys()):
    problems.append(f"{k}: in core/config_keys.cc, not in docs/configuration.md")
for k in sorted(documented.keys() - keys.keys()):
    problems.append(f"{k}: in docs/configuration.md, not in core/config_keys.cc (sluiced refuses it)")
for k in sorted(keys.keys() & documented.keys()):
    if keys[k] != documented[k]:
        problems.append(f"{k}: default {keys[k]!r} in core/config_keys.cc, {documented[k]!r} in docs/configuration.md")
for p in problems:
    print(p)
print(f"{len(keys)} keys, {len(documented)} documented, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
