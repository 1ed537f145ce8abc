/* util.c: logging, the common shape of every clGet*Info answer, and
 * small helpers. */
#define _POSIX_C_SOURCE 200809L
#include "icd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void vgpu_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* One write per line, so that lines of concurrent threads do not mix. */
	fprintf(stderr, "vgpud ICD: %s\n", line);
}

cl_int vgpu_info(const void *src, size_t n, size_t size, void *value, size_t *size_ret)
{
	if (value != NULL) {
		if (size < n)
			return CL_INVALID_VALUE;
		if (n > 0)
			memcpy(value, src, n);
	}
	if (size_ret != NULL)
		*size_ret = n;
	return CL_SUCCESS;
}

cl_int vgpu_info_str(const char *s, size_t size, void *value, size_t *size_ret)
{
	return vgpu_info(s, strlen(s) + 1, size, value, size_ret);
}

uint64_t vgpu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

char *vgpu_strndup(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (p != NULL) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}
