/* program_options.h: the build options and includes of program.c's
 * programs (program_options.c). */
#ifndef VGPUD_PROGRAM_OPTIONS_H
#define VGPUD_PROGRAM_OPTIONS_H

#include "icd.h"

/* A growing string: p is NUL-terminated once anything (even "") was
 * added; oom: an allocation failed, and later additions do nothing. */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

void sb_add(struct sbuf *b, const char *s, size_t n);
void sb_str(struct sbuf *b, const char *s);
void sb_printf(struct sbuf *b, const char *fmt, ...) VGPU_PRINTF(2, 3);

/* Build, compile or link options, parsed (parse_opts). */
struct macro;
struct opts {
	char **inc; /* -I directories */
	size_t ninc;
	struct sbuf dev;  /* what the device gets */
	struct sbuf defs; /* the -D and -U options as #define and #undef lines, in order */
	struct sbuf undefs; /* an #undef line for each -D macro (a compiled unit's end) */
	struct macro *macros; /* the -D macros in force after every option, for computed #includes */
	size_t nmacros;
	int create_library, enable_link_options;
	char bad[128]; /* the refused option */
};

/* parse_opts: 0, or -1 with o->bad naming the refused option (or "" when
 * out of memory); opts_free frees o either way. link: clLinkProgram's
 * options. */
int parse_opts(const char *s, struct opts *o, int link);
void opts_free(struct opts *o);
/* next_word: the next word of an option string, split as a compiler
 * splits it (malloc'd); NULL at the end. *quoted: it had quotes or
 * backslashes. */
char *next_word(const char **sp, int *quoted);

/* An embedded header of clCompileProgram. */
struct header {
	const char *name;
	const char *src;
};

struct expand {
	struct sbuf out;
	struct sbuf log; /* what the ICD says in the build log */
	const struct opts *o;
	const struct header *hdrs;
	size_t nhdrs;
	char **once; /* files with #pragma once, by resolved path */
	size_t nonce;
	int failed; /* too deep, too large */
	int line_ok; /* the device takes "#line NUMBER" (ABI 1.7) */
};

/* expand_source appends the program's source (src, len bytes) to x->out
 * with its includes inlined, what the ICD has to say about them to x->log;
 * x->failed when it is too large or nested too deeply. expand_free frees
 * what x keeps besides out and log. */
void expand_source(struct expand *x, const char *src, size_t len);
void expand_free(struct expand *x);

#endif /* VGPUD_PROGRAM_OPTIONS_H */
