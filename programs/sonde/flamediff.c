/* Differential folded stacks and their flame graph (flamediff.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/out.h"
#include "export/svg_script.h"
#include "flamediff.h"

/* The geometry of `sonde convert -o x.svg` (src/export/svg.c), which the script expects. */
enum {
	SVG_WIDTH = 1200,
	SVG_XPAD = 10,
	SVG_FRAME_H = 16,
	SVG_TOP = 48,
	SVG_BOTTOM = 34,
	SVG_FONT = 12,
	MAX_DEPTH = 1024,
};
#define SVG_MIN_WIDTH 0.1
#define SVG_FONT_W    (SVG_FONT * 0.59)

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
	double total, max_delta;
	unsigned height;
};

static void frame(struct draw *dr, const char *name, size_t len, double x, double w, double delta,
		  unsigned depth)
{
	double scale = (double)(SVG_WIDTH - 2 * SVG_XPAD) / dr->total;
	double px = SVG_XPAD + x * scale, pw = w * scale;
	unsigned y = dr->height - SVG_BOTTOM - (depth + 1) * SVG_FRAME_H;
	char label[1024], fill[32];

	if (pw < SVG_MIN_WIDTH)
		return;
	snprintf(label, sizeof(label), "%.*s", (int)len, name);
	color(delta, dr->max_delta, fill);
	sonde__out_puts(&dr->o, depth ? "<g><title>" : "<g id=\"root\"><title>");
	sonde__out_xml_str(&dr->o, label, 0);
	if (depth)
		sonde__out_printf(&dr->o, " [self %+.2f%%]", 100.0 * delta / dr->total);
	sonde__out_printf(&dr->o, " (%.0f sample%s, %.2f%%)</title>", w, w == 1 ? "" : "s",
			  100.0 * w / dr->total);
	sonde__out_printf(&dr->o,
			  "<rect x=\"%.4f\" y=\"%u\" width=\"%.4f\" height=\"%u\" fill=\"%s\" "
			  "rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%u\">",
			  px, y, pw, SVG_FRAME_H - 1, fill, px + 3, y + SVG_FRAME_H - 4);
	int chars = (int)((pw - 6) / SVG_FONT_W);
	if (chars >= 3)
		sonde__out_xml_str(&dr->o, label, (size_t)chars);
	sonde__out_puts(&dr->o, "</text></g>\n");
}

static void header(struct draw *dr, const char *title, const struct flame_diff *d)
{
	sonde__out_printf(
		&dr->o,
		"<?xml version=\"1.0\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" width=\"%d\" height=\"%u\" viewBox=\"0 0 %d %u\" "
		"xmlns=\"http://www.w3.org/2000/svg\">\n<style>\n"
		"text { font-family: Verdana, sans-serif; font-size: %dpx; fill: #000; }\n"
		"#frames text { pointer-events: none; }\n"
		"#frames g:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }\n"
		"#title { font-size: 17px; text-anchor: middle; }\n"
		"#search, #unzoom { cursor: pointer; opacity: 0.8; }\n"
		"#matched, #search { text-anchor: end; }\n"
		".hide { display: none; }\n.parent { opacity: 0.5; }\n"
		"</style>\n<script type=\"text/ecmascript\"><![CDATA[\n",
		SVG_WIDTH, dr->height, SVG_WIDTH, dr->height, SVG_FONT);
	sonde__out_puts(&dr->o, svg_script);
	sonde__out_printf(&dr->o,
			  "]]></script>\n<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" "
			  "fill=\"#f8f8f8\"/>\n<text id=\"title\" x=\"%d\" y=\"24\">",
			  SVG_WIDTH / 2);
	sonde__out_xml_str(&dr->o, title, 0);
	sonde__out_printf(&dr->o,
			  "</text>\n<text id=\"subtitle\" x=\"%d\" y=\"40\" text-anchor=\"middle\">"
			  "widths: the second profile (%" PRIu64 " samples); colors: self samples "
			  "against the first (%" PRIu64 ", scaled), red grew, blue shrank</text>\n",
			  SVG_WIDTH / 2, d->total_b, d->total_a);
	sonde__out_printf(&dr->o,
			  "<text id=\"unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
			  "<text id=\"search\" x=\"%d\" y=\"24\">Search</text>\n"
			  "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n"
			  "<text id=\"matched\" x=\"%d\" y=\"%u\"> </text>\n<g id=\"frames\">\n",
			  SVG_XPAD, SVG_WIDTH - SVG_XPAD, SVG_XPAD, dr->height - 12,
			  SVG_WIDTH - SVG_XPAD, dr->height - 12);
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
	struct draw dr = {.total = 0};
	size_t depth = 0, n_open = 0;
	double x = 0;

	for (size_t i = 0; i < d->n; i++) {
		size_t k = split(d->v[i].text, next);
		depth = k > depth ? k : depth;
		dr.total += d->v[i].b;
		if (fabs(d->v[i].b - d->v[i].a) > dr.max_delta)
			dr.max_delta = fabs(d->v[i].b - d->v[i].a);
	}
	dr.height = SVG_TOP + SVG_BOTTOM + (unsigned)(depth + 1) * SVG_FRAME_H;
	sonde__out_init(&dr.o, fd);
	header(&dr, title, d);
	for (size_t i = 0; i < d->n && dr.total > 0; i++) {
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
	if (dr.total > 0)
		frame(&dr, "all", 3, 0, dr.total, 0, 0);
	sonde__out_puts(&dr.o, "</g>\n</svg>\n");
	return sonde__out_close(&dr.o);
}
