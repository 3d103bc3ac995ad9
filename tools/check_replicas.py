#!/usr/bin/env python3
"""Checks the replicas of one shard incarnation against each other, from their files.

    check_replicas.py --replica DIR [--replica DIR ...] --hwm N [--acked FILE]

Each DIR is one replica's shard incarnation directory (<storage.dir>/<t>/<n>/<s>/<shard>-<inc>,
docs/architecture.md "Storage"). The checker reads every segment of every replica, as
recovery would, and fails (exit 1, one line per violation) unless:

  * every batch has the SLB1 magic, a sane length and a correct CRC-32C, and offsets are
    contiguous within and across segments (a torn tail beyond the last whole batch is
    reported but allowed: recovery cuts it, and it was never acknowledged);
  * every batch of the shard incarnation names that incarnation;
  * below the high watermark N every replica holds the same batches, byte for byte
    (docs/replication.md: every acknowledged record is on every in-sync replica);
  * every offset listed in FILE (one "offset value" pair per line, the acknowledged
    records) is below N and present with that value on every replica.

Used by tests/integration/test_replication.py; tests/integration/test_check_replicas.py
shows it can fail. Exit 0 prints a one-line summary.
"""
import argparse
import os
import struct
import sys

MAGIC = 0x31424C53
HEADER = 72


def _crc_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Batch:
    __slots__ = ("base", "count", "incarnation", "raw")

    def __init__(self, base, count, incarnation, raw):
        self.base, self.count, self.incarnation, self.raw = base, count, incarnation, raw

    @property
    def end(self):
        return self.base + self.count

    def records(self):
        """Yields (offset, value bytes)."""
        pos = HEADER
        for i in range(self.count):
            klen, vlen, hlen, _ts = struct.unpack_from("<IIIq", self.raw, pos)
            pos += 20
            if klen != 0xFFFFFFFF:
                pos += klen
            value = self.raw[pos:pos + vlen]
            pos += vlen + hlen
            yield self.base + i, bytes(value)


def read_replica(shard_dir, problems):
    """The replica's batches in offset order; appends violations to `problems`."""
    log_dir = os.path.join(shard_dir, "log")
    name = os.path.basename(os.path.normpath(shard_dir))
    want_inc = int(name.split("-", 1)[1], 16) if "-" in name else 0
    try:
        segments = sorted(f for f in os.listdir(log_dir) if f.endswith(".log"))
    except FileNotFoundError:
        problems.append("%s: no log directory" % shard_dir)
        return []
    batches = []
    expect = None
    for si, seg in enumerate(segments):
        path = os.path.join(log_dir, seg)
        with open(path, "rb") as f:
            data = f.read()
        seg_base = int(seg[:-4])
        if expect is not None and seg_base != expect:
            problems.append("%s: segment starts at %d, previous one ended at %d" % (path, seg_base, expect))
        expect = seg_base if expect is None else expect
        pos = 0
        while pos < len(data):
            last = si == len(segments) - 1
            if len(data) - pos < HEADER:
                if not last:  # on the last segment, a torn tail
                    problems.append("%s: %d stray bytes at %d" % (path, len(data) - pos, pos))
                break
            magic, length, crc = struct.unpack_from("<III", data, pos)
            if magic == MAGIC and length >= HEADER and pos + length > len(data) and last:
                break  # a torn tail: recovery cuts it, and it was never acknowledged
            if magic != MAGIC or length < HEADER or pos + length > len(data):
                problems.append("%s: no whole batch at byte %d (magic %#x, length %d)" % (path, pos, magic, length))
                break
            raw = memoryview(data)[pos:pos + length]
            if crc32c(raw[12:]) != crc:
                problems.append("%s: CRC mismatch in the batch at byte %d" % (path, pos))
                break
            base, inc = struct.unpack_from("<QQ", data, pos + 16)
            (count,) = struct.unpack_from("<I", data, pos + 48)
            if base != expect:
                problems.append("%s: batch at byte %d has base offset %d, expected %d" % (path, pos, base, expect))
            if inc != want_inc:
                problems.append("%s: batch at byte %d names incarnation %d, the directory %d"
                                % (path, pos, inc, want_inc))
            batches.append(Batch(base, count, inc, raw))
            expect = base + count
            pos += length
    return batches


def check(replicas, hwm, acked):
    problems = []
    logs = {d: read_replica(d, problems) for d in replicas}
    reference = None
    for d, batches in logs.items():
        below = [b for b in batches if b.base < hwm]
        end = below[-1].end if below else 0
        if end < hwm:
            problems.append("%s: holds offsets below %d only, short of the high watermark %d" % (d, end, hwm))
        if reference is None:
            reference = (d, below)
            continue
        ref_dir, ref = reference
        for a, b in zip(ref, below):
            if a.base != b.base or bytes(a.raw) != bytes(b.raw):
                problems.append("%s and %s differ at offset %d, below the high watermark %d"
                                % (ref_dir, d, min(a.base, b.base), hwm))
                break
    for d, batches in logs.items():
        values = {}
        for b in batches:
            if b.base >= hwm:
                break
            for off, value in b.records():
                values[off] = value
        for off, value in acked:
            if off >= hwm:
                problems.append("acknowledged offset %d is not below the high watermark %d" % (off, hwm))
            elif values.get(off) != value:
                problems.append("%s: acknowledged offset %d holds %r, not %r" % (d, off, values.get(off), value))
    return problems, logs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replica", action="append", required=True, help="a replica's shard incarnation directory")
    ap.add_argument("--hwm", type=int, required=True, help="the shard's high watermark")
    ap.add_argument("--acked", help='file of acknowledged records: "offset value" per line')
    args = ap.parse_args(argv)
    acked = []
    if args.acked:
        with open(args.acked, "rb") as f:
            for line in f:
                line = line.rstrip(b"\n")
                if line:
                    off, _, value = line.partition(b" ")
                    acked.append((int(off), value))
    problems, logs = check(args.replica, args.hwm, acked)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("ok: %d replicas agree below offset %d; %d acknowledged records present on each"
          % (len(logs), args.hwm, len(acked)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
