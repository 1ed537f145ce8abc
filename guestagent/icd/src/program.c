/* program.c: programs: source, options, includes, builds, binaries.
 *
 * The device compiles OpenCL C on the host and, so that no guest can make
 * the host compiler read host files, refuses #include and -I (docs/ABI.md
 * "Program source and build options"). The ICD therefore resolves
 * #include "x" and #include <x> itself, in the guest, with the
 * application's own rights: "x" against the including file's directory
 * (the current directory for the program's source), then the -I
 * directories in order; <x> against the -I directories, then the current
 * directory. Each file's text is inlined in place of its directive
 * (#pragma once honoured). A header that is not found becomes an #error
 * line, so that one inside a false #if costs nothing. The -I options are
 * consumed; every other option must be one the device accepts, or the
 * build fails with CL_INVALID_BUILD_OPTIONS before anything is sent.
 *
 * Every -D and -U option becomes a source line instead, in option order,
 * before the source: -DNAME is #define NAME 1, -DNAME=VALUE is #define
 * NAME VALUE, -D'F(x)=BODY' is #define F(x) BODY (as clang reads -D: the
 * name, with its parameters, up to the first '='), -UNAME is #undef NAME.
 * So function-like macros and values the device's option rules refuse
 * (quotes, backslashes) work, and the device sees only -w, -Werror and
 * -cl-* options. Options are split as a compiler splits them without a
 * shell (llvm's GNU tokenizer): blanks separate words, quotes group,
 * a backslash escapes the next character outside single quotes.
 *
 * A program "binary" is a portable blob: a magic, the version, the options
 * the device was given and the inlined source. Applications that cache
 * binaries (pyopencl does) get it back and build it again anywhere.
 * clCompileProgram keeps the inlined source and options (with the
 * embedded headers it is given, its -D and -U lines before it and an
 * #undef of each -D macro after it, so that a unit's macros end with it);
 * clLinkProgram concatenates the compiled sources and builds the whole. */
#define _GNU_SOURCE
#include "icd.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ENTER(ctx)                                                                                           \
	do {                                                                                                 \
		IREF(ctx);                                                                                   \
		ctx_lock(ctx);                                                                               \
	} while (0)
#define LEAVE(ctx)                                                                                           \
	do {                                                                                                 \
		ctx_unlock(ctx);                                                                             \
		PUT(ctx);                                                                                    \
	} while (0)

#define BIN_MAGIC "VGPUDBIN"
#define BIN_VERSION 1
#define MAX_INCLUDE_DEPTH 64
#define LOG_CAP VGPU_MAX_BUILD_LOG_LEN
#define INFO_CAP (256u << 10)

/* ---- A growing string ----------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap : 256;
		while (nc < b->len + n + 1)
			nc *= 2;
		char *np = realloc(b->p, nc);
		if (np == NULL) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	if (n > 0)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) VGPU_PRINTF(2, 3);
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
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

/* ---- Options -------------------------------------------------------- */

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

/* A -D macro: name, parameters (func: function-like; a final "..." is
 * __VA_ARGS__), body. */
struct macro {
	char *name;
	char **params;
	size_t nparams;
	int func;
	char *body;
};

static void macro_free(struct macro *m)
{
	free(m->name);
	for (size_t i = 0; i < m->nparams; i++)
		free(m->params[i]);
	free(m->params);
	free(m->body);
}

static void opts_free(struct opts *o)
{
	for (size_t i = 0; i < o->nmacros; i++)
		macro_free(&o->macros[i]);
	free(o->macros);
	for (size_t i = 0; i < o->ninc; i++)
		free(o->inc[i]);
	free(o->inc);
	free(o->dev.p);
	free(o->defs.p);
	free(o->undefs.p);
	memset(o, 0, sizeof *o);
}

static int push(char ***list, size_t *n, const char *s)
{
	char **nl = realloc(*list, (*n + 1) * sizeof **list);
	if (nl == NULL)
		return -1;
	*list = nl;
	if ((nl[*n] = strdup(s)) == NULL)
		return -1;
	(*n)++;
	return 0;
}

/* next_word splits options as a compiler does without a shell (llvm's
 * TokenizeGNUCommandLine, which clang uses): blanks separate words, '...'
 * and "..." group (for paths with blanks, "-I \"/a b\""), a backslash
 * outside single quotes takes the next character literally. NULL at the
 * end. *quoted: the word had quotes or backslashes. */
static char *next_word(const char **sp, int *quoted)
{
	const char *s = *sp;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	if (*s == '\0')
		return NULL;
	struct sbuf w = {0};
	*quoted = 0;
	while (*s != '\0' && *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') {
		if (*s == '"' || *s == '\'') {
			char q = *s++;
			*quoted = 1;
			while (*s != '\0' && *s != q) {
				if (q == '"' && *s == '\\' && s[1] != '\0')
					s++;
				sb_add(&w, s++, 1);
			}
			if (*s == q)
				s++;
		} else if (*s == '\\' && s[1] != '\0') {
			*quoted = 1;
			s++;
			sb_add(&w, s++, 1);
		} else {
			sb_add(&w, s++, 1);
		}
	}
	*sp = s;
	if (w.p == NULL)
		sb_add(&w, "", 0);
	return w.oom ? NULL : w.p;
}

static int ident(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return 0;
	return 1;
}

static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

/* add_def turns the operand w of a -D (def) or -U option into a line of
 * o->defs, as clang does: for -D, what precedes the first '=' is the
 * name, an identifier optionally followed at once by a parameter list
 * (identifiers and a final "...", separated by commas); what follows it
 * is the value up to a newline (none: 1). For -U, the operand is an
 * identifier. 0, or -1 when the operand is none of these. */
