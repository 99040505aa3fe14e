/* Differential folded stacks and their flame graph (flamediff.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/flame.h"
#include "base/out.h"
#include "flamediff.h"

/* The geometry is the library's (`sonde convert -o x.svg`, flame.h), which the script
 * expects. */
enum { MAX_DEPTH = 1024 };

struct line {
	const char *text;
	size_t len;
	uint64_t count;
	int side; /* 0: first profile, 1: second */
};

static int by_text(const void *x, const void *y)
{
	const struct line *a = x, *b = y;
	size_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->text, b->text, n);

	if (c)
		return c;
	return a->len < b->len ? -1 : a->len > b->len;
}

/* Appends the lines of text to *v; -EINVAL for one without a count. */
static int parse(const char *text, int side, struct line **v, size_t *n, size_t *cap,
		 uint64_t *total)
{
	for (const char *p = text; *p;) {
		const char *eol = strchr(p, '\n'), *end = eol ? eol : p + strlen(p);
		const char *sp = end;
		while (sp > p && sp[-1] != ' ')
			sp--;
		if (end > p) {
			char *num_end;
			uint64_t c = strtoull(sp, &num_end, 10);
			if (sp == p || num_end != end)
				return -EINVAL;
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 1024;
				struct line *nv = realloc(*v, nc * sizeof(*nv));
				if (!nv)
					return -ENOMEM;
				*v = nv;
				*cap = nc;
			}
			(*v)[(*n)++] = (struct line){p, (size_t)(sp - 1 - p), c, side};
			*total += c;
		}
		p = eol ? eol + 1 : end;
	}
	return 0;
}

int flame_diff_build(struct flame_diff *d, const char *folded_a, const char *folded_b)
{
	struct line *v = NULL;
	size_t n = 0, cap = 0;
	int err;

	memset(d, 0, sizeof(*d));
	if ((err = parse(folded_a, 0, &v, &n, &cap, &d->total_a)) < 0 ||
	    (err = parse(folded_b, 1, &v, &n, &cap, &d->total_b)) < 0)
		goto out;
	if (n)
		qsort(v, n, sizeof(*v), by_text);
	d->v = calloc(n + 1, sizeof(*d->v));
	if (!d->v) {
		err = -ENOMEM;
		goto out;
	}
	/* the first profile scaled to the second's size (difffolded.pl -n) */
	double scale = d->total_a ? (double)d->total_b / (double)d->total_a : 1;
	for (size_t i = 0; i < n; i++) {
		struct diff_stack *s = d->n ? &d->v[d->n - 1] : NULL;
		if (!s || strlen(s->text) != v[i].len || memcmp(s->text, v[i].text, v[i].len)) {
			s = &d->v[d->n];
			if (!(s->text = strndup(v[i].text, v[i].len))) {
				err = -ENOMEM;
				goto out;
			}
			d->n++;
		}
		if (v[i].side)
			s->b += (double)v[i].count;
		else
			s->a += (double)v[i].count * scale;
	}
out:
	free(v);
	if (err)
		flame_diff_free(d);
	return err;
}

void flame_diff_free(struct flame_diff *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i].text);
	free(d->v);
	memset(d, 0, sizeof(*d));
}

/* flamegraph.pl's differential palette: red for more, blue for fewer samples. */
static void color(double delta, double max, char out[32])
{
	int r = 255, g = 255, b = 255;

	if (max > 0 && delta > 0)
		g = b = (int)(210 * (max - delta) / max);
	else if (max > 0 && delta < 0)
		r = g = (int)(210 * (max + delta) / max);
	snprintf(out, 32, "rgb(%d,%d,%d)", r, g, b);
}

struct open_frame {
	const char *name; /* inside the stack text */
	size_t len;
	double x; /* samples to its left */
	double delta;
};

struct draw {
	struct out o;
	struct flame_svg s;
	double max_delta;
};

static void frame(struct draw *dr, const char *name, size_t len, double x, double w, double delta,
		  unsigned depth)
{
	char label[1024], fill[32], tip[96];

	snprintf(label, sizeof(label), "%.*s", (int)len, name);
	color(delta, dr->max_delta, fill);
	int n = depth ? snprintf(tip, sizeof(tip), " [self %+.2f%%]", 100.0 * delta / dr->s.total)
		      : 0;
	snprintf(tip + n, sizeof(tip) - (size_t)n, " (%.0f sample%s, %.2f%%)", w, w == 1 ? "" : "s",
		 100.0 * w / dr->s.total);
	sonde__flame_svg_frame(&dr->s, label, tip, x, w, depth, fill);
}

/* The frames of stack text, split at ';', into f[0, MAX_DEPTH); returns how many. */
static size_t split(const char *text, struct open_frame *f)
{
	size_t n = 0;

	for (const char *p = text; n < MAX_DEPTH;) {
		const char *semi = strchr(p, ';');
		size_t len = semi ? (size_t)(semi - p) : strlen(p);
		f[n++] = (struct open_frame){.name = p, .len = len};
		if (!semi)
			break;
		p = semi + 1;
	}
	return n;
}

/* flamegraph.pl's flow(): the stacks are sorted, so a frame is the run of consecutive
 * stacks that share it with its callers; each closes when a stack leaves it. */
int flame_diff_write_svg(const struct flame_diff *d, int fd, const char *title)
{
	static struct open_frame open[MAX_DEPTH + 1], next[MAX_DEPTH];
	struct draw dr = {.s = {.o = &dr.o}};
	size_t depth = 0, n_open = 0;
	double x = 0;

	for (size_t i = 0; i < d->n; i++) {
		size_t k = split(d->v[i].text, next);
		depth = k > depth ? k : depth;
		dr.s.total += d->v[i].b;
		if (fabs(d->v[i].b - d->v[i].a) > dr.max_delta)
			dr.max_delta = fabs(d->v[i].b - d->v[i].a);
	}
	dr.s.height = sonde__flame_svg_height((uint32_t)depth);
	sonde__out_init(&dr.o, fd);
	char sub[256];
	snprintf(sub, sizeof(sub),
		 "widths: the second profile (%" PRIu64 " samples); colors: self samples against "
		 "the first (%" PRIu64 ", scaled), red grew, blue shrank",
		 d->total_b, d->total_a);
	sonde__flame_svg_begin(&dr.s, title, sub);
	for (size_t i = 0; i < d->n && dr.s.total > 0; i++) {
		const struct diff_stack *s = &d->v[i];
		if (s->b <= 0)
			continue; /* not in the second profile: no width to draw */
		size_t k = split(s->text, next), same = 0;
		while (same < k && same < n_open && open[same].len == next[same].len &&
		       !memcmp(open[same].name, next[same].name, next[same].len))
			same++;
		while (n_open > same) { /* close what this stack left */
			struct open_frame *f = &open[--n_open];
			frame(&dr, f->name, f->len, f->x, x - f->x, f->delta, (unsigned)n_open + 1);
		}
		for (; n_open < k; n_open++)
			open[n_open] =
				(struct open_frame){next[n_open].name, next[n_open].len, x, 0};
		open[k - 1].delta += s->b - s->a;
		x += s->b;
	}
	while (n_open > 0) {
		struct open_frame *f = &open[--n_open];
		frame(&dr, f->name, f->len, f->x, x - f->x, f->delta, (unsigned)n_open + 1);
	}
	if (dr.s.total > 0)
		frame(&dr, "all", 3, 0, dr.s.total, 0, 0);
	sonde__flame_svg_end(&dr.s);
	return sonde__out_close(&dr.o);
}
