#!/usr/bin/env python3
"""Write the seed corpora of tests/fuzz/corpus/<target>/: small valid encodings of what each
decoder accepts, so the fuzzers start past the first checks. Run from anywhere; rewrites
the corpus folders (committed, so CI needs no Python)."""
import os
import struct

top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc8(bits, n):
    c = 0
    for i in range(n):
        c ^= (bits >> (8 * (n - 1 - i))) & 0xFF
        for _ in range(8):
            c = ((c << 1) ^ 7) & 0xFF if c & 0x80 else (c << 1) & 0xFF
    return c


def key(rank, slot, gen):
    top_ = (rank << 40) | (slot << 20) | gen
    return (top_ << 8) | crc8(top_, 7)


def write(target, name, data):
    d = os.path.join(top, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# The wire versions the seeds speak: keep in step with src/net/tcp/tcp_wire.h
# (TCP_WIRE_VERSION) and src/net/verbs/verbs_wire.c (PROTO_VERSION), or the decoders refuse
# the hellos at their version and the fuzzers never get past it.
TCP_WIRE_VERSION = 6
VERBS_PROTO_VERSION = 2


def tcp_hdr(kind, tag=0, ln=0, status=0, seq=0, off=0, a=0, b=0):
    return struct.pack("<BBHIiIQQQQ", kind, 0, tag, ln, status, 0, seq, off, a, b)


def tcp_hello(frm=1, to=2, size=4, group=0x1234, pool=1 << 20, flags=0):
    return (struct.pack("<IIIIIIQQ", 0x53534444, TCP_WIRE_VERSION, frm, to, size, flags, group, pool)
            + bytes(range(16)) + bytes(range(32)))


pool = struct.pack("<Q", 1 << 20)
for name, h in [("read", tcp_hdr(1, off=64, a=128)), ("write", tcp_hdr(2, ln=16, off=4096)),
                ("cas", tcp_hdr(3, off=8, a=1, b=2)), ("fadd", tcp_hdr(4, off=16, a=1)),
                ("notify", tcp_hdr(5, a=7)), ("msg", tcp_hdr(6, tag=2, ln=40)),
                ("reply", tcp_hdr(7, seq=9, status=-5)), ("hello", tcp_hdr(8, ln=88))]:
    write("tcp_wire", name, h + tcp_hello() + pool)
write("tcp_wire", "auth", tcp_hdr(10, ln=88) + tcp_hello(flags=1) + pool)

vh = struct.pack("<IIQIIQQII", 0x56535344, VERBS_PROTO_VERSION, 0x1234, 2, 4, 0x7F0000000000, 1 << 20, 0x42, 0)
write("verbs_wire", "hello", vh)
write("verbs_wire", "auth_req", struct.pack("<IQIQ", 0x32414444, 0x1234, 2, 0x1122334455667788)
      + bytes(range(16)) + bytes(range(16)))
write("verbs_wire", "hello_padded", vh + bytes(8))
write("verbs_wire", "reject", struct.pack("<II", 0x52535344, 111))
write("verbs_wire", "reject_epoch", struct.pack("<IIQ", 0x52535344, 116, 0x1122334455667788))
write("verbs_wire", "msg", struct.pack("<HHI", 0x4D44, 2, 5) + b"hello")
write("verbs_wire", "msg_empty", struct.pack("<HHI", 0x4D44, 3, 0))

write("key", "valid", struct.pack("<QIII", key(1, 0, 1), 1, 0, 1))
write("key", "valid2", struct.pack("<QIII", key(65535, (1 << 20) - 1, (1 << 20) - 1), 3, 7, 9))

write("nodes", "list", b"127.0.0.1:7000,127.0.0.1:7001,localhost:7002")
write("nodes", "file", b"# ranks\n10.0.0.1:7000\n[::1]:7001  # six\n\nhost-3:65535\n")

for i, s in enumerate([b"42", b"-17", b"0x1f", b"0", b"deadbeef", b"0XFFFFFFFFFFFFFFFF"]):
    write("config", "v%d" % i, struct.pack("<qqq", -1000, 1 << 40, 5) + s)


def rpc_req(rid, op, body):
    return struct.pack("<IHH", rid, op, 0) + body


name = b"board".ljust(64, b"\0")
k = struct.pack("<Q", key(1, 3, 1))
head = struct.pack("<BHH", 0, 4, 1) + bytes([1, 1, 3, 1])
bodies = {"alloc": rpc_req(1, 1, struct.pack("<QII", 4096, 0, 0) + name),
          "alloc_anon": rpc_req(2, 1, struct.pack("<QII", 64, 5, 2) + bytes(64)),
          "lookup": rpc_req(3, 2, k), "release_begin": rpc_req(4, 3, k),
          "release_end": rpc_req(5, 4, k), "invalidate": rpc_req(6, 5, k),
          "name_acquire": rpc_req(7, 6, struct.pack("<I", 1) + name),
          "name_bind": rpc_req(8, 7, k + name), "name_abandon": rpc_req(9, 8, name),
          "name_unbind": rpc_req(10, 9, k + name)}
for n, b in bodies.items():
    write("seg_service", n, head + b)
write("seg_service", "reply", struct.pack("<BHH", 1, 4, 1) + bytes(4) +
      struct.pack("<IH", 77, 64) + struct.pack("<Ii", 77, 0) + bytes(32))


def seg_reply(call, status_idx, body):
    return struct.pack("<BBHI", call, 3, 1, 5) + struct.pack("<BIH", 0, status_idx, len(body)) + body


desc = struct.pack("<QQQII", key(2, 5, 1), 4096, 100, 0, 0)
write("seg_reply", "stat", seg_reply(4, 0, desc))
write("seg_reply", "alloc", seg_reply(0, 0, desc))
write("seg_reply", "lookup", seg_reply(2, 0, struct.pack("<Q", key(2, 5, 1))))
write("seg_reply", "named_create", seg_reply(1, 6, b"") + struct.pack("<BIH", 0, 0, 32) + desc +
      struct.pack("<BIH", 0, 0, 0))
write("seg_reply", "release", seg_reply(3, 0, b"board".ljust(64, b"\0") + b"\x06") +
      struct.pack("<BIH", 0, 0, 0) * 4)

ring = lambda head, tail: struct.pack("<I60sIII52s", head, bytes(60), tail, 0, 0, bytes(52))
hdr = struct.pack("<QIIQ40s", 0x314E484353534444, 1, 0, 65536, bytes(40)) + ring(0, 0) + ring(0, 0)
hdr2 = struct.pack("<QIIQ40s", 0x314E484353534444, 1, 0, 65536, bytes(40)) + ring(5, 7) + ring(3, 3)
ops = bytes([0]) + struct.pack("<QQ", 1, 0) + bytes([1]) + struct.pack("<QQ", 1, 0) + \
    bytes([2]) + struct.pack("<QQ", 100, 200) + bytes([3]) + struct.pack("<QQ", 2, 3) + \
    bytes([4]) + struct.pack("<QQ", 70000, 0) + bytes([3]) + struct.pack("<QQ", 1, 1) + \
    bytes([2]) + struct.pack("<QQ", 65536, 65536)
write("chan", "empty", bytes([4, 3]) + hdr + ops)
write("chan", "pending", bytes([5, 3]) + hdr2 + ops)

write("sock", "hello", bytes([16, 0, 0]) + struct.pack("<IIIi", 1, 0x64647373, 1, 42))
write("sock", "chan_fd", bytes([12, 1, 0]) + struct.pack("<IiI", 3, 0, 1))
write("sock", "short", bytes([16, 0, 0x80]) + b"abc")

# Lock recovery messages: [group size] then [type id hdr pred arg] (+ triples for a report).
def rc(t, i=1, hdr=0x25000, pred=0, arg=0, tail=b""):
    return bytes([4]) + struct.pack("<IIQII", t, i, hdr, pred, arg) + tail

wid = lambda rank, slot, sleeps=0: (rank << 16) | (0x8000 if sleeps else 0) | slot
write("lock_wire", "check", rc(1, pred=wid(2, 3, 1)))
write("lock_wire", "flush", rc(3, arg=2))
write("lock_wire", "turn_check", rc(1, pred=0xfffffff0, arg=1))
write("lock_wire", "answer", rc(5, arg=1))
write("lock_wire", "recover", rc(16, hdr=key(1, 2, 1)))
write("lock_wire", "xsurvey", rc(18, pred=1))
write("lock_wire", "xreport", rc(19, pred=2, arg=1, tail=struct.pack(
    "<6I", wid(2, 0), 0, 0, wid(3, 1, 1), wid(2, 0), 1)))
write("lock_wire", "gone", rc(20, hdr=0, pred=3))

# SRSL at a home: [size][down bits] then messages [from len op arg lock req] (len 24 whole).
write("srsl", "seed1", bytes([3, 0]) + bytes([1, 24, 1, 2, 1, 0, 0, 24, 1, 2, 1, 1,
                                                2, 24, 1, 1, 2, 2, 0, 24, 2, 2, 1, 0]))

# Barrier messages: [size][rank] then [from len kind(4) epoch(4)].
write("barrier", "round", bytes([3, 0]) + b"".join(
    bytes([f, 8]) + struct.pack("<II", 1, 1) for f in (1, 2, 3)) +
    bytes([0, 8]) + struct.pack("<II", 2, 1))