static int add_def(struct opts *o, int def, const char *w)
{
	const char *eq = def ? strchr(w, '=') : NULL;
	const char *hend = eq != NULL ? eq : w + strlen(w);
	const char *p = w;
	while (p < hend && (isalnum((unsigned char)*p) || *p == '_'))
		p++;
	if (!ident(w, (size_t)(p - w)))
		return -1;
	size_t nlen = (size_t)(p - w);
	struct macro mac = {0};
	/* -U, or a -D of the same name, ends an earlier definition. */
	for (size_t i = 0; i < o->nmacros; i++) {
		if (strlen(o->macros[i].name) == (size_t)(p - w) && memcmp(o->macros[i].name, w, (size_t)(p - w)) == 0) {
			macro_free(&o->macros[i]);
			o->macros[i] = o->macros[--o->nmacros];
			break;
		}
	}
	if (!def) {
		if (*p != '\0')
			return -1;
		sb_str(&o->defs, "#undef ");
		sb_str(&o->defs, w);
		sb_str(&o->defs, "\n");
		return 0;
	}
	if (p < hend) {
		/* A function-like macro: "(a, b, ...)" closing the name. */
		if (*p++ != '(')
			return -1;
		int first = 1, variadic = 0;
		mac.func = 1;
		for (;;) {
			p = skip_blanks(p, hend);
			if (p < hend && *p == ')' && first) {
				p++;
				break;
			}
			if (variadic) {
				macro_free(&mac);
				return -1;
			}
			if (hend - p >= 3 && memcmp(p, "...", 3) == 0) {
				variadic = 1;
				p += 3;
				push(&mac.params, &mac.nparams, "__VA_ARGS__");
			} else {
				const char *a = p;
				while (p < hend && (isalnum((unsigned char)*p) || *p == '_'))
					p++;
				if (!ident(a, (size_t)(p - a))) {
					macro_free(&mac);
					return -1;
				}
				char *pn = vgpu_strndup(a, (size_t)(p - a));
				if (pn != NULL)
					push(&mac.params, &mac.nparams, pn);
				free(pn);
				if (hend - p >= 3 && memcmp(p, "...", 3) == 0) {
					variadic = 1; /* a named variadic parameter, "args..." */
					p += 3;
				}
			}
			p = skip_blanks(p, hend);
			if (p < hend && *p == ')') {
				p++;
				break;
			}
			if (p >= hend || *p++ != ',') {
				macro_free(&mac);
				return -1;
			}
			first = 0;
		}
		if (p != hend) {
			macro_free(&mac);
			return -1;
		}
	}
	size_t vlen = 1;
	const char *v = "1";
	if (eq != NULL) {
		v = eq + 1;
		vlen = strcspn(v, "\n\r");
		/* A value ending in a backslash would splice the next line. */
		size_t t = vlen;
		while (t > 0 && (v[t - 1] == ' ' || v[t - 1] == '\t'))
			t--;
		if (t > 0 && v[t - 1] == '\\') {
			macro_free(&mac);
			return -1;
		}
	}
	mac.name = vgpu_strndup(w, nlen);
	mac.body = vgpu_strndup(v, vlen);
	struct macro *nm = realloc(o->macros, (o->nmacros + 1) * sizeof *nm);
	if (nm == NULL || mac.name == NULL || mac.body == NULL) {
		macro_free(&mac);
		if (nm != NULL)
			o->macros = nm;
		o->defs.oom = 1;
		return 0;
	}
	o->macros = nm;
	o->macros[o->nmacros++] = mac;
	sb_str(&o->defs, "#define ");
	sb_add(&o->defs, w, (size_t)(hend - w));
	sb_str(&o->defs, " ");
	sb_add(&o->defs, v, vlen);
	sb_str(&o->defs, "\n");
	sb_str(&o->undefs, "#undef ");
	sb_add(&o->undefs, w, nlen);
	sb_str(&o->undefs, "\n");
	return 0;
}

static const char *const cl_stds[] = {"-cl-std=CL1.0", "-cl-std=CL1.1", "-cl-std=CL1.2", "-cl-std=CL2.0",
				      "-cl-std=CL3.0"};

/* parse_opts: 0, or -1 with o->bad naming the refused option (or "" when
 * out of memory). link: clLinkProgram's options. */
static int parse_opts(const char *s, struct opts *o, int link)
{
	memset(o, 0, sizeof *o);
	sb_add(&o->dev, "", 0);
	if (s == NULL)
		return o->dev.oom ? -1 : 0;
	int quoted;
	char *w;
	while ((w = next_word(&s, &quoted)) != NULL) {
		int ok = 1;
		if (link) {
			if (strcmp(w, "-create-library") == 0)
				o->create_library = 1;
			else if (strcmp(w, "-enable-link-options") == 0)
				o->enable_link_options = 1;
			else if (strncmp(w, "-cl-", 4) == 0 && !quoted)
				sb_printf(&o->dev, "%s%s", o->dev.len ? " " : "", w);
			else
				ok = 0;
		} else if (strcmp(w, "-I") == 0 || (strncmp(w, "-I", 2) == 0)) {
			char *dir = w[2] != '\0' ? strdup(w + 2) : next_word(&s, &quoted);
			if (dir == NULL || dir[0] == '\0' || push(&o->inc, &o->ninc, dir) != 0)
				ok = 0;
			free(dir);
		} else if (strcmp(w, "-D") == 0 || strcmp(w, "-U") == 0) {
			char *m = next_word(&s, &quoted);
			ok = m != NULL && add_def(o, w[1] == 'D', m) == 0;
			free(m);
		} else if (strncmp(w, "-D", 2) == 0 || strncmp(w, "-U", 2) == 0) {
			ok = add_def(o, w[1] == 'D', w + 2) == 0;
		} else if ((strcmp(w, "-w") == 0 || strcmp(w, "-Werror") == 0) && !quoted) {
			sb_printf(&o->dev, "%s%s", o->dev.len ? " " : "", w);
		} else if (strncmp(w, "-cl-std=", 8) == 0) {
			ok = 0;
			for (size_t i = 0; i < sizeof cl_stds / sizeof cl_stds[0]; i++)
				if (strcmp(w, cl_stds[i]) == 0)
					ok = 1;
			if (ok)
				sb_printf(&o->dev, "%s%s", o->dev.len ? " " : "", w);
		} else if (strncmp(w, "-cl-", 4) == 0 && !quoted) {
			for (const unsigned char *p = (const unsigned char *)w; *p != '\0'; p++)
				if (*p < 0x21 || *p >= 0x7f || *p == '"' || *p == '\'' || *p == '\\')
					ok = 0;
			if (ok)
				sb_printf(&o->dev, "%s%s", o->dev.len ? " " : "", w);
		} else {
			ok = 0;
		}
		if (!ok) {
			snprintf(o->bad, sizeof o->bad, "%s", w);
			free(w);
			return -1;
		}
		free(w);
	}
	if (o->dev.oom || o->defs.oom || o->undefs.oom || o->dev.len > VGPU_MAX_OPTIONS_LEN) {
		snprintf(o->bad, sizeof o->bad, "%s", o->dev.len <= VGPU_MAX_OPTIONS_LEN ? "" : "(options longer than the device takes)");
		return -1;
	}
	return 0;
}

/* ---- Includes ------------------------------------------------------- */

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
};

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rbe");
	if (f == NULL)
		return NULL;
	struct sbuf b = {0};
	char tmp[8192];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		sb_add(&b, tmp, n);
	fclose(f);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	if (b.p == NULL)
		sb_add(&b, "", 0);
	*len = b.len;
	return b.p;
}

static int is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join(const char *dir, const char *name)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* find resolves an include; the path, or NULL. Embedded headers come as
 * "\x01<index>" (their own name space). */
static char *find(const struct expand *x, const char *name, int angle, const char *curdir)
{
	for (size_t i = 0; i < x->nhdrs; i++) {
		if (strcmp(x->hdrs[i].name, name) == 0) {
			char *p = NULL;
			if (asprintf(&p, "\x01%zu", i) < 0)
				return NULL;
			return p;
		}
	}
	if (name[0] == '/')
		return is_file(name) ? strdup(name) : NULL;
	if (!angle) {
		char *p = join(curdir, name);
		if (p != NULL && is_file(p))
			return p;
		free(p);
	}
	for (size_t i = 0; i < x->o->ninc; i++) {
		char *p = join(x->o->inc[i], name);
		if (p != NULL && is_file(p))
			return p;
		free(p);
	}
	if (angle) {
		char *p = join(".", name);
		if (p != NULL && is_file(p))
			return p;
		free(p);
	}
	return NULL;
}

static int seen_once(const struct expand *x, const char *path)
{
	for (size_t i = 0; i < x->nonce; i++)
		if (strcmp(x->once[i], path) == 0)
			return 1;
	return 0;
}

/* directive: if line (len n) is a preprocessor directive, its name
 * (word after '#') and the rest; 0 otherwise. */
