/* Protobuf text format -> binary TraceConfig.
 *
 * Grammar accepted (the subset of protobuf's text format that configs use):
 *   message := { field [',' | ';'] }
 *   field   := NAME ':' scalar | NAME ':' '[' scalar { ',' scalar } ']'
 *            | NAME [':'] ( '{' message '}' | '<' message '>' )
 *            | NAME [':'] '[' msgval { ',' msgval } ']'
 *   scalar  := ['-'] NUMBER | IDENT (enum names, true/false, inf, nan) | STRING { STRING }
 * with '#' comments. Unknown field names and extensions ('[...]') are errors: a text
 * config cannot carry a field whose number is unknown, and silently dropping it would
 * change what gets traced.
 *
 * The output is built in one pass; nested messages get 4-byte length prefixes (sonde__pb_begin),
 * which every protobuf decoder accepts.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/client.h>
#include <sonde/error.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/pb.h"
#include "client/cfg_schema.h"

enum tok_kind { TK_EOF, TK_IDENT, TK_NUMBER, TK_STRING, TK_PUNCT };

enum { MAX_DEPTH = 16 };

struct tok {
	enum tok_kind kind;
	const char *p; /* source text (IDENT, NUMBER, PUNCT) */
	size_t len;
	int line, col;
};

struct parser {
	const char *src, *end;
	const char *p;
	int line;
	const char *line_start;
	struct tok cur; /* the peeked token */
	bool have;
	struct buf out;
	struct buf str; /* decoded string literal(s) */
	struct sonde_txt_error *err;
	int depth;
};

static int fail_at(struct parser *ps, int line, int col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail_at(struct parser *ps, int line, int col, const char *fmt, ...)
{
	if (ps->err) {
		va_list ap;
		ps->err->line = line;
		ps->err->column = col;
		va_start(ap, fmt);
		vsnprintf(ps->err->msg, sizeof(ps->err->msg), fmt, ap);
		va_end(ap);
	}
	return -SONDE_E_FORMAT;
}

#define FAIL_TOK(ps, t, ...) fail_at(ps, (t)->line, (t)->col, __VA_ARGS__)

static bool is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident_char(char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9');
}

static void skip_space(struct parser *ps)
{
	while (ps->p < ps->end) {
		char c = *ps->p;
		if (c == '\n') {
			ps->line++;
			ps->line_start = ++ps->p;
		} else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
			ps->p++;
		} else if (c == '#') {
			while (ps->p < ps->end && *ps->p != '\n')
				ps->p++;
		} else {
			break;
		}
	}
}

static int lex(struct parser *ps, struct tok *t)
{
	skip_space(ps);
	t->p = ps->p;
	t->line = ps->line;
	t->col = (int)(ps->p - ps->line_start) + 1;
	t->len = 0;
	if (ps->p >= ps->end) {
		t->kind = TK_EOF;
		return 0;
	}
	char c = *ps->p;
	if (is_ident_start(c)) {
		while (ps->p < ps->end && is_ident_char(*ps->p))
			ps->p++;
		t->kind = TK_IDENT;
	} else if ((c >= '0' && c <= '9') || c == '.') {
		bool hex = c == '0' && ps->p + 1 < ps->end && (ps->p[1] == 'x' || ps->p[1] == 'X');
		for (; ps->p < ps->end; ps->p++) {
			char d = *ps->p;
			/* a sign belongs to the number only right after a decimal exponent */
			bool exp_sign = !hex && (d == '+' || d == '-') &&
					(ps->p[-1] == 'e' || ps->p[-1] == 'E');
			if (!is_ident_char(d) && d != '.' && !exp_sign)
				break;
		}
		t->kind = TK_NUMBER;
	} else if (c == '"' || c == '\'') {
		t->kind = TK_STRING; /* decoded by lex_string() */
		return 0;
	} else if (strchr("{}<>[]:,;-", c)) {
		ps->p++;
		t->kind = TK_PUNCT;
	} else {
		return FAIL_TOK(ps, t, "unexpected character '%c'", c);
	}
	t->len = (size_t)(ps->p - t->p);
	return 0;
}

static int peek(struct parser *ps, struct tok **t)
{
	if (!ps->have) {
		int r = lex(ps, &ps->cur);
		if (r < 0)
			return r;
		ps->have = true;
	}
	*t = &ps->cur;
	return 0;
}

static void consume(struct parser *ps)
{
	ps->have = false;
}

static bool is_punct(const struct tok *t, char c)
{
	return t->kind == TK_PUNCT && t->p[0] == c;
}

