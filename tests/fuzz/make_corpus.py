#!/usr/bin/env python3
"""Writes the seed corpus (corpus/<target>/): a few hand-made valid inputs per target plus
edge cases. Run it again after changing a wire format; crash inputs the fuzzers found are
added by hand (named crash-*) and kept."""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def headers(pairs):
    return b"".join(struct.pack("<H", len(k)) + k + struct.pack("<I", len(v)) + v for k, v in pairs)


def batch(records, base=0, inc=0, pid=0, seq=0):
    body = b""
    for key, value, hdr, ts in records:
        body += struct.pack("<IIIq", 0xFFFFFFFF if key is None else len(key), len(value), len(hdr), ts)
        body += (key or b"") + value + hdr
    n = 72 + len(body)
    ts = [r[3] for r in records] or [0]
    tail = struct.pack("<HHQQqqIIQQ", 1, 0, base, inc, ts[0], max(ts), len(records), 0, pid, seq) + body
    return struct.pack("<III", 0x31424C53, n, crc32c(tail)) + tail


def publish_binary(records):
    return b"".join(struct.pack("<II", 0xFFFFFFFF if k is None else len(k), len(v)) + (k or b"") + v
                    for k, v in records)


def rpc_frame(obj):
    body = json.dumps(obj, separators=(",", ":")).encode() if not isinstance(obj, bytes) else obj
    return struct.pack("<I", len(body)) + body


def raft_hello(cid, sid, addr):
    return b"SLRAFT01" + struct.pack("<I", len(cid)) + cid + struct.pack("<QI", sid, len(addr)) + addr


def raft_answer(status, cid):
    return b"SLRAFT01" + struct.pack("<II", status, len(cid)) + cid


def raft_hello2(cid, sid, addr, nonce):
    return b"SLRAFT02" + raft_hello(cid, sid, addr)[8:] + nonce


def raft_answer2(status, cid, auth):
    out = b"SLRAFT02" + struct.pack("<II", status, len(cid)) + cid
    return out + (b"\x01" + auth if auth else b"\x00")


def peer_frame(flags, typ, rid, payload):
    return struct.pack("<BBHQI", 0xC5, 0x10 | flags, typ, rid, len(payload)) + payload


def peer_hello(node, cid, did):
    return b"SLUICEPT" + struct.pack("<HI", 1, node) + struct.pack("<H", len(cid)) + cid + \
        struct.pack("<H", len(did)) + did


KEY = {"tenant": "acme", "ns": "orders", "name": "events"}
SPEC = {"shards": 4, "max_bytes": -1, "max_age_ms": 86400000, "ack": "leader", "replication_factor": 3,
        "min_insync": 2}