static int directive(const char *line, size_t n, const char **name, size_t *nlen, const char **rest)
{
	size_t i = 0;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i >= n || line[i] != '#')
		return 0;
	i++;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	size_t s = i;
	while (i < n && (isalnum((unsigned char)line[i]) || line[i] == '_'))
		i++;
	*name = line + s;
	*nlen = i - s;
	*rest = line + i;
	return 1;
}

static void expand(struct expand *x, const char *src, size_t len, const char *path, int depth);

/* ---- Computed includes ---------------------------------------------- */

/* A computed #include (#include M2S(INCLUDE_PATH/inc_vendor.h), hashcat's)
 * names its file through macros. The ICD expands it with the macros of
 * the -D options (not the source's #defines: those depend on #if, which
 * the ICD does not evaluate), as a preprocessor would: object-like and
 * function-like macros, arguments expanded before substitution unless
 * stringified with #, the result rescanned, a macro not expanded inside
 * itself. */
static const struct macro *find_macro(const struct opts *o, const char *s, size_t n)
{
	for (size_t i = 0; i < o->nmacros; i++)
		if (strlen(o->macros[i].name) == n && memcmp(o->macros[i].name, s, n) == 0)
			return &o->macros[i];
	return NULL;
}

static int is_id(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* stringify: #arg, blanks collapsed, quotes and backslashes escaped. */
static void stringify(struct sbuf *out, const char *a, size_t n)
{
	while (n > 0 && isspace((unsigned char)*a))
		a++, n--;
	while (n > 0 && isspace((unsigned char)a[n - 1]))
		n--;
	sb_str(out, "\"");
	for (size_t i = 0; i < n; i++) {
		if (isspace((unsigned char)a[i])) {
			while (i + 1 < n && isspace((unsigned char)a[i + 1]))
				i++;
			sb_str(out, " ");
		} else {
			if (a[i] == '"' || a[i] == '\\')
				sb_str(out, "\\");
			sb_add(out, &a[i], 1);
		}
	}
	sb_str(out, "\"");
}

/* mexpand appends s (n bytes) to out with the macros expanded; hide: the
 * macros being expanded (not again inside themselves). -1: too deep. */
static int mexpand(const struct opts *o, const char *s, size_t n, struct sbuf *out, const struct macro **hide,
		   int nhide)
{
	if (nhide >= 32)
		return -1;
	for (size_t i = 0; i < n;) {
		if (s[i] == '"' || s[i] == '\'') {
			size_t j = i + 1;
			while (j < n && s[j] != s[i])
				j += s[j] == '\\' ? 2 : 1;
			j = j < n ? j + 1 : n;
			sb_add(out, s + i, j - i);
			i = j;
			continue;
		}
		if (!is_id(s[i]) || (i > 0 && is_id(s[i - 1]))) {
			sb_add(out, s + i, 1);
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && is_id(s[j]))
			j++;
		const struct macro *m = isdigit((unsigned char)s[i]) ? NULL : find_macro(o, s + i, j - i);
		for (int h = 0; m != NULL && h < nhide; h++)
			if (hide[h] == m)
				m = NULL;
		size_t k = j;
		while (m != NULL && m->func && k < n && isspace((unsigned char)s[k]))
			k++;
		if (m == NULL || (m->func && (k >= n || s[k] != '('))) {
			sb_add(out, s + i, j - i);
			i = j;
			continue;
		}
		hide[nhide] = m;
		struct sbuf body = {0};
		sb_add(&body, "", 0);
		if (!m->func) {
			sb_str(&body, m->body);
			i = j;
		} else {
			/* The arguments: split at top-level commas. */
			const char *args[64];
			size_t alen[64], na = 0, depth = 0, a0 = k + 1;
			for (k = k + 1; k < n; k++) {
				if (s[k] == '(') {
					depth++;
				} else if ((s[k] == ',' && depth == 0 && na + 1 < m->nparams) || (s[k] == ')' && depth == 0)) {
					if (na < 64) {
						args[na] = s + a0;
						alen[na++] = k - a0;
					}
					a0 = k + 1;
					if (s[k] == ')')
						break;
				} else if (s[k] == ')') {
					depth--;
				}
			}
			if (k >= n) {
				free(body.p);
				return -1; /* unbalanced */
			}
			i = k + 1;
			if (m->nparams == 0 && na == 1 && alen[0] == 0)
				na = 0;
			/* Substitute the parameters in the body. */
			const char *b = m->body;
			size_t bn = strlen(b);
			for (size_t q = 0; q < bn;) {
				int str = 0;
				size_t q0 = q;
				if (b[q] == '#' && (q + 1 >= bn || b[q + 1] != '#') && (q == 0 || b[q - 1] != '#')) {
					size_t r = q + 1;
					while (r < bn && isspace((unsigned char)b[r]))
						r++;
					if (r < bn && is_id(b[r])) {
						str = 1;
						q = r;
					}
				}
				if (!is_id(b[q]) || (q > 0 && is_id(b[q - 1]) && !str)) {
					sb_add(&body, b + q, 1);
					q++;
					continue;
				}
				size_t r = q;
				while (r < bn && is_id(b[r]))
					r++;
				size_t pi = 0;
				while (pi < m->nparams && !(strlen(m->params[pi]) == r - q && memcmp(m->params[pi], b + q, r - q) == 0))
					pi++;
				if (pi == m->nparams) {
					sb_add(&body, b + q0, r - q0);
				} else if (str) {
					stringify(&body, pi < na ? args[pi] : "", pi < na ? alen[pi] : 0);
				} else if (pi < na) {
					if (mexpand(o, args[pi], alen[pi], &body, hide, nhide) != 0) {
						free(body.p);
						return -1;
					}
				}
				q = r;
			}
		}
		int rc = body.oom ? -1 : mexpand(o, body.p, body.len, out, hide, nhide + 1);
		free(body.p);
		if (rc != 0)
			return -1;
	}
	return 0;
}

/* include_at replaces one #include line with the file's text; computed:
 * rest is a computed include's expansion already. */
static void include_at(struct expand *x, const char *rest, const char *end, const char *curdir, int depth,
		       int computed)
{
	while (rest < end && (*rest == ' ' || *rest == '\t'))
		rest++;
	if (rest < end && *rest != '"' && *rest != '<' && !computed) {
		/* A computed include: expand the macros, then read it again. */
		const struct macro *hide[33];
		struct sbuf e = {0};
		sb_add(&e, "", 0);
		if (mexpand(x->o, rest, (size_t)(end - rest), &e, hide, 0) == 0 && !e.oom) {
			include_at(x, e.p, e.p + e.len, curdir, depth, 1);
		} else {
			sb_str(&x->out, "#error \"vgpud ICD: malformed #include\"\n");
		}
		free(e.p);
		return;
	}
	char close = 0;
	if (rest < end && *rest == '"')
		close = '"';
	else if (rest < end && *rest == '<')
		close = '>';
	const char *q = close ? memchr(rest + 1, close, (size_t)(end - rest - 1)) : NULL;
	if (q == NULL) {
		sb_str(&x->out, "#error \"vgpud ICD: malformed #include\"\n");
		return;
	}
	char *name = vgpu_strndup(rest + 1, (size_t)(q - rest - 1));
	if (name == NULL) {
		x->out.oom = 1;
		return;
	}
	char *p = find(x, name, close == '>', curdir);
	if (p == NULL) {
		/* Kept for the compiler to report, if the line is live. */
		sb_printf(&x->out, "#error \"vgpud ICD: cannot find include file %s\"\n", name);
		sb_printf(&x->log, "vgpud ICD: include file %s not found (searched %s%zu -I directories)\n", name,
			  close == '"' ? "the including file's directory, " : "", x->o->ninc);
	} else if (!seen_once(x, p)) {
		size_t n = 0;
		char *text = NULL;
		if (p[0] == '\x01') {
			const struct header *h = &x->hdrs[strtoul(p + 1, NULL, 10)];
			text = strdup(h->src);
			n = text != NULL ? strlen(text) : 0;
		} else {
			text = read_file(p, &n);
		}
		if (text == NULL) {
			sb_printf(&x->out, "#error \"vgpud ICD: cannot read include file %s\"\n", name);
			sb_printf(&x->log, "vgpud ICD: %s: %s\n", p, strerror(errno));
		} else {
			expand(x, text, n, p, depth + 1);
			if (n > 0 && text[n - 1] != '\n')
				sb_add(&x->out, "\n", 1);
		}
		free(text);
	}
	free(p);
	free(name);
}

static void do_include(struct expand *x, const char *rest, const char *end, const char *curdir, int depth)
{
	include_at(x, rest, end, curdir, depth, 0);
}

/* expand copies src to x->out with its includes inlined. path is the
 * file's resolved path ("" for the program's source), for #pragma once
 * and for the directory of "x" includes. */
static void expand(struct expand *x, const char *src, size_t len, const char *path, int depth)
{
	if (depth > MAX_INCLUDE_DEPTH) {
		sb_str(&x->log, "vgpud ICD: #include nested too deeply\n");
		x->failed = 1;
		return;
	}
	char *dirbuf = NULL;
	const char *curdir = ".";
	if (path[0] != '\0' && path[0] != '\x01') {
		dirbuf = strdup(path);
		char *slash = dirbuf != NULL ? strrchr(dirbuf, '/') : NULL;
		if (slash != NULL) {
			*slash = '\0';
			curdir = dirbuf[0] != '\0' ? dirbuf : "/";
		}
	}
	int in_comment = 0; /* inside a block comment at the start of the line */
	const char *end = src + len;
	for (const char *line = src; line < end;) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		const char *le = nl != NULL ? nl : end;
		const char *next = nl != NULL ? nl + 1 : end;
		const char *name, *rest;
		size_t nlen;
		int handled = 0;
		if (!in_comment && directive(line, (size_t)(le - line), &name, &nlen, &rest)) {
			if (nlen == 7 && memcmp(name, "include", 7) == 0) {
				do_include(x, rest, le, curdir, depth);
				handled = 1;
			} else if (nlen == 6 && memcmp(name, "pragma", 6) == 0) {
				const char *r = rest;
				while (r < le && (*r == ' ' || *r == '\t'))
					r++;
				if ((size_t)(le - r) >= 4 && memcmp(r, "once", 4) == 0 &&
				    (le - r == 4 || isspace((unsigned char)r[4]))) {
					if (path[0] != '\0')
						push(&x->once, &x->nonce, path);
					sb_add(&x->out, "\n", 1);
					handled = 1;
				}
			} else if (nlen == 4 && memcmp(name, "line", 4) == 0) {
				/* The device refuses #line; it only renumbers. */
				sb_add(&x->out, "\n", 1);
				handled = 1;
			}
		}
		if (!handled)
			sb_add(&x->out, line, (size_t)(next - line));
		/* Track block comments (and skip strings and line comments). */
		for (const char *p = line; p < le; p++) {
			if (in_comment) {
				if (p + 1 < le && p[0] == '*' && p[1] == '/') {
					in_comment = 0;
					p++;
				}
			} else if (p + 1 < le && p[0] == '/' && p[1] == '*') {
				in_comment = 1;
				p++;
			} else if (p + 1 < le && p[0] == '/' && p[1] == '/') {
				break;
			} else if (*p == '"' || *p == '\'') {
				char q = *p;
				for (p++; p < le && *p != q; p++)
					if (*p == '\\')
						p++;
			}
		}
		line = next;
		if (x->out.len > VGPU_MAX_SOURCE_LEN) {
			x->failed = 1;
			break;
		}
	}
	free(dirbuf);
}

