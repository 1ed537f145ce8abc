# icd_imbuf.py: an image made from a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER,
# docs/icd.md "Images") shares its buffer's bytes (TestGuestICD): an
# ordinary pyopencl program makes two images on two buffers, runs a kernel
# with image1d_buffer_t parameters, and reads the result from the output
# *buffer*; then writes the input buffer and runs again, so the kernel
# reads what the buffer holds now.
import numpy as np
import pyopencl as cl

ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
dev = ctx.devices[0]
q = cl.CommandQueue(ctx)
n = 4096
fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
assert fmt in cl.get_supported_image_formats(ctx, cl.mem_flags.READ_WRITE, cl.mem_object_type.IMAGE1D_BUFFER)
assert dev.image_max_buffer_size >= 65536, dev.image_max_buffer_size
src = np.arange(4 * n, dtype=np.float32)
mf = cl.mem_flags
a = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=src)
b = cl.Buffer(ctx, mf.WRITE_ONLY, src.nbytes)
ia = cl.Image(ctx, mf.READ_ONLY, fmt, shape=(n,), buffer=a)
ib = cl.Image(ctx, mf.WRITE_ONLY, fmt, shape=(n,), buffer=b)
assert ia.get_image_info(cl.image_info.BUFFER) == a
prg = cl.Program(ctx, """
__kernel void scale(__read_only image1d_buffer_t in, __write_only image1d_buffer_t out, float k) {
	int x = get_global_id(0);
	write_imagef(out, x, read_imagef(in, x) * k + (float4)(1.0f));
}
""").build()
out = np.empty_like(src)
for k, data in ((2.0, src), (3.0, src[::-1].copy())):
	cl.enqueue_copy(q, a, data)
	prg.scale(q, (n,), None, ia, ib, np.float32(k))
	cl.enqueue_copy(q, out, b)
	assert np.array_equal(out, data * np.float32(k) + 1), (k, out[:8])
print("IMBUF OK", flush=True)
