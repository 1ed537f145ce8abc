/*
 * clcheck.h: what bench/apps's OpenCL programs (cljob, clsmall) share:
 * dying on an OpenCL error with the call that failed, and a monotonic
 * clock in nanoseconds. Define PROG (the program's name, for messages)
 * before including it, after <CL/cl.h>, <stdint.h>, <stdio.h>,
 * <stdlib.h> and <time.h>.
 */
#ifndef CLCHECK_H
#define CLCHECK_H

static void die(const char *what, cl_int err)
{
	fprintf(stderr, PROG ": %s: OpenCL error %d\n", what, err);
	exit(1);
}

#define CK(call)                         \
	do {                             \
		cl_int e_ = (call);      \
		if (e_ != CL_SUCCESS)    \
			die(#call, e_); \
	} while (0)

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