static void expand_free(struct expand *x)
{
	for (size_t i = 0; i < x->nonce; i++)
		free(x->once[i]);
	free(x->once);
}

/* ---- Objects -------------------------------------------------------- */

static cl_program new_program(cl_context ctx)
{
	cl_program p = calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	vgpu_obj_init(&p->obj, VGPU_PROGRAM);
	p->ctx = ctx;
	IREF(ctx);
	p->status = CL_BUILD_NONE;
	p->bintype = CL_PROGRAM_BINARY_TYPE_NONE;
	return p;
}

static void free_kernels(cl_program p)
{
	for (cl_uint i = 0; i < p->nkernels; i++)
		free(p->kernels[i].args);
	free(p->kernels);
	p->kernels = NULL;
	p->nkernels = 0;
	free(p->kernel_names);
	p->kernel_names = NULL;
}

static void drop_device_program(cl_program p)
{
	if (p->id != 0 && conn_ok(p->ctx)) {
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_program_free b;
		} f = {.b = {.program = p->id}};
		conn_hdr(p->ctx, &f, VGPU_ICDP_OP_PROGRAM_FREE, sizeof f);
		conn_send(p->ctx, &f, sizeof f);
	}
	p->id = 0;
}

void vgpu_program_destroy(cl_program p)
{
	cl_context ctx = p->ctx;
	ctx_lock(ctx);
	drop_device_program(p);
	ctx_unlock(ctx);
	free_kernels(p);
	free(p->source);
	free(p->built_src);
	free(p->built_opts);
	free(p->options);
	free(p->log);
	free(p);
	PUT(ctx);
}

