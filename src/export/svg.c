/* A standalone interactive flame graph: one SVG file with its script embedded (no
 * external resources), frames as <g><title/><rect/><text/></g> so that tooltips work even
 * without scripting. Root at the bottom, children left to right in name order. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <sonde/spool.h>

#include "export/flame.h"
#include "export/out.h"
#include "export/svg_script.h"

enum {
	SVG_WIDTH = 1200,
	SVG_XPAD = 10,
	SVG_FRAME_H = 16,
	SVG_TOP = 48, /* title and buttons */
	SVG_BOTTOM = 34,
	SVG_FONT = 12,
};
#define SVG_MIN_WIDTH 0.1 /* px: narrower frames are left out, as flamegraph.pl does */
#define SVG_FONT_W    (SVG_FONT * 0.59)

/* Colors are a function of the name only, so the same function has the same color in
 * every graph; the palette tells the kind of frame. */
static void color(const struct sonde_profile *p, const struct prof_func *f, char out[32])
{
	const char *name = prof_str(p, f->name);
	uint64_t h = idmap_hash_bytes(name, strlen(name));
	double v1 = (h & 0xff) / 255.0, v2 = ((h >> 8) & 0xff) / 255.0;
	double v3 = ((h >> 16) & 0xff) / 255.0;
	int r, g, b;

	if (f->origin == SONDE_SYM_ORIGIN_NONE) { /* unresolved: grey */
		r = g = b = 160 + (int)(50 * v1);
	} else if (f->kind == SONDE_SYM_KERNEL) { /* orange */
		r = 220 + (int)(35 * v1), g = 120 + (int)(60 * v2), b = (int)(40 * v3);
	} else if (f->kind == SONDE_SYM_JIT) { /* green */
		r = 50 + (int)(60 * v1), g = 180 + (int)(60 * v2), b = 50 + (int)(60 * v3);
	} else if (f->kind == SONDE_SYM_INTERPRETER) { /* aqua */
		r = 50 + (int)(60 * v1), g = 165 + (int)(55 * v2), b = 200 + (int)(55 * v3);
	} else { /* native: red to yellow */
		r = 205 + (int)(50 * v3), g = (int)(230 * v1), b = (int)(55 * v2);
	}
	snprintf(out, 32, "rgb(%d,%d,%d)", r, g, b);
}

/* A weight as the graph states it: samples for the CPU metric, milliseconds for the
 * time metrics (the script reads both back from the tooltips). */
static void put_weight(struct out *o, enum sonde_profile_metric m, uint64_t w)
{
	if (m == SONDE_PROFILE_METRIC_CPU)
		sonde__out_printf(o, "%" PRIu64 " sample%s", w, w == 1 ? "" : "s");
	else
		sonde__out_printf(o, "%" PRIu64 ".%03" PRIu64 " ms", w / 1000000, w / 1000 % 1000);
}

static void frame(struct out *o, const struct sonde_profile *p, const struct flame *f, uint32_t id,
		  unsigned height, enum sonde_profile_metric m)
{
	const struct flame_node *n = &f->nodes.v[id];
	uint64_t total = f->nodes.v[0].total;
	double scale = (double)(SVG_WIDTH - 2 * SVG_XPAD) / (double)total;
	double x = SVG_XPAD + (double)n->x * scale, w = (double)n->total * scale;
	unsigned y = height - SVG_BOTTOM - (n->depth + 1) * SVG_FRAME_H;
	const struct prof_func *fn = id ? &p->funcs.v[n->func] : NULL;
	const char *name = fn ? prof_str(p, fn->name) : "all";
	char fill[32] = "rgb(200,200,200)";

	if (fn)
		color(p, fn, fill);
	sonde__out_puts(o, id ? "<g><title>" : "<g id=\"root\"><title>");
	sonde__out_xml_str(o, name, 0);
	sonde__out_puts(o, " (");
	put_weight(o, m, n->total);
	sonde__out_printf(o, ", %.2f%%)</title>", 100.0 * (double)n->total / (double)total);
	sonde__out_printf(
		o,
		"<rect x=\"%.4f\" y=\"%u\" width=\"%.4f\" height=\"%u\" fill=\"%s\" rx=\"2\" "
		"ry=\"2\"/><text x=\"%.2f\" y=\"%u\">",
		x, y, w, SVG_FRAME_H - 1, fill, x + 3, y + SVG_FRAME_H - 4);
	/* the label as it fits without scripting; the script refits it on zoom */
	int chars = (int)((w - 6) / SVG_FONT_W);
	if (chars >= 3)
		sonde__out_xml_str(o, name, (size_t)chars);
	sonde__out_puts(o, "</text></g>\n");
}