static bool tok_is(const struct tok *t, const char *s)
{
	return t->kind == TK_IDENT && strlen(s) == t->len && memcmp(t->p, s, t->len) == 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void put_utf8(struct buf *b, uint32_t cp)
{
	uint8_t u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (uint8_t)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (uint8_t)(0xc0 | (cp >> 6));
		u[1] = (uint8_t)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (uint8_t)(0xe0 | (cp >> 12));
		u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (uint8_t)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (uint8_t)(0xf0 | (cp >> 18));
		u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (uint8_t)(0x80 | (cp & 0x3f));
		n = 4;
	}
	sonde__buf_append(b, u, n);
}

/* One escape sequence after the backslash at ps->p[-1]. */
static int lex_escape(struct parser *ps, const struct tok *t)
{
	static const char simple_in[] = "ntrabfv\\'\"?";
	static const char simple_out[] = "\n\t\r\a\b\f\v\\'\"?";
	char c = *ps->p++;
	const char *s = strchr(simple_in, c);

	if (s && c) {
		buf_put_u8(&ps->str, (uint8_t)simple_out[s - simple_in]);
		return 0;
	}
	if (c >= '0' && c <= '7') {
		unsigned v = (unsigned)(c - '0');
		for (int i = 0; i < 2 && ps->p < ps->end && *ps->p >= '0' && *ps->p <= '7'; i++)
			v = v * 8 + (unsigned)(*ps->p++ - '0');
		if (v > 0xff)
			return FAIL_TOK(ps, t, "octal escape out of range in string");
		buf_put_u8(&ps->str, (uint8_t)v);
		return 0;
	}
	if (c == 'x' || c == 'X' || c == 'u' || c == 'U') {
		int max = c == 'u' ? 4 : c == 'U' ? 8 : 2, n = 0;
		uint32_t v = 0;
		for (; n < max && ps->p < ps->end && hexval(*ps->p) >= 0; n++)
			v = v * 16 + (uint32_t)hexval(*ps->p++);
		if (n == 0 || ((c == 'u' || c == 'U') && (n != max || v > 0x10ffff)))
			return FAIL_TOK(ps, t, "invalid \\%c escape in string", c);
		if (c == 'x' || c == 'X')
			buf_put_u8(&ps->str, (uint8_t)v);
		else
			put_utf8(&ps->str, v);
		return 0;
	}
	return FAIL_TOK(ps, t, "invalid escape '\\%c' in string", c ? c : '0');
}

/* Decodes the string literal starting at t (ps->p points at the quote), appending to
 * ps->str. */
static int lex_string(struct parser *ps, const struct tok *t)
{
	char q = *ps->p++;

	while (ps->p < ps->end && *ps->p != q) {
		char c = *ps->p++;
		if (c == '\n')
			return FAIL_TOK(ps, t, "string literal not terminated before end of line");
		if (c != '\\') {
			buf_put_u8(&ps->str, (uint8_t)c);
			continue;
		}
		if (ps->p >= ps->end)
			break;
		int r = lex_escape(ps, t);
		if (r < 0)
			return r;
	}
	if (ps->p >= ps->end)
		return FAIL_TOK(ps, t, "string literal not terminated");
	ps->p++;
	return 0;
}

/* One or more adjacent string literals into ps->str. */
static int parse_strings(struct parser *ps)
{
	struct tok *t;
	int r, n = 0;

	sonde__buf_reset(&ps->str);
	for (;;) {
		if ((r = peek(ps, &t)) < 0)
			return r;
		if (t->kind != TK_STRING)
			break;
		struct tok copy = *t;
		consume(ps);
		if ((r = lex_string(ps, &copy)) < 0)
			return r;
		n++;
	}
	if (!n)
		return FAIL_TOK(ps, t, "expected a string");
	return buf_error(&ps->str);
}

static const char *type_name(const struct cfg_field *f)
{
	static const char *const names[] = {
		[CT_BOOL] = "bool",	 [CT_U32] = "uint32",	  [CT_U64] = "uint64",
		[CT_I32] = "int32",	 [CT_I64] = "int64",	  [CT_S32] = "sint32",
		[CT_S64] = "sint64",	 [CT_FX32] = "fixed32",	  [CT_FX64] = "fixed64",
		[CT_SFX32] = "sfixed32", [CT_SFX64] = "sfixed64", [CT_FLOAT] = "float",
		[CT_DOUBLE] = "double",	 [CT_STRING] = "string",  [CT_BYTES] = "bytes",
		[CT_ENUM] = "enum",	 [CT_MSG] = "message",
	};
	return names[f->type];
}