cl_program CL_API_CALL vgpu_clCreateProgramWithSource(cl_context context, cl_uint count, const char **strings,
						      const size_t *lengths, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (count == 0 || strings == NULL) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	struct sbuf b = {0};
	for (cl_uint i = 0; i < count; i++) {
		if (strings[i] == NULL) {
			free(b.p);
			err = CL_INVALID_VALUE;
			goto put;
		}
		size_t n = lengths != NULL && lengths[i] != 0 ? strnlen(strings[i], lengths[i]) : strlen(strings[i]);
		if (lengths != NULL && lengths[i] != 0)
			n = lengths[i]; /* the bytes as given, NULs included (refused by the device) */
		sb_add(&b, strings[i], n);
	}
	if (b.p == NULL)
		sb_add(&b, "", 0);
	if (b.oom || (p = new_program(ctx)) == NULL) {
		free(b.p);
		err = CL_OUT_OF_HOST_MEMORY;
		goto put;
	}
	p->source = b.p;
	p->source_len = b.len;
	vgpu_obj_publish(&p->obj);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

/* The binary blob: magic, version, options length, source length, then
 * the options and the source (not NUL-terminated). */
struct binhdr {
	char magic[8];
	uint32_t version;
	uint32_t opts_len;
	uint64_t src_len;
};

static int parse_binary(const unsigned char *bin, size_t len, char **src, size_t *src_len, char **opts)
{
	struct binhdr h;
	if (bin == NULL || len < sizeof h)
		return -1;
	memcpy(&h, bin, sizeof h);
	if (memcmp(h.magic, BIN_MAGIC, 8) != 0 || h.version != BIN_VERSION || h.opts_len > VGPU_MAX_OPTIONS_LEN ||
	    h.src_len > VGPU_MAX_SOURCE_LEN || len != sizeof h + h.opts_len + h.src_len)
		return -1;
	*opts = vgpu_strndup((const char *)bin + sizeof h, h.opts_len);
	*src = vgpu_strndup((const char *)bin + sizeof h + h.opts_len, (size_t)h.src_len);
	*src_len = (size_t)h.src_len;
	if (*opts == NULL || *src == NULL) {
		free(*opts);
		free(*src);
		return -2;
	}
	return 0;
}

cl_program CL_API_CALL vgpu_clCreateProgramWithBinary(cl_context context, cl_uint num_devices,
						      const cl_device_id *devices, const size_t *lengths,
						      const unsigned char **binaries, cl_int *binary_status,
						      cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (devices == NULL || num_devices == 0) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (devices[i] != ctx->dev) {
			err = CL_INVALID_DEVICE;
			goto put;
		}
	}
	if (lengths == NULL || binaries == NULL) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (lengths[i] == 0 || binaries[i] == NULL) {
			if (binary_status != NULL)
				binary_status[i] = CL_INVALID_VALUE;
			err = CL_INVALID_VALUE;
		}
	}
	if (err != CL_SUCCESS)
		goto put;
	char *src = NULL, *opts = NULL;
	size_t src_len = 0;
	for (cl_uint i = 0; i < num_devices; i++) {
		char *s, *o;
		size_t sl;
		int r = parse_binary(binaries[i], lengths[i], &s, &sl, &o);
		if (binary_status != NULL)
			binary_status[i] = r == 0 ? CL_SUCCESS : CL_INVALID_BINARY;
		if (r == -2)
			err = CL_OUT_OF_HOST_MEMORY;
		else if (r != 0 && err == CL_SUCCESS)
			err = CL_INVALID_BINARY;
		if (r == 0 && src == NULL) {
			src = s;
			opts = o;
			src_len = sl;
		} else if (r == 0) {
			free(s);
			free(o);
		}
	}
	if (err == CL_SUCCESS && (p = new_program(ctx)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	if (err != CL_SUCCESS) {
		free(src);
		free(opts);
		goto put;
	}
	p->from_binary = 1;
	p->built_src = src;
	p->built_len = src_len;
	p->built_opts = opts;
	p->bintype = CL_PROGRAM_BINARY_TYPE_EXECUTABLE;
	vgpu_obj_publish(&p->obj);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

cl_program CL_API_CALL vgpu_clCreateProgramWithBuiltInKernels(cl_context context, cl_uint num_devices,
							      const cl_device_id *devices, const char *names,
							      cl_int *errcode_ret)
{
	cl_int err;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
	} else {
		err = CL_INVALID_VALUE; /* "a kernel name not supported": the device has none */
		if (devices != NULL && num_devices > 0)
			for (cl_uint i = 0; i < num_devices; i++)
				if (devices[i] != ctx->dev)
					err = CL_INVALID_DEVICE;
		(void)names;
		PUT(ctx);
	}
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return NULL;
}

cl_int CL_API_CALL vgpu_clRetainProgram(cl_program program)
{
	return vgpu_obj_retain(program, VGPU_PROGRAM) == 0 ? CL_SUCCESS : CL_INVALID_PROGRAM;
}

cl_int CL_API_CALL vgpu_clReleaseProgram(cl_program program)
{
	int last;
	cl_program p = vgpu_obj_release(program, VGPU_PROGRAM, &last);
	if (p == NULL)
		return CL_INVALID_PROGRAM;
	if (last) {
		cl_context ctx = p->ctx;
		ENTER(ctx);
		PUT(p);
		LEAVE(ctx);
	}
	return CL_SUCCESS;
}

/* ---- Building ------------------------------------------------------- */

/* type_size: the size of an OpenCL C scalar or vector type, 0 if not one. */
static size_t type_size(const char *t)
{
	static const struct {
		const char *name;
		size_t size;
	} base[] = {
		{"char", 1},  {"uchar", 1},  {"unsigned char", 1}, {"short", 2},  {"ushort", 2},
		{"unsigned short", 2}, {"int", 4}, {"uint", 4}, {"unsigned int", 4}, {"long", 8},
		{"ulong", 8}, {"unsigned long", 8}, {"float", 4}, {"double", 8}, {"half", 2},
		{"bool", 1},  {"size_t", 8}, {"ptrdiff_t", 8}, {"intptr_t", 8}, {"uintptr_t", 8},
	};
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
		size_t n = strlen(base[i].name);
		if (strncmp(t, base[i].name, n) != 0)
			continue;
		const char *v = t + n;
		if (*v == '\0')
			return base[i].size;
		char *e;
		unsigned long w = strtoul(v, &e, 10);
		if (*e != '\0')
			continue;
		switch (w) {
		case 2: return 2 * base[i].size;
		case 3:
		case 4: return 4 * base[i].size;
		case 8: return 8 * base[i].size;
		case 16: return 16 * base[i].size;
		}
	}
	return 0;
}

static void field(char *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 1 < n && src[i] != 0; i++)
		dst[i] = (char)src[i];
	dst[i] = '\0';
}

/* parse_info decodes the program-information blob (docs/ABI.md
 * "Program-information blob"); 0, or -1 if it is malformed. */
static int parse_info(cl_program p, const uint8_t *b, uint64_t len)
{
	struct vgpu_program_info_header h;
	if (len < sizeof h)
		return -1;
	memcpy(&h, b, sizeof h);
	if (h.total_len > len || h.total_len < sizeof h ||
	    h.kernel_count > (h.total_len - sizeof h) / sizeof(struct vgpu_kernel_info))
		return -1;
	struct vgpu_kinfo *ks = calloc(h.kernel_count + 1, sizeof *ks);
	if (ks == NULL)
		return -1;
	uint64_t off = sizeof h;
	struct sbuf names = {0};
	sb_add(&names, "", 0);
	for (uint32_t i = 0; i < h.kernel_count; i++) {
		struct vgpu_kernel_info kr;
		if (h.total_len - off < sizeof kr)
			goto bad;
		memcpy(&kr, b + off, sizeof kr);
		off += sizeof kr;
		if (kr.num_args > (h.total_len - off) / sizeof(struct vgpu_arg_info) || kr.num_args > VGPU_MAX_KERNEL_ARGS)
			goto bad;
		struct vgpu_kinfo *k = &ks[i];
		field(k->name, kr.name, sizeof kr.name);
		k->num_args = kr.num_args;
		k->work_group_size = kr.work_group_size;
		k->preferred_multiple = kr.preferred_multiple;
		k->local_mem = kr.local_mem_size;
		k->private_mem = kr.private_mem_size;
		for (int d = 0; d < 3; d++)
			k->compile_wg[d] = kr.compile_work_group_size[d];
		k->args = calloc(kr.num_args + 1, sizeof *k->args);
		if (k->args == NULL)
			goto bad;
		for (uint32_t j = 0; j < kr.num_args; j++) {
			struct vgpu_arg_info ar;
			memcpy(&ar, b + off, sizeof ar);
			off += sizeof ar;
			struct vgpu_karg_info *a = &k->args[j];
			a->address = ar.address_qualifier;
			a->access = ar.access_qualifier;
			a->type_qual = ar.type_qualifier;
			field(a->type_name, ar.type_name, sizeof ar.type_name);
			field(a->name, ar.name, sizeof ar.name);
			a->scalar_size = a->address == VGPU_ARG_ADDRESS_PRIVATE ? type_size(a->type_name) : 0;
		}
		sb_printf(&names, "%s%s", i ? ";" : "", k->name);
	}
	if (names.oom)
		goto bad;
	free_kernels(p);
	p->kernels = ks;
	p->nkernels = h.kernel_count;
	p->kernel_names = names.p;
	return 0;
bad:
	for (uint32_t i = 0; i < h.kernel_count; i++)
		free(ks[i].args);
	free(ks);
	free(names.p);
	return -1;
}

