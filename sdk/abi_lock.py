#!/usr/bin/env python3
"""The plugin ABI lock: every change to an SDK header bumps kPluginAbiVersion.

sdk/abi.lock records kPluginAbiVersion and the SHA-256 of every sdk/include/sluice/*.h.

  sdk/abi_lock.py --check   exit 1, naming each header, when a header changed while
                            kPluginAbiVersion stayed the same; exit 1 when the version
                            was bumped but the lock was not rewritten
  sdk/abi_lock.py --write   rewrite the lock (after bumping kPluginAbiVersion); refuses
                            when headers changed and the version was not bumped

`./dev abi-lock` runs --write. ctest runs --check (test `sdk.abi_lock`).
"""
import hashlib
import pathlib
import re
import sys

SDK = pathlib.Path(__file__).resolve().parent
HEADERS = SDK / "include" / "sluice"
LOCK = SDK / "abi.lock"


def abi_version():
    text = (HEADERS / "plugin.h").read_text()
    m = re.search(r"kPluginAbiVersion\s*=\s*(\d+)\s*;", text)
    if not m:
        sys.exit("abi_lock: no kPluginAbiVersion in sdk/include/sluice/plugin.h")
    return int(m.group(1))


def hashes():
    return {f"sdk/include/sluice/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(HEADERS.glob("*.h"))}


def read_lock():
    version, recorded = None, {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("abi_version "):
            version = int(line.split()[1])
        else:
            digest, name = line.split(maxsplit=1)
            recorded[name] = digest
    return version, recorded


def differences(recorded, now):
    changed = []
    for name in sorted(set(recorded) | set(now)):
        if name not in now:
            changed.append(f"{name} (removed)")
        elif name not in recorded:
            changed.append(f"{name} (added)")
        elif recorded[name] != now[name]:
            changed.append(name)
    return changed


def main(argv):
    mode = argv[1] if len(argv) > 1 else "--check"
    version, now = abi_version(), hashes()
    locked_version, recorded = read_lock() if LOCK.exists() else (None, {})
    changed = differences(recorded, now)
    if mode == "--write":
        if changed and locked_version == version:
            print(f"abi_lock: {', '.join(changed)} changed: bump kPluginAbiVersion "
                  f"(now {version}) in sdk/include/sluice/plugin.h first", file=sys.stderr)
            return 1
        lines = ["# Written by `./dev abi-lock` (sdk/abi_lock.py). Do not edit by hand.",
                 f"abi_version {version}"]
        lines += [f"{digest}  {name}" for name, digest in now.items()]
        LOCK.write_text("\n".join(lines) + "\n")
        print(f"abi_lock: wrote sdk/abi.lock for ABI {version} ({len(now)} headers)")
        return 0
    if mode != "--check":
        print(__doc__, file=sys.stderr)
        return 2
    if locked_version is None:
        print("abi_lock: sdk/abi.lock is missing: run ./dev abi-lock", file=sys.stderr)
        return 1
    if version == locked_version and changed:
        for name in changed:
            print(f"abi_lock: {name} changed but kPluginAbiVersion is still {version}: "
                  "bump it in sdk/include/sluice/plugin.h and run ./dev abi-lock", file=sys.stderr)
        return 1
    if version != locked_version:
        print(f"abi_lock: kPluginAbiVersion is {version} but sdk/abi.lock records "
              f"{locked_version}: run ./dev abi-lock in the same change", file=sys.stderr)
        return 1
    print(f"abi_lock: ABI {version}, {len(now)} headers match sdk/abi.lock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
