# vadd.py: an ordinary pyopencl program (the README's demo and TestGuestICD
# run it in a guest through the vgpud ICD): a vector addition on the first
# platform, checked on the CPU, with the kernel's profiled time.
import numpy as np
import pyopencl as cl

plats = cl.get_platforms()
dev = plats[0].get_devices()[0]
ctx = cl.Context([dev])
q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
n = 1 << 16
a = np.arange(n, dtype=np.float32)
b = np.full(n, 2.5, dtype=np.float32)
mf = cl.mem_flags
da = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
db = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
dc = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
prg = cl.Program(ctx, """
__kernel void vadd(__global const float *a, __global const float *b, __global float *c) {
	size_t i = get_global_id(0);
	c[i] = a[i] + b[i];
}""").build()
ev = prg.vadd(q, (n,), None, da, db, dc)
c = np.empty_like(a)
cl.enqueue_copy(q, c, dc)
q.finish()
assert np.array_equal(c, a + b), "wrong sums"
print("VADD OK platform=%s device=%s kernel_ns=%d" % (plats[0].name, dev.name, ev.profile.end - ev.profile.start))
