/* check.h: the checks the test programs share. Each failed check prints
 * one line, "FILE.c:LINE: condition: details", and counts in failures,
 * which the program reports and exits with. Include it after the OpenCL
 * header. */
#ifndef VGPU_TESTDATA_CHECK_H
#define VGPU_TESTDATA_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

/* check_file is the name of the source file path names, without its
 * directory. */
static inline const char *check_file(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash != NULL ? slash + 1 : path;
}

/* Where failed checks are printed: stdout, unless the program's stdout is
 * what a test checks (printf.c). */
#ifndef CHECK_STREAM
#define CHECK_STREAM stdout
#endif

#define CHECK(cond, ...)                                                                                     \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			failures++;                                                                          \
			fprintf(CHECK_STREAM, "%s:%d: %s: ", check_file(__FILE__), __LINE__, #cond);         \
			fprintf(CHECK_STREAM, __VA_ARGS__);                                                  \
			fprintf(CHECK_STREAM, "\n");                                                         \
			fflush(CHECK_STREAM);                                                                \
		}                                                                                            \
	} while (0)

#define CHECK_ERR(call, want)                                                                                \
	do {                                                                                                 \
		cl_int got_ = (call);                                                                        \
		CHECK(got_ == (want), "got %d, want %d (%s)", got_, (want), #want);                          \
	} while (0)

#define OK(call) CHECK_ERR(call, CL_SUCCESS)

/* need_vgpud_platform returns the vgpud platform among the loader's, or ends
 * the program (a failed check) when there is none. */
static inline cl_platform_id need_vgpud_platform(void)
{
	cl_uint n = 0;
	cl_platform_id ps[8], p = NULL;
	OK(clGetPlatformIDs(8, ps, &n));
	for (cl_uint i = 0; i < n && i < 8; i++) {
		char name[64] = "";
		clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
		if (strcmp(name, "vgpud") == 0)
			p = ps[i];
	}
	CHECK(p != NULL, "no vgpud platform among %u", n);
	if (p == NULL)
		exit(1);
	return p;
}

#endif
