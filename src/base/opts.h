/* Extensible options structs, checked the way libbpf checks its own (OPTS_VALID and
 * OPTS_GET in libbpf_internal.h).
 *
 * Every public opts or callbacks struct starts with `size_t sz`, which the caller sets to
 * sizeof the struct as its header declared it. The structs grow only at the end, so:
 *   - NULL opts means every default;
 *   - sz smaller than the sz field itself (0 above all: a caller that forgot to set it) is
 *     an error, never "the defaults" or "the whole struct";
 *   - a struct smaller than this library's (a caller built against an older header) has
 *     its missing fields read as zero, which selects their defaults;
 *   - a struct larger than this library's (a newer header) is accepted only if every byte
 *     this library does not know is zero: a field set there asks for something this
 *     library cannot do, and ignoring it silently would do something else.
 * A function taking opts returns -EINVAL (a constructor NULL with errno EINVAL) when
 * OPTS_VALID fails.
 *
 * Static inline, so the checks add no symbol to the library.
 */
#ifndef SONDE_BASE_OPTS_H
#define SONDE_BASE_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <sonde/log.h>

/* The caller's size of opts (its first field), 0 for NULL. */
static inline size_t opts_sz(const void *opts)
{
	size_t sz = 0;

	if (opts)
		memcpy(&sz, opts, sizeof(sz));
	return sz;
}

/* OPTS_VALID's body: opts of which this library knows the first known bytes. Logs why it
 * refuses. */
static inline bool opts_valid(const void *opts, size_t known, const char *type)
{
	const unsigned char *p = opts;
	size_t sz = opts_sz(opts);

	if (!opts)
		return true;
	if (sz < sizeof(size_t)) {
		sonde_error("struct %s: sz is %zu; set it to sizeof(struct %s)", type, sz, type);
		return false;
	}
	for (size_t i = known; i < sz; i++) {
		if (p[i]) {
			sonde_error("struct %s: byte %zu of %zu is set, but this library knows only "
				    "the first %zu",
				    type, i, sz, known);
			return false;
		}
	}
	return true;
}

/* True when opts (a pointer to struct type, whose first field is sz, or NULL) may be used.
 * The helpers take opts as a pointer, not (opts)->sz, so that NULL is never dereferenced
 * and a literal &o does not make the compiler warn that the NULL test is always true. */
#define OPTS_VALID(opts, type)                                                                     \
	(opts_valid((opts), sizeof(struct type), #type))

/* True when opts is not NULL and its caller's struct has field. */
#define OPTS_HAS(opts, field)                                                                      \
	(opts_sz(opts) >= offsetof(__typeof__(*(opts)), field) + sizeof((opts)->field))

/* opts->field, or fallback when opts is NULL or its caller's struct ends before field. */
#define OPTS_GET(opts, field, fallback) (OPTS_HAS(opts, field) ? (opts)->field : (fallback))

/* Copies the part of valid opts (or nothing, for NULL) this library knows into *dst, which
 * holds the defaults (zero) beforehand; dst->sz becomes the library's size. */
#define OPTS_COPY(dst, opts) opts_copy((dst), sizeof(*(dst)), (opts))

/* The same rule for an output struct the caller hands in for the library to fill (its sz
 * says how much of it there is): NULL is allowed where documented, sz below the size of sz
 * is an error. The library then writes min(sz, its own size) bytes. */
static inline bool opts_out_valid(const void *out)
{
	return !out || opts_sz(out) >= sizeof(size_t);
}

#define OPTS_OUT_VALID(out) opts_out_valid(out)

static inline void opts_copy(void *dst, size_t dst_sz, const void *opts)
{
	size_t sz = opts_sz(opts);

	if (opts)
		memcpy(dst, opts, sz < dst_sz ? sz : dst_sz);
	memcpy(dst, &dst_sz, sizeof(dst_sz));
}

#endif