CORPUS = {
    "batch": {
        "one": batch([(b"k", b"hello", b"", 1700000000000)]),
        "no_key_headers": batch([(None, b"v", headers([(b"trace", b"abc"), (b"", b"")]), 5)], base=42, inc=3),
        "three": batch([(b"a", b"1", b"", 1), (None, b"", b"", 3), (b"", b"x" * 40, headers([(b"h", b"")]), 2)],
                       pid=7, seq=9),
        "trailing_bytes": batch([(b"k", b"v", b"", 0)]) + b"\0\0\0",
        "bad_crc": batch([(b"k", b"v", b"", 0)])[:8] + b"\0\0\0\0" + batch([(b"k", b"v", b"", 0)])[12:],
        "header_only": batch([])[:72],
    },
    "publish": {
        "json_plain": b'{"records":[{"key":"k","value":"v"}]}',
        "json_full": json.dumps({"records": [
            {"key_base64": "AAE=", "value_base64": "aGVsbG8=", "headers": {"a": "1", "b": ""},
             "shard": 3, "timestamp": 1700000000000},
            {"value": "x"}]}).encode(),
        "json_bad_field": b'{"records":[{"value":"v","nope":1}]}',
        "json_empty": b'{"records":[]}',
        "binary_two": publish_binary([(b"key", b"value"), (None, b"")]),
        "binary_truncated": publish_binary([(b"key", b"value")])[:-2],
    },
    "http_target": {
        "healthz": b"/healthz",
        "records": b"/v1/tenants/acme/namespaces/orders/streams/events/shards/0/records?offset=10&max=5&wait_ms=100",
        "publish": b"/v1/tenants/acme/namespaces/orders/streams/events/records?ack=quorum&producer_id=1&sequence=0",
        "group_ack": b"/v1/tenants/t/namespaces/n/streams/s/groups/g/shards/2/ack",
        "dead_letters": b"/v1/tenants/t/namespaces/n/streams/s/groups/g/shards/0/dead-letters/replay",
        "escapes": b"/v1/tenants/a%2Fb/namespaces/%41?q=a+b&x=%25&&y#frag",
        "bad_escape": b"/v1/tenants/%zz",
        "members": b"/v1/metadata/members/3",
    },
    "rpc_frame": {
        "hello": rpc_frame({"cluster_id": "", "method": "hello", "params": {}}),
        "create_stream": rpc_frame({"cluster_id": "c1", "method": "create_stream",
                                    "params": {"key": KEY, "spec": SPEC}, "forwarded": True}),
        "two_frames": rpc_frame({"cluster_id": "c1", "method": "get_stream", "params": {"key": KEY}}) +
                      rpc_frame({"ok": True, "result": {"key": KEY, "incarnation": 1, "spec": SPEC, "created_seq": 5,
                                                         "created_at_us": 1700000000000000}}),
        "error_response": rpc_frame({"ok": False, "error": {"code": "not_found", "message": "no", "outcome": "definite"}}),
        "status_response": rpc_frame({"ok": True, "result": {"backend": "raft", "cluster_id": "c1", "ready": True,
                                                             "detail": "", "level": 14, "applied": 9}}),
        "not_json": rpc_frame(b"{"),
        "oversized": struct.pack("<I", (8 << 20) + 1),
    },
    "raft_handshake": {
        "hello": b"\x07" + raft_hello(b"cluster-1", 1, b"127.0.0.1:9001"),
        "hello_empty_id": b"\x00" + raft_hello(b"", 2, b"10.0.0.2:9001"),
        "answer_ok": b"\x03" + raft_answer(0, b"cluster-1"),
        "answer_unknown": b"\x01" + raft_answer(2, b""),
        "hello_bad_address": b"\x05" + raft_hello(b"c", 1, b"a b"),
        "bad_magic": b"\x00SLRAFT03",
        "hello2": b"\x02" + raft_hello2(b"cluster-1", 3, b"127.0.0.1:9003", bytes(range(32))),
        "answer2_auth": b"\x04" + raft_answer2(0, b"cluster-1", bytes(range(64))),
        "answer2_plain": b"\x06" + raft_answer2(3, b"cluster-1", None),
    },
    "peer_frame": {
        "hello": peer_frame(0, 0, 0, peer_hello(1, b"cluster-1", b"dir-1")),
        "hello_ping_pong": peer_frame(0, 0, 0, peer_hello(2, b"c", b"d")) + peer_frame(0, 1, 7, b"") +
                           peer_frame(1, 1, 7, b"pong"),
        "error_answer": peer_frame(0, 0, 0, peer_hello(3, b"c", b"")) +
                        peer_frame(3, 0x100, 9, struct.pack("<HB", 12, 0) + b"deposed"),
        "unknown_error": peer_frame(3, 0x100, 9, struct.pack("<HB", 999, 0) + b"?"),
        "bad_flags": struct.pack("<BBHQI", 0xC5, 0x12, 1, 1, 0),
        "oversized": struct.pack("<BBHQI", 0xC5, 0x10, 1, 1, 0xFFFFFFF0),
    },
}


def main():
    for target, files in CORPUS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
