/* check.h: the checks the test programs share. Each failed check prints
 * one line, "FILE.c:LINE: condition: details", and counts in failures,
 * which the program reports and exits with. Include it after the OpenCL
 * header. */
#ifndef VGPU_TESTDATA_CHECK_H
#define VGPU_TESTDATA_CHECK_H

#include <stdio.h>
#include <string.h>

static int failures;

/* check_file is the name of the source file path names, without its
 * directory. */
static inline const char *check_file(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash != NULL ? slash + 1 : path;
}

#define CHECK(cond, ...)                                                                                     \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			failures++;                                                                          \
			printf("%s:%d: %s: ", check_file(__FILE__), __LINE__, #cond);                        \
			printf(__VA_ARGS__);                                                                 \
			printf("\n");                                                                        \
			fflush(stdout);                                                                      \
		}                                                                                            \
	} while (0)

#define CHECK_ERR(call, want)                                                                                \
	do {                                                                                                 \
		cl_int got_ = (call);                                                                        \
		CHECK(got_ == (want), "got %d, want %d (%s)", got_, (want), #want);                          \
	} while (0)

#define OK(call) CHECK_ERR(call, CL_SUCCESS)

#endif