/* An integer token (optionally preceded by '-') as a sign and magnitude. */
static int parse_int(struct parser *ps, const struct cfg_field *f, bool *neg, uint64_t *mag)
{
	struct tok *t;
	int r;

	*neg = false;
	if ((r = peek(ps, &t)) < 0)
		return r;
	if (is_punct(t, '-')) {
		*neg = true;
		consume(ps);
		if ((r = peek(ps, &t)) < 0)
			return r;
	}
	if (t->kind != TK_NUMBER)
		return FAIL_TOK(ps, t, "expected an integer for field '%s' (%s)", f->name,
				type_name(f));
	char tmp[64];
	if (t->len >= sizeof(tmp))
		return FAIL_TOK(ps, t, "number too long");
	memcpy(tmp, t->p, t->len);
	tmp[t->len] = 0;
	char *endp;
	errno = 0;
	*mag = strtoull(tmp, &endp, 0);
	if (*endp || tmp[0] == '-' || tmp[0] == '+')
		return FAIL_TOK(ps, t, "'%s' is not an integer (field '%s' is %s)", tmp, f->name,
				type_name(f));
	if (errno == ERANGE)
		return FAIL_TOK(ps, t, "integer '%s' out of range for field '%s'", tmp, f->name);
	consume(ps);
	return 0;
}

static int int_in_range(struct parser *ps, const struct tok *at, const struct cfg_field *f,
			bool neg, uint64_t mag, uint64_t *out)
{
	bool is64 = f->type == CT_U64 || f->type == CT_I64 || f->type == CT_S64 ||
		    f->type == CT_FX64 || f->type == CT_SFX64;
	bool sign = !(f->type == CT_U32 || f->type == CT_U64 || f->type == CT_FX32 ||
		      f->type == CT_FX64);
	uint64_t pos_max = sign ? (is64 ? INT64_MAX : INT32_MAX) : (is64 ? UINT64_MAX : UINT32_MAX);
	uint64_t neg_max = sign ? (is64 ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT32_MAX + 1) : 0;

	if ((!neg && mag > pos_max) || (neg && mag > neg_max))
		return FAIL_TOK(ps, at, "value %s%llu out of range for field '%s' (%s)",
				neg ? "-" : "", (unsigned long long)mag, f->name, type_name(f));
	*out = neg ? (uint64_t)0 - mag : mag;
	return 0;
}

static int parse_float(struct parser *ps, const struct cfg_field *f, double *out)
{
	struct tok *t;
	bool neg = false;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	if (is_punct(t, '-')) {
		neg = true;
		consume(ps);
		if ((r = peek(ps, &t)) < 0)
			return r;
	}
	if (tok_is(t, "inf") || tok_is(t, "infinity") || tok_is(t, "Infinity")) {
		*out = INFINITY;
	} else if (tok_is(t, "nan") || tok_is(t, "NaN")) {
		*out = NAN;
	} else if (t->kind == TK_NUMBER && t->len < 64) {
		char tmp[64], *endp;
		memcpy(tmp, t->p, t->len);
		tmp[t->len] = 0;
		size_t n = t->len;
		if (n > 1 && (tmp[n - 1] == 'f' || tmp[n - 1] == 'F') &&
		    !(tmp[0] == '0' && (tmp[1] == 'x' || tmp[1] == 'X')))
			tmp[n - 1] = 0;
		*out = strtod(tmp, &endp);
		if (*endp)
			return FAIL_TOK(ps, t, "'%.*s' is not a number (field '%s')", (int)t->len,
					t->p, f->name);
	} else {
		return FAIL_TOK(ps, t, "expected a number for field '%s' (%s)", f->name,
				type_name(f));
	}
	consume(ps);
	if (neg)
		*out = -*out;
	return 0;
}

static int parse_bool(struct parser *ps, const struct cfg_field *f, bool *out)
{
	struct tok *t;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	if (tok_is(t, "true") || tok_is(t, "True") || tok_is(t, "t") ||
	    (t->kind == TK_NUMBER && t->len == 1 && t->p[0] == '1'))
		*out = true;
	else if (tok_is(t, "false") || tok_is(t, "False") || tok_is(t, "f") ||
		 (t->kind == TK_NUMBER && t->len == 1 && t->p[0] == '0'))
		*out = false;
	else
		return FAIL_TOK(ps, t, "expected true or false for field '%s'", f->name);
	consume(ps);
	return 0;
}

