/* A standalone interactive flame graph: one SVG file with its script embedded (no
 * external resources), frames as <g><title/><rect/><text/></g> so that tooltips work even
 * without scripting. Root at the bottom (a flame graph) or at the top (an icicle),
 * children left to right in name order, or a machine-wide view's processes heaviest
 * first. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <sonde/spool.h>

#include "base/opts.h"
#include "export/flame.h"
#include "base/out.h"
#include "export/svg_script.h"

/* Colors are a function of the name only, so the same function has the same color in
 * every graph; the palette tells the kind of frame. */
static void color(const struct sonde_profile *p, const struct tab_func *f, char out[32])
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

/* ---- the geometry every flame graph shares (flame.h) ---- */

#define SVG_MIN_WIDTH 0.1 /* px: narrower frames are left out, as flamegraph.pl does */
#define SVG_FONT_W    (FLAME_SVG_FONT * 0.59)

unsigned sonde__flame_svg_height(uint32_t max_depth)
{
	return FLAME_SVG_TOP + FLAME_SVG_BOTTOM + (max_depth + 1) * FLAME_SVG_FRAME_H;
}

bool sonde__flame_svg_frame(const struct flame_svg *s, const char *name, const char *tip, double x, double w, uint32_t depth, const char *fill)
{
	double scale = (double)(FLAME_SVG_WIDTH - 2 * FLAME_SVG_XPAD) / s->total;
	double px = FLAME_SVG_XPAD + x * scale, pw = w * scale;
	unsigned y = s->inverted ? FLAME_SVG_TOP + depth * FLAME_SVG_FRAME_H
				 : s->height - FLAME_SVG_BOTTOM - (depth + 1) * FLAME_SVG_FRAME_H;

	if (pw < SVG_MIN_WIDTH)
		return false;
	sonde__out_puts(s->o, depth ? "<g><title>" : "<g id=\"root\"><title>");
	sonde__out_xml_str(s->o, name, 0);
	sonde__out_xml_str(s->o, tip, 0);
	sonde__out_printf(
		s->o,
		"</title><rect x=\"%.4f\" y=\"%u\" width=\"%.4f\" height=\"%u\" fill=\"%s\" rx=\"2\" "
		"ry=\"2\"/><text x=\"%.2f\" y=\"%u\">",
		px, y, pw, FLAME_SVG_FRAME_H - 1, fill, px + 3, y + FLAME_SVG_FRAME_H - 4);
	/* the label as it fits without scripting; the script refits it on zoom */
	int chars = (int)((pw - 6) / SVG_FONT_W);
	if (chars >= 3)
		sonde__out_xml_str(s->o, name, (size_t)chars);
	sonde__out_puts(s->o, "</text></g>\n");
	return true;
}

void sonde__flame_svg_begin(const struct flame_svg *s, const char *title, const char *subtitle)
{
	sonde__out_printf(s->o,
			  "<?xml version=\"1.0\" standalone=\"no\"?>\n"
			  "<svg version=\"1.1\" width=\"%d\" height=\"%u\" viewBox=\"0 0 %d %u\" "
			  "xmlns=\"http://www.w3.org/2000/svg\">\n",
			  FLAME_SVG_WIDTH, s->height, FLAME_SVG_WIDTH, s->height);
	sonde__out_printf(
		s->o,
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
		FLAME_SVG_FONT);
	sonde__out_puts(s->o, svg_script);
	sonde__out_puts(s->o, "]]></script>\n");
	sonde__out_printf(
		s->o,
		"<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
		"<text id=\"title\" x=\"%d\" y=\"24\">",
		FLAME_SVG_WIDTH / 2);
	sonde__out_xml_str(s->o, title, 0);
	sonde__out_printf(s->o,
			  "</text>\n<text id=\"subtitle\" x=\"%d\" y=\"40\" "
			  "text-anchor=\"middle\">",
			  FLAME_SVG_WIDTH / 2);
	sonde__out_xml_str(s->o, subtitle, 0);
	/* the details line sits below the frames, or under the title above an icicle's root */
	sonde__out_printf(s->o,
			  "</text>\n<text id=\"unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
			  "<text id=\"search\" x=\"%d\" y=\"24\">Search</text>\n"
			  "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n"
			  "<text id=\"matched\" x=\"%d\" y=\"%u\"> </text>\n"
			  "<g id=\"frames\"%s>\n",
			  FLAME_SVG_XPAD, FLAME_SVG_WIDTH - FLAME_SVG_XPAD, FLAME_SVG_XPAD,
			  s->height - 12, FLAME_SVG_WIDTH - FLAME_SVG_XPAD, s->height - 12,
			  s->inverted ? " data-inverted=\"1\"" : "");
}

