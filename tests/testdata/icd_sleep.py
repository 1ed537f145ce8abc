# icd_sleep.py: waits that must sleep (TestGuestICD, docs/icd-protocol.md
# "Completion interrupts"): an ordinary pyopencl program that runs a kernel
# of tens of milliseconds (a linear congruential generator stepped 2^26
# times per work item, far past vgpu-icdd's 250 us polling window) and
# waits for it, three times, checking each result on the CPU.
import numpy as np
import pyopencl as cl

A, C, STEPS, N = 1664525, 1013904223, 1 << 26, 4
M = 1 << 32


def lcg_power(steps):
    """The affine map x -> a*x + c (mod 2^32) applied steps times."""
    ra, rc = 1, 0  # identity
    ba, bc = A, C
    while steps:
        if steps & 1:
            ra, rc = (ba * ra) % M, (ba * rc + bc) % M
        ba, bc = (ba * ba) % M, (ba * bc + bc) % M
        steps >>= 1
    return ra, rc


ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, """
__kernel void spin(__global uint *out, uint steps) {
	uint x = get_global_id(0) + 1;
	for (uint i = 0; i < steps; i++)
		x = x * 1664525u + 1013904223u;
	out[get_global_id(0)] = x;
}""").build()
out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, N * 4)
pa, pc = lcg_power(STEPS)
want = np.array([(pa * (i + 1) + pc) % M for i in range(N)], dtype=np.uint32)
for _ in range(3):
    prg.spin(q, (N,), None, out, np.uint32(STEPS)).wait()
    got = np.empty(N, dtype=np.uint32)
    cl.enqueue_copy(q, got, out)
    assert np.array_equal(got, want), "wrong generator values %s, want %s" % (got, want)
print("SLEEP OK")