static int parse_enum(struct parser *ps, const struct cfg_field *f, uint64_t *out)
{
	struct tok *t;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	if (t->kind == TK_IDENT) {
		const struct cfg_enum_val *v = f->enm ? f->enm->vals : NULL;
		for (; v && v->name; v++)
			if (tok_is(t, v->name))
				break;
		if (!v || !v->name)
			return FAIL_TOK(ps, t, "unknown value '%.*s' for enum field '%s'%s%s",
					(int)t->len, t->p, f->name, f->enm ? " of type " : "",
					f->enm ? f->enm->name : " (write it as a number)");
		consume(ps);
		*out = (uint64_t)(int64_t)v->value;
		return 0;
	}
	struct tok at = *t;
	bool neg;
	uint64_t mag;
	if ((r = parse_int(ps, f, &neg, &mag)) < 0)
		return r;
	if ((!neg && mag > INT32_MAX) || (neg && mag > (uint64_t)INT32_MAX + 1))
		return FAIL_TOK(ps, &at, "enum value out of range for field '%s'", f->name);
	*out = neg ? (uint64_t)0 - mag : mag; /* negative enums: 10-byte varint */
	return 0;
}

static int parse_scalar(struct parser *ps, const struct cfg_field *f)
{
	struct tok *t;
	uint64_t u = 0;
	bool neg = false, b = false;
	double d = 0;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	struct tok at = *t;
	switch (f->type) {
	case CT_BOOL:
		if ((r = parse_bool(ps, f, &b)) < 0)
			return r;
		sonde__pb_put_bool(&ps->out, f->num, b);
		return 0;
	case CT_FLOAT:
	case CT_DOUBLE:
		if ((r = parse_float(ps, f, &d)) < 0)
			return r;
		if (f->type == CT_DOUBLE) {
			sonde__pb_put_double(&ps->out, f->num, d);
		} else {
			float fl = (float)d;
			uint32_t bits;
			memcpy(&bits, &fl, 4);
			sonde__pb_put_fixed32(&ps->out, f->num, bits);
		}
		return 0;
	case CT_STRING:
	case CT_BYTES:
		if ((r = parse_strings(ps)) < 0)
			return r;
		sonde__pb_put_bytes(&ps->out, f->num, ps->str.data, ps->str.len);
		return 0;
	case CT_ENUM:
		if ((r = parse_enum(ps, f, &u)) < 0)
			return r;
		sonde__pb_put_varint(&ps->out, f->num, u);
		return 0;
	default:
		break;
	}
	if ((r = parse_int(ps, f, &neg, &u)) < 0 || (r = int_in_range(ps, &at, f, neg, u, &u)) < 0)
		return r;
	switch (f->type) {
	case CT_S32:
	case CT_S64:
		sonde__pb_put_sint(&ps->out, f->num, (int64_t)u);
		break;
	case CT_FX32:
	case CT_SFX32:
		sonde__pb_put_fixed32(&ps->out, f->num, (uint32_t)u);
		break;
	case CT_FX64:
	case CT_SFX64:
		sonde__pb_put_fixed64(&ps->out, f->num, u);
		break;
	case CT_I32: /* negative int32 is sign-extended to 10 bytes, as protobuf does */
	default:
		sonde__pb_put_varint(&ps->out, f->num, u);
		break;
	}
	return 0;
}

static int parse_message(struct parser *ps, const struct cfg_msg *m, char close,
			 const struct tok *open);

/* '{' or '<' then the body; the field tag has not been written yet. */
static int parse_msg_value(struct parser *ps, const struct cfg_field *f)
{
	struct tok *t;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	if (!is_punct(t, '{') && !is_punct(t, '<'))
		return FAIL_TOK(ps, t, "expected '{' to open message field '%s' (%s)", f->name,
				f->msg->name);
	struct tok open = *t;
	consume(ps);
	if (++ps->depth > MAX_DEPTH)
		return FAIL_TOK(ps, &open, "messages nested too deeply");
	size_t mark = sonde__pb_begin(&ps->out, f->num);
	r = parse_message(ps, f->msg, open.p[0] == '{' ? '}' : '>', &open);
	sonde__pb_end(&ps->out, mark);
	ps->depth--;
	return r;
}