/* set_log makes the build log icd (the ICD's lines) then dev (dev_len
 * bytes of the device's, not NUL-terminated). icd may be the old log. */
static void set_log(cl_program p, const char *icd, const char *dev, size_t dev_len)
{
	struct sbuf b = {0};
	sb_add(&b, "", 0);
	if (icd != NULL)
		sb_str(&b, icd);
	if (dev != NULL)
		sb_add(&b, dev, dev_len);
	free(p->log);
	p->log = b.p;
}

static void set_log_msg(cl_program p, const char *icd, const char *msg)
{
	set_log(p, icd, msg, strlen(msg));
}

/* device_build sends Build for p->built_src with p->built_opts and takes
 * the log and the kernel information. Returns CL_SUCCESS or the error of
 * clBuildProgram. icdlog is what the ICD adds to the front of the log. */
static cl_int device_build(cl_program p, const char *icdlog)
{
	cl_context ctx = p->ctx;
	drop_device_program(p);
	free_kernels(p);
	p->status = CL_BUILD_IN_PROGRESS;
	if (p->built_len == 0 || p->built_len > VGPU_MAX_SOURCE_LEN) {
		set_log_msg(p, icdlog,
			    p->built_len == 0 ? "vgpud ICD: the program is empty\n"
					      : "vgpud ICD: the source (includes inlined) is longer than the device takes (1 MiB)\n");
		p->status = CL_BUILD_ERROR;
		return CL_BUILD_PROGRAM_FAILURE;
	}
	size_t olen = strlen(p->built_opts != NULL ? p->built_opts : "");
	uint64_t need = p->built_len + olen + LOG_CAP + INFO_CAP;
	struct vgpu_range r;
	cl_int err = arena_alloc(ctx, need, &r);
	if (err != CL_SUCCESS) {
		p->status = CL_BUILD_ERROR;
		return err;
	}
	uint8_t *a = arena_ptr(ctx, &r);
	memcpy(a, p->built_src, p->built_len);
	memcpy(a + p->built_len, p->built_opts != NULL ? p->built_opts : "", olen);
	if (++ctx->next_program == 0)
		++ctx->next_program;
	uint32_t id = ctx->next_program;
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_build b;
	} m = {.b = {
		       .device = ctx->dev->index,
		       .program = id,
		       .arena = r.arena,
		       .src_offset = r.off,
		       .src_len = (uint32_t)p->built_len,
		       .opts_len = (uint32_t)olen,
		       .opts_offset = r.off + p->built_len,
		       .out_offset = r.off + p->built_len + olen,
		       .out_cap = LOG_CAP + INFO_CAP,
	       }};
	conn_hdr(ctx, &m, VGPU_ICDP_OP_BUILD, sizeof m);
	struct vgpu_icdp_build_reply br;
	long n = conn_call(ctx, &m, sizeof m, &br, sizeof br);
	if (n < (long)sizeof br) {
		arena_free(ctx, &r);
		p->status = CL_BUILD_ERROR;
		set_log_msg(p, icdlog, "vgpud ICD: the connection to vgpu-icdd failed during the build\n");
		return CL_OUT_OF_RESOURCES;
	}
	const uint8_t *out = a + p->built_len + olen;
	uint64_t cap = LOG_CAP + INFO_CAP;
	uint64_t loglen = br.log_len < cap ? br.log_len : cap;
	/* The ICD's lines (headers not found, which a false #if may have
	 * skipped) only matter when the build failed: applications warn about
	 * any log of a successful build. */
	set_log(p, br.status != VGPU_STATUS_OK ? icdlog : NULL, (const char *)out, (size_t)loglen);
	if (br.status != VGPU_STATUS_OK) {
		arena_free(ctx, &r);
		p->status = CL_BUILD_ERROR;
		return br.status == VGPU_STATUS_BUILD_FAILED ? CL_BUILD_PROGRAM_FAILURE : CL_OUT_OF_RESOURCES;
	}
	p->id = id;
	int ok;
	if (loglen + br.info_len <= cap) {
		ok = parse_info(p, out + loglen, br.info_len) == 0;
	} else {
		/* Ask again, with room. */
		struct vgpu_range ir;
		ok = 0;
		if (br.info_len < (64u << 20) && arena_alloc(ctx, br.info_len, &ir) == CL_SUCCESS) {
			struct {
				struct vgpu_icdp_header h;
				struct vgpu_icdp_program_info b;
			} q = {.b = {.program = id, .arena = ir.arena, .out_offset = ir.off, .out_cap = ir.len}};
			conn_hdr(ctx, &q, VGPU_ICDP_OP_PROGRAM_INFO, sizeof q);
			struct vgpu_icdp_program_info_reply qr;
			if (conn_call(ctx, &q, sizeof q, &qr, sizeof qr) >= (long)sizeof qr && qr.status == 0 &&
			    qr.info_len <= ir.len)
				ok = parse_info(p, arena_ptr(ctx, &ir), qr.info_len) == 0;
			arena_free(ctx, &ir);
		}
	}
	arena_free(ctx, &r);
	if (!ok) {
		drop_device_program(p);
		p->status = CL_BUILD_ERROR;
		set_log_msg(p, p->log, "vgpud ICD: the program information from the device is malformed\n");
		return CL_OUT_OF_RESOURCES;
	}
	p->status = CL_BUILD_SUCCESS;
	p->bintype = CL_PROGRAM_BINARY_TYPE_EXECUTABLE;
	return CL_SUCCESS;
}

