# icd_printf.py: a kernel's printf reaches the guest process that launched
# it (TestGuestICD, docs/icd.md "printf"): an ordinary pyopencl program
# whose kernel prints one line per work-item; vgpud's executor captures
# the physical runtime's output and the ICD writes it to this process's
# standard output before queue.finish() returns.
import numpy as np
import pyopencl as cl

ctx = cl.Context([cl.get_platforms()[0].get_devices()[0]])
q = cl.CommandQueue(ctx)
prg = cl.Program(ctx, """
__kernel void hello(int v) {
	printf("kernel says %d from %d\\n", v, (int)get_global_id(0));
}
""").build()
prg.hello(q, (4,), None, np.int32(45))
q.finish()
print("PRINTF DONE", flush=True)
