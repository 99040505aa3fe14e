/* Fuzz target: the perf map reader (symbol/perfmap.h), the parser and the loop that reads
 * a file piece by piece. The first two bytes choose the piece size (8..263 bytes, so that
 * lines too long to keep occur) and the largest read the source returns (short reads); the
 * rest is the file. What the piece-wise reader indexes must be what one parse of the same
 * text, without the lines too long to keep, indexes; segments must be sorted and disjoint.
 * Aborts on a mismatch. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "symbol/perfmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct src {
	const char *p;
	size_t len, max_read;
};

static ssize_t fill(void *ctx, char *buf, size_t len, uint64_t off)
{
	const struct src *s = ctx;

	if (off >= s->len)
		return 0;
	if (len > s->len - off)
		len = (size_t)(s->len - off);
	if (len > s->max_read)
		len = s->max_read;
	memcpy(buf, s->p + off, len);
	return (ssize_t)len;
}

/* The text without the lines the reader skips: terminated lines of piece bytes or more,
 * an unterminated last line of more than piece bytes. */
static size_t keep_short_lines(const char *in, size_t len, size_t piece, char *out)
{
	size_t n = 0;

	for (size_t pos = 0; pos < len;) {
		const char *nl = memchr(in + pos, '\n', len - pos);
		size_t line = nl ? (size_t)(nl - (in + pos)) : len - pos;
		if (nl ? line < piece : line <= piece) {
			memcpy(out + n, in + pos, line + (nl != NULL));
			n += line + (nl != NULL);
		}
		pos += line + (nl != NULL);
	}
	return n;
}

static void check_segments(const struct perfmap *pm)
{
	for (size_t i = 0; i < pm->n_segs; i++) {
		const struct perfmap_entry *e = &pm->segs[i];
		if (e->start >= e->end || (i && pm->segs[i - 1].end > e->start))
			abort();
		if (sonde__perfmap_find(pm, e->start) != e || sonde__perfmap_find(pm, e->end - 1) != e)
			abort();
	}
}

static void check_same(const struct perfmap *a, const struct perfmap *b)
{
	if (a->n_segs != b->n_segs)
		abort();
	for (size_t i = 0; i < a->n_segs; i++)
		if (a->segs[i].start != b->segs[i].start || a->segs[i].end != b->segs[i].end ||
		    strcmp(a->segs[i].name, b->segs[i].name))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct perfmap got = {0}, whole = {0};
	char *kept;

	if (size < 2)
		return 0;
	struct src s = {(const char *)data + 2, size - 2, 1 + data[1]};
	size_t piece = 8 + data[0];
	const char *last_nl = s.len ? memrchr(s.p, '\n', s.len) : NULL;
	if (!(kept = malloc(s.len + 1)))
		return 0;
	size_t n = keep_short_lines(s.p, s.len, piece, kept);
	if (sonde__perfmap_read(&got, fill, &s, s.len, piece) == 0 &&
	    sonde__perfmap_parse(&whole, kept, n, 1) >= 0 && sonde__perfmap_index(&whole) == 0) {
		check_segments(&got);
		check_same(&got, &whole);
		/* every complete line is consumed, skipped ones included */
		if (got.parsed != (last_nl ? (uint64_t)(last_nl + 1 - s.p) : 0))
			abort();
	}
	free(kept);
	sonde__perfmap_free(&whole);
	sonde__perfmap_free(&got);
	return 0;
}