static int parse_list(struct parser *ps, const struct cfg_field *f, const struct tok *name)
{
	struct tok *t;
	int r;

	if (!f->repeated)
		return FAIL_TOK(ps, name, "field '%s' is not repeated and cannot take a list",
				f->name);
	consume(ps); /* '[' */
	if ((r = peek(ps, &t)) < 0)
		return r;
	if (is_punct(t, ']')) {
		consume(ps);
		return 0;
	}
	for (;;) {
		r = f->type == CT_MSG ? parse_msg_value(ps, f) : parse_scalar(ps, f);
		if (r < 0)
			return r;
		if ((r = peek(ps, &t)) < 0)
			return r;
		if (is_punct(t, ']')) {
			consume(ps);
			return 0;
		}
		if (!is_punct(t, ','))
			return FAIL_TOK(ps, t, "expected ',' or ']' in the list of field '%s'",
					f->name);
		consume(ps);
	}
}

static int parse_field(struct parser *ps, const struct cfg_msg *m, uint64_t *seen)
{
	struct tok *t;
	int r;

	if ((r = peek(ps, &t)) < 0)
		return r;
	struct tok name = *t;
	if (is_punct(t, '['))
		return FAIL_TOK(ps, t, "extensions and Any are not supported in text configs");
	if (t->kind != TK_IDENT)
		return FAIL_TOK(ps, t, "expected a field name in %s", m->name);
	const struct cfg_field *f = sonde__cfg_find_field(m, t->p, t->len);
	if (!f)
		return FAIL_TOK(ps, t,
				"unknown field '%.*s' in %s (sonde's text parser does not know it;"
				" a binary config passes any field through)",
				(int)t->len, t->p, m->name);
	consume(ps);
	unsigned idx = (unsigned)(f - m->fields);
	if (!f->repeated && (*seen & (1ull << idx)))
		return FAIL_TOK(ps, &name, "non-repeated field '%s' is specified more than once",
				f->name);
	/* a oneof holds one member: a decoder would keep the last one and drop the other */
	for (const struct cfg_field *o = m->fields; f->oneof && o->name; o++)
		if (o != f && o->oneof == f->oneof && (*seen & (1ull << (o - m->fields))))
			return FAIL_TOK(ps, &name,
					"field '%s' and field '%s' are members of the same oneof:"
					" only one may be set",
					o->name, f->name);
	*seen |= 1ull << idx;
	bool colon = false;
	if ((r = peek(ps, &t)) < 0)
		return r;
	if (is_punct(t, ':')) {
		colon = true;
		consume(ps);
		if ((r = peek(ps, &t)) < 0)
			return r;
	}
	if (is_punct(t, '['))
		r = parse_list(ps, f, &name);
	else if (f->type == CT_MSG)
		r = parse_msg_value(ps, f);
	else if (!colon)
		r = FAIL_TOK(ps, t, "expected ':' after field name '%s'", f->name);
	else
		r = parse_scalar(ps, f);
	if (r < 0)
		return r;
	if ((r = peek(ps, &t)) < 0)
		return r;
	if (is_punct(t, ',') || is_punct(t, ';'))
		consume(ps);
	return 0;
}

static int parse_message(struct parser *ps, const struct cfg_msg *m, char close,
			 const struct tok *open)
{
	uint64_t seen = 0;
	struct tok *t;
	int r;

	for (;;) {
		if ((r = peek(ps, &t)) < 0)
			return r;
		if (t->kind == TK_EOF) {
			if (!close)
				return 0;
			return FAIL_TOK(ps, t, "missing '%c' to close the '%c' at %d:%d", close,
					open->p[0], open->line, open->col);
		}
		if (close && is_punct(t, close)) {
			consume(ps);
			return 0;
		}
		if ((r = parse_field(ps, m, &seen)) < 0)
			return r;
	}
}

int sonde_trace_config__from_text(const char *text, size_t len, uint8_t **out, size_t *out_len,
				 struct sonde_txt_error *err)
{
	struct parser ps = {.src = text,
			    .end = text + len,
			    .p = text,
			    .line = 1,
			    .line_start = text,
			    .err = err};
	int r;

	*out = NULL;
	*out_len = 0;
	if (err)
		memset(err, 0, sizeof(*err));
	r = parse_message(&ps, &sonde__cfg_trace_config, 0, NULL);
	if (r == 0 && (r = buf_error(&ps.out)) < 0)
		fail_at(&ps, 0, 0, "out of memory");
	sonde__buf_free(&ps.str);
	if (r < 0) {
		sonde__buf_free(&ps.out);
		return r;
	}
	if (!ps.out.data) /* an empty config is valid: return a 1-byte allocation */
		ps.out.data = sonde__malloc(1);
	if (!ps.out.data)
		return -ENOMEM;
	*out = ps.out.data;
	*out_len = ps.out.len;
	return 0;
}