/* check_devices: clBuildProgram's device list rules. */
static cl_int check_devices(cl_program p, cl_uint num_devices, const cl_device_id *devices)
{
	if ((devices == NULL) != (num_devices == 0))
		return CL_INVALID_VALUE;
	for (cl_uint i = 0; i < num_devices; i++)
		if (devices[i] != p->ctx->dev)
			return CL_INVALID_DEVICE;
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clBuildProgram(cl_program program, cl_uint num_devices, const cl_device_id *devices,
				       const char *options, void(CL_CALLBACK *notify)(cl_program, void *),
				       void *user_data)
{
	cl_program p = GET(program, VGPU_PROGRAM);
	if (p == NULL)
		return CL_INVALID_PROGRAM;
	cl_context ctx = p->ctx;
	ENTER(ctx);
	cl_int err = check_devices(p, num_devices, devices);
	if (err == CL_SUCCESS && notify == NULL && user_data != NULL)
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && p->nkernel_objs > 0)
		err = CL_INVALID_OPERATION;
	if (err == CL_SUCCESS && p->source == NULL && !p->from_binary)
		err = CL_INVALID_OPERATION; /* a linked library or compiled object */
	if (err == CL_SUCCESS && !conn_ok(ctx))
		err = CL_OUT_OF_RESOURCES;
	struct opts o;
	if (err == CL_SUCCESS && parse_opts(options, &o, 0) != 0) {
		char msg[256];
		snprintf(msg, sizeof msg, "vgpud ICD: build option %s is not supported by the device\n", o.bad);
		set_log(p, msg, NULL, 0);
		p->status = CL_BUILD_ERROR;
		opts_free(&o);
		err = CL_INVALID_BUILD_OPTIONS;
	} else if (err == CL_SUCCESS) {
		free(p->options);
		p->options = strdup(options != NULL ? options : "");
		struct expand x = {.o = &o};
		sb_add(&x.log, "", 0);
		if (!p->from_binary) {
			sb_add(&x.out, o.defs.p, o.defs.len); /* -D and -U, before the source */
			expand(&x, p->source, p->source_len, "", 0);
			if (x.out.p == NULL)
				sb_add(&x.out, "", 0);
			free(p->built_src);
			free(p->built_opts);
			p->built_src = x.out.p;
			p->built_len = x.out.len;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			x.out.p = NULL;
		}
		if (x.out.oom || x.log.oom || p->built_src == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
			p->status = CL_BUILD_ERROR;
		} else if (x.failed) {
			set_log_msg(p, x.log.p, "vgpud ICD: the source with its includes is too large or nested too deeply\n");
			p->status = CL_BUILD_ERROR;
			err = CL_BUILD_PROGRAM_FAILURE;
		} else {
			err = device_build(p, x.log.p);
		}
		free(x.out.p);
		free(x.log.p);
		expand_free(&x);
		opts_free(&o);
	}
	PUT(p);
	LEAVE(ctx);
	if (notify != NULL && err != CL_INVALID_VALUE && err != CL_INVALID_DEVICE && err != CL_INVALID_OPERATION &&
	    err != CL_INVALID_BUILD_OPTIONS)
		notify(program, user_data);
	return err;
}

