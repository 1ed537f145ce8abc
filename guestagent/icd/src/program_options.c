/* program_options.c: a program's build options and includes.
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
 * a backslash escapes the next character outside single quotes. */
#define _GNU_SOURCE
#include "program_options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_INCLUDE_DEPTH 64

/* ---- A growing string ----------------------------------------------- */

void sb_add(struct sbuf *b, const char *s, size_t n)
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

void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---- Options -------------------------------------------------------- */

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

void opts_free(struct opts *o)
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
char *next_word(const char **sp, int *quoted)
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
int parse_opts(const char *s, struct opts *o, int link)
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
				/* #line only renumbers here. A device of ABI 1.7 takes
				 * its number (never a file name: __FILE__ stays the
				 * device's); an older one refuses #line, so it goes. */
				const char *r = rest;
				while (r < le && (*r == ' ' || *r == '	'))
					r++;
				const char *d = r;
				while (d < le && *d >= '0' && *d <= '9')
					d++;
				if (x->line_ok && d > r && d - r <= 9 && (d == le || *d == ' ' || *d == '	')) {
					sb_str(&x->out, "#line ");
					sb_add(&x->out, r, (size_t)(d - r));
				}
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

void expand_free(struct expand *x)
{
	for (size_t i = 0; i < x->nonce; i++)
		free(x->once[i]);
	free(x->once);
}

void expand_source(struct expand *x, const char *src, size_t len)
{
	expand(x, src, len, "", 0);
}