void sonde__flame_svg_end(const struct flame_svg *s)
{
	sonde__out_puts(s->o, "</g>\n</svg>\n");
}

/* ---- the profile's flame graph ---- */

/* A weight as the graph states it: samples for the CPU metric, milliseconds for the
 * time metrics (the script reads both back from the tooltips). */
static void weight_str(char *buf, size_t len, enum sonde_profile_metric m, uint64_t w)
{
	if (m == SONDE_PROFILE_METRIC_CPU)
		snprintf(buf, len, "%" PRIu64 " sample%s", w, w == 1 ? "" : "s");
	else
		snprintf(buf, len, "%" PRIu64 ".%03" PRIu64 " ms", w / 1000000, w / 1000 % 1000);
}

static void frame(const struct flame_svg *s, const struct sonde_profile *p, const struct flame *f,
		  uint32_t id, enum sonde_profile_metric m)
{
	const struct flame_node *n = &f->nodes.v[id];
	uint32_t func = n->func;
	const struct tab_func *fn = id && func != FLAME_IDLE_FUNC ? &p->funcs.v[func] : NULL;
	char fill[32] = "rgb(200,200,200)", w[48], tip[96];

	if (fn)
		color(p, fn, fill);
	weight_str(w, sizeof(w), m, n->total);
	snprintf(tip, sizeof(tip), " (%s, %.2f%%)", w, 100.0 * (double)n->total / s->total);
	sonde__flame_svg_frame(s, sonde__flame_name(f, p, id), tip, (double)n->x,
			       (double)n->total, n->depth, fill);
}

static const char *const what[] = {
	[SONDE_PROFILE_METRIC_CPU] = "",
	[SONDE_PROFILE_METRIC_OFF_CPU] = " off-CPU",
	[SONDE_PROFILE_METRIC_WALL] = " wall-clock (on- and off-CPU)",
};

int sonde__prof_write_svg(const struct sonde_profile *p, int fd, const char *title,
			  const struct sonde_profile_write_opts *wo)
{
	enum sonde_profile_metric m = OPTS_GET(wo, metric, SONDE_PROFILE_METRIC_CPU);
	int inverted = OPTS_GET(wo, inverted, 0), hide_idle = OPTS_GET(wo, hide_idle, 0);
	/* a machine-wide view: its processes first, at the top, without the idle ones */
	bool many = sonde__flame_count_processes(p, m) > 1;
	struct flame_opts fo = {
		.metric = m,
		.heaviest_first = many,
		.unroot = p->roots == SONDE_PROFILE_ROOTS_AUTO && !many,
		.idle = hide_idle > 0 || (!hide_idle && many && m == SONDE_PROFILE_METRIC_CPU)
				? FLAME_IDLE_HIDE
			: many ? FLAME_IDLE_GROUP
			       : FLAME_IDLE_KEEP,
	};
	struct flame f;
	struct out o;
	int err = sonde__flame_build_opts(&f, p, &fo);

	if (err)
		return err;
	uint64_t total = f.nodes.v[0].total;
	struct flame_svg s = {
		.o = &o,
		.total = (double)total,
		.height = sonde__flame_svg_height(f.weighed_depth),
		.inverted = inverted > 0 || (!inverted && many),
	};
	char sub[256], w[48];
	int len;

	weight_str(w, sizeof(w), m, total);
	len = snprintf(sub, sizeof(sub), "%s%s", w, what[m]);
	if (f.hidden) {
		weight_str(w, sizeof(w), m, f.hidden);
		snprintf(sub + len, sizeof(sub) - (size_t)len,
			 "; idle and kernel threads hidden: %s, %.1f%% of %s",
			 w, 100.0 * (double)f.hidden / (double)(total + f.hidden),
			 m == SONDE_PROFILE_METRIC_CPU ? "all samples" : "the time");
	}
	sonde__out_init(&o, fd);
	sonde__flame_svg_begin(&s, title, sub);
	if (total) {
		frame(&s, p, &f, 0, m);
		for (uint32_t it = sonde__flame_next(&f, 0); it && !o.err;
		     it = sonde__flame_next(&f, it))
			if (f.nodes.v[it].total)
				frame(&s, p, &f, it, m);
	}
	sonde__flame_svg_end(&s);
	err = sonde__out_close(&o);
	sonde__flame_free(&f);
	return err;
}