/* A compiled object keeps its inlined source and options; the link builds. */
cl_int CL_API_CALL vgpu_clCompileProgram(cl_program program, cl_uint num_devices, const cl_device_id *devices,
					 const char *options, cl_uint num_headers, const cl_program *headers,
					 const char **header_names, void(CL_CALLBACK *notify)(cl_program, void *),
					 void *user_data)
{
	cl_program p = GET(program, VGPU_PROGRAM);
	if (p == NULL)
		return CL_INVALID_PROGRAM;
	cl_context ctx = p->ctx;
	ENTER(ctx);
	cl_int err = check_devices(p, num_devices, devices);
	if (err == CL_SUCCESS && ((notify == NULL && user_data != NULL) ||
				  (num_headers == 0 && (headers != NULL || header_names != NULL)) ||
				  (num_headers != 0 && (headers == NULL || header_names == NULL))))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && (p->nkernel_objs > 0 || p->source == NULL))
		err = CL_INVALID_OPERATION;
	struct header *hs = NULL;
	if (err == CL_SUCCESS && num_headers > 0 && (hs = calloc(num_headers, sizeof *hs)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	for (cl_uint i = 0; err == CL_SUCCESS && i < num_headers; i++) {
		cl_program h = GET(headers[i], VGPU_PROGRAM);
		if (h == NULL || h->source == NULL || header_names[i] == NULL) {
			err = CL_INVALID_VALUE;
		} else {
			hs[i].name = header_names[i];
			hs[i].src = h->source; /* kept alive by the application during the call */
		}
		if (h != NULL)
			PUT(h);
	}
	struct opts o;
	if (err == CL_SUCCESS && parse_opts(options, &o, 0) != 0) {
		char msg[256];
		snprintf(msg, sizeof msg, "vgpud ICD: compile option %s is not supported by the device\n", o.bad);
		set_log(p, msg, NULL, 0);
		p->status = CL_BUILD_ERROR;
		opts_free(&o);
		err = CL_INVALID_COMPILER_OPTIONS;
	} else if (err == CL_SUCCESS) {
		struct expand x = {.o = &o, .hdrs = hs, .nhdrs = num_headers};
		sb_add(&x.log, "", 0);
		sb_add(&x.out, o.defs.p, o.defs.len);
		expand(&x, p->source, p->source_len, "", 0);
		/* The unit's -D macros end with it (clLinkProgram concatenates). */
		sb_str(&x.out, "\n");
		sb_add(&x.out, o.undefs.p, o.undefs.len);
		if (x.out.oom || x.log.oom) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else if (x.failed) {
			set_log_msg(p, x.log.p, "vgpud ICD: the source with its includes is too large or nested too deeply\n");
			p->status = CL_BUILD_ERROR;
			err = CL_COMPILE_PROGRAM_FAILURE;
		} else {
			drop_device_program(p);
			free_kernels(p);
			free(p->built_src);
			free(p->built_opts);
			free(p->options);
			p->built_src = x.out.p;
			p->built_len = x.out.len;
			x.out.p = NULL;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			p->options = strdup(options != NULL ? options : "");
			set_log(p, x.log.p, NULL, 0);
			p->status = CL_BUILD_SUCCESS;
			p->bintype = CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT;
		}
		free(x.out.p);
		free(x.log.p);
		expand_free(&x);
		opts_free(&o);
	}
	free(hs);
	PUT(p);
	LEAVE(ctx);
	if (notify != NULL && (err == CL_SUCCESS || err == CL_COMPILE_PROGRAM_FAILURE))
		notify(program, user_data);
	return err;
}

cl_program CL_API_CALL vgpu_clLinkProgram(cl_context context, cl_uint num_devices, const cl_device_id *devices,
					  const char *options, cl_uint num_inputs, const cl_program *inputs,
					  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data,
					  cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if ((devices == NULL) != (num_devices == 0) || num_inputs == 0 || inputs == NULL ||
	    (notify == NULL && user_data != NULL)) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (devices[i] != ctx->dev) {
			err = CL_INVALID_DEVICE;
			goto put;
		}
	}
	struct opts lo;
	if (parse_opts(options, &lo, 1) != 0) {
		opts_free(&lo);
		err = CL_INVALID_LINKER_OPTIONS;
		goto put;
	}
	ENTER(ctx);
	struct sbuf src = {0}, devopts = {0};
	sb_add(&devopts, lo.dev.p, lo.dev.len);
	for (cl_uint i = 0; i < num_inputs && err == CL_SUCCESS; i++) {
		cl_program in = GET(inputs[i], VGPU_PROGRAM);
		if (in == NULL) {
			err = CL_INVALID_PROGRAM;
			break;
		}
		if (in->ctx != ctx || (in->bintype != CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT &&
				       in->bintype != CL_PROGRAM_BINARY_TYPE_LIBRARY)) {
			err = in->ctx != ctx ? CL_INVALID_PROGRAM : CL_INVALID_OPERATION;
			PUT(in);
			break;
		}
		struct opts io;
		if (parse_opts(in->built_opts, &io, 0) != 0) {
			opts_free(&io);
			err = CL_INVALID_OPERATION;
			PUT(in);
			break;
		}
		/* A unit's -D and -U are in its source, around it (a binary of
		 * an older ICD kept them in its options: turned into lines here). */
		sb_add(&src, io.defs.p, io.defs.len);
		sb_add(&src, in->built_src, in->built_len);
		sb_str(&src, "\n");
		sb_add(&src, io.undefs.p, io.undefs.len);
		const char *w = io.dev.p;
		int quoted;
		char *word;
		while ((word = next_word(&w, &quoted)) != NULL) {
			if (strncmp(word, "-D", 2) != 0 && strncmp(word, "-U", 2) != 0 &&
			    (devopts.p == NULL || strstr(devopts.p, word) == NULL))
				sb_printf(&devopts, "%s%s", devopts.len ? " " : "", word);
			free(word);
		}
		opts_free(&io);
		PUT(in);
	}
	if (err == CL_SUCCESS && (src.oom || devopts.oom || (p = new_program(ctx)) == NULL))
		err = CL_OUT_OF_HOST_MEMORY;
	if (err == CL_SUCCESS) {
		p->built_src = src.p;
		p->built_len = src.len;
		p->built_opts = devopts.p != NULL ? devopts.p : strdup("");
		p->options = strdup(options != NULL ? options : "");
		src.p = devopts.p = NULL;
		if (lo.create_library) {
			p->status = CL_BUILD_SUCCESS;
			p->bintype = CL_PROGRAM_BINARY_TYPE_LIBRARY;
			set_log(p, "", NULL, 0);
		} else {
			p->from_binary = 1; /* rebuilt from built_src */
			cl_int berr = device_build(p, "");
			if (berr != CL_SUCCESS) {
				/* 1.2: a failed link returns a program whose log says why. */
				err = berr == CL_BUILD_PROGRAM_FAILURE ? CL_LINK_PROGRAM_FAILURE : berr;
			}
		}
		if (err == CL_SUCCESS || err == CL_LINK_PROGRAM_FAILURE) {
			vgpu_obj_publish(&p->obj);
		} else {
			PUT(p);
			p = NULL;
		}
	}
	free(src.p);
	free(devopts.p);
	opts_free(&lo);
	LEAVE(ctx);
	if (notify != NULL && p != NULL)
		notify(p, user_data);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

/* ---- Queries -------------------------------------------------------- */

static size_t binary_size(const struct _cl_program *p)
{
	if (p->built_src == NULL || (p->status != CL_BUILD_SUCCESS && !p->from_binary) ||
	    p->bintype == CL_PROGRAM_BINARY_TYPE_NONE)
		return 0;
	return sizeof(struct binhdr) + strlen(p->built_opts != NULL ? p->built_opts : "") + p->built_len;
}

static void write_binary(const struct _cl_program *p, unsigned char *out)
{
	struct binhdr h;
	memcpy(h.magic, BIN_MAGIC, 8);
	const char *o = p->built_opts != NULL ? p->built_opts : "";
	h.version = BIN_VERSION;
	h.opts_len = (uint32_t)strlen(o);
	h.src_len = p->built_len;
	memcpy(out, &h, sizeof h);
	memcpy(out + sizeof h, o, h.opts_len);
	memcpy(out + sizeof h + h.opts_len, p->built_src, p->built_len);
}

cl_int CL_API_CALL vgpu_clGetProgramInfo(cl_program program, cl_program_info param_name, size_t param_value_size,
					 void *param_value, size_t *param_value_size_ret)
{
	cl_program p = GET(program, VGPU_PROGRAM);
	if (p == NULL)
		return CL_INVALID_PROGRAM;
	cl_context ctx = p->ctx;
	ENTER(ctx);
	cl_int err = CL_SUCCESS;
	union {
		cl_uint u;
		cl_context c;
		cl_device_id d;
		size_t sz;
	} v;
	switch (param_name) {
	case CL_PROGRAM_REFERENCE_COUNT:
		v.u = vgpu_obj_refs(&p->obj);
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_CONTEXT:
		v.c = ctx;
		err = vgpu_info(&v, sizeof v.c, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_NUM_DEVICES:
		v.u = 1;
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_DEVICES:
		v.d = ctx->dev;
		err = vgpu_info(&v, sizeof v.d, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_SOURCE:
		/* A program from a binary returns the source the binary carries. */
		if (p->source != NULL)
			err = vgpu_info(p->source, p->source_len + 1, param_value_size, param_value,
					param_value_size_ret);
		else if (p->built_src != NULL)
			err = vgpu_info(p->built_src, p->built_len + 1, param_value_size, param_value,
					param_value_size_ret);
		else
			err = vgpu_info_str("", param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_BINARY_SIZES:
		v.sz = binary_size(p);
		err = vgpu_info(&v, sizeof v.sz, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_BINARIES: {
		/* An array of one pointer, to memory the application provides. */
		if (param_value != NULL && param_value_size < sizeof(unsigned char *)) {
			err = CL_INVALID_VALUE;
			break;
		}
		if (param_value != NULL) {
			unsigned char *out = *(unsigned char **)param_value;
			if (out != NULL && binary_size(p) > 0)
				write_binary(p, out);
		}
		if (param_value_size_ret != NULL)
			*param_value_size_ret = sizeof(unsigned char *);
		break;
	}
	case CL_PROGRAM_NUM_KERNELS:
	case CL_PROGRAM_KERNEL_NAMES:
		if (p->status != CL_BUILD_SUCCESS || p->bintype != CL_PROGRAM_BINARY_TYPE_EXECUTABLE || p->id == 0) {
			err = CL_INVALID_PROGRAM_EXECUTABLE;
		} else if (param_name == CL_PROGRAM_NUM_KERNELS) {
			v.sz = p->nkernels;
			err = vgpu_info(&v, sizeof v.sz, param_value_size, param_value, param_value_size_ret);
		} else {
			err = vgpu_info_str(p->kernel_names != NULL ? p->kernel_names : "", param_value_size,
					    param_value, param_value_size_ret);
		}
		break;
	default: err = CL_INVALID_VALUE; break;
	}
	PUT(p);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clGetProgramBuildInfo(cl_program program, cl_device_id device,
					      cl_program_build_info param_name, size_t param_value_size,
					      void *param_value, size_t *param_value_size_ret)
{
	cl_program p = GET(program, VGPU_PROGRAM);
	if (p == NULL)
		return CL_INVALID_PROGRAM;
	cl_context ctx = p->ctx;
	ENTER(ctx);
	cl_int err;
	if (!vgpu_device_valid(device) || device != ctx->dev) {
		err = CL_INVALID_DEVICE;
	} else {
		switch (param_name) {
		case CL_PROGRAM_BUILD_STATUS:
			err = vgpu_info(&p->status, sizeof p->status, param_value_size, param_value,
					param_value_size_ret);
			break;
		case CL_PROGRAM_BUILD_OPTIONS:
			err = vgpu_info_str(p->options != NULL ? p->options : "", param_value_size, param_value,
					    param_value_size_ret);
			break;
		case CL_PROGRAM_BUILD_LOG:
			err = vgpu_info_str(p->log != NULL ? p->log : "", param_value_size, param_value,
					    param_value_size_ret);
			break;
		case CL_PROGRAM_BINARY_TYPE: {
			cl_program_binary_type t = p->status == CL_BUILD_SUCCESS || p->from_binary
							   ? p->bintype
							   : CL_PROGRAM_BINARY_TYPE_NONE;
			err = vgpu_info(&t, sizeof t, param_value_size, param_value, param_value_size_ret);
			break;
		}
		default: err = CL_INVALID_VALUE; break;
		}
	}
	PUT(p);
	LEAVE(ctx);
	return err;
}
