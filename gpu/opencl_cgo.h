// opencl_cgo.h is included by the cgo preamble of every OpenCL file of
// package gpu, so that all of them see the same OpenCL API version and
// declarations. The static C helpers each file calls live in that file's
// own preamble.
#ifndef VGPUD_GPU_OPENCL_CGO_H
#define VGPUD_GPU_OPENCL_CGO_H

#define CL_TARGET_OPENCL_VERSION 120
#include <stdlib.h>
#include <CL/cl.h>

#endif