static const char *const what[] = {
	[SONDE_PROFILE_METRIC_CPU] = "",
	[SONDE_PROFILE_METRIC_OFF_CPU] = " off-CPU",
	[SONDE_PROFILE_METRIC_WALL] = " wall-clock (on- and off-CPU)",
};

static void header(struct out *o, const char *title, uint64_t total, unsigned height,
		   enum sonde_profile_metric m)
{
	sonde__out_printf(o,
			  "<?xml version=\"1.0\" standalone=\"no\"?>\n"
			  "<svg version=\"1.1\" width=\"%d\" height=\"%u\" viewBox=\"0 0 %d %u\" "
			  "xmlns=\"http://www.w3.org/2000/svg\">\n",
			  SVG_WIDTH, height, SVG_WIDTH, height);
	sonde__out_printf(
		o,
		"<style>\n"
		"text { font-family: Verdana, sans-serif; font-size: %dpx; fill: #000; }\n"
		"#frames text { pointer-events: none; }\n"
		"#frames rect { stroke: none; }\n"
		"#frames g:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }\n"
		"#title { font-size: 17px; text-anchor: middle; }\n"
		"#search, #unzoom { cursor: pointer; opacity: 0.8; }\n"
		"#matched, #search { text-anchor: end; }\n"
		".hide { display: none; }\n"
		".parent { opacity: 0.5; }\n"
		"</style>\n<script type=\"text/ecmascript\"><![CDATA[\n",
		SVG_FONT);
	sonde__out_puts(o, svg_script);
	sonde__out_puts(o, "]]></script>\n");
	sonde__out_printf(
		o,
		"<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
		"<text id=\"title\" x=\"%d\" y=\"24\">",
		SVG_WIDTH / 2);
	sonde__out_xml_str(o, title, 0);
	sonde__out_printf(o,
			  "</text>\n<text id=\"subtitle\" x=\"%d\" y=\"40\" "
			  "text-anchor=\"middle\">",
			  SVG_WIDTH / 2);
	if (m == SONDE_PROFILE_METRIC_CPU)
		sonde__out_printf(o, "%" PRIu64 " samples", total);
	else
		put_weight(o, m, total);
	sonde__out_printf(o, "%s</text>\n", what[m]);
	sonde__out_printf(o,
			  "<text id=\"unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
			  "<text id=\"search\" x=\"%d\" y=\"24\">Search</text>\n"
			  "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n"
			  "<text id=\"matched\" x=\"%d\" y=\"%u\"> </text>\n",
			  SVG_XPAD, SVG_WIDTH - SVG_XPAD, SVG_XPAD, height - 12,
			  SVG_WIDTH - SVG_XPAD, height - 12);
}

int sonde__prof_write_svg(const struct sonde_profile *p, int fd, const char *title,
			  enum sonde_profile_metric m)
{
	struct flame f;
	struct out o;
	int err = sonde__flame_build_metric(&f, p, m);

	if (err)
		return err;
	uint64_t total = f.nodes.v[0].total;
	unsigned height = SVG_TOP + SVG_BOTTOM + (f.max_depth + 1) * SVG_FRAME_H;
	double min_samples = SVG_MIN_WIDTH * (double)total / (SVG_WIDTH - 2 * SVG_XPAD);

	sonde__out_init(&o, fd);
	header(&o, title, total, height, m);
	sonde__out_puts(&o, "<g id=\"frames\">\n");
	if (total) {
		frame(&o, p, &f, 0, height, m);
		for (uint32_t it = sonde__flame_next(&f, 0); it && !o.err;
		     it = sonde__flame_next(&f, it))
			if ((double)f.nodes.v[it].total >= min_samples)
				frame(&o, p, &f, it, height, m);
	}
	sonde__out_puts(&o, "</g>\n</svg>\n");
	err = sonde__out_close(&o);
	sonde__flame_free(&f);
	return err;
}
