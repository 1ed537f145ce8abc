# ctx_victim.py SECRET_HEX: the victim process of TestGuestContexts. It
# keeps 4 KiB of its secret in a device buffer and runs vector additions,
# each checked against the CPU, until the attacker is done (/tmp/ctx/attack-done)
# and three more after; then it reads its secret back. It prints
# "VICTIM OK jobs=N".
import os
import sys

import numpy as np
import pyopencl as cl

secret = bytes.fromhex(sys.argv[1])
dev = cl.get_platforms()[0].get_devices()[0]
ctx = cl.Context([dev])
q = cl.CommandQueue(ctx)
mf = cl.mem_flags
held = np.frombuffer(secret * (4096 // len(secret)), dtype=np.uint8)
sb = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=held)
prg = cl.Program(ctx, """
__kernel void vadd(__global const float *a, __global const float *b, __global float *c) {
	size_t i = get_global_id(0);
	c[i] = a[i] + b[i];
}""").build()
n = 1 << 16
a = np.arange(n, dtype=np.float32)
b = np.full(n, 1.5, dtype=np.float32)
da = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
dc = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
q.finish()
open("/tmp/ctx/victim-ready", "w").close()
jobs, after = 0, 0
while after < 3:
    prg.vadd(q, (n,), None, da, db, dc)
    c = np.empty_like(a)
    cl.enqueue_copy(q, c, dc)
    q.finish()
    assert np.array_equal(c, a + b), "wrong sums in job %d" % jobs
    jobs += 1
    if os.path.exists("/tmp/ctx/attack-done"):
        after += 1
back = np.empty_like(held)
cl.enqueue_copy(q, back, sb)
q.finish()
assert back.tobytes() == held.tobytes(), "the secret buffer changed"
print("VICTIM OK jobs=%d" % jobs)
