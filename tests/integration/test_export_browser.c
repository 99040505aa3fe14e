/* The SVG flame graph and the speedscope export, opened in headless Chromium. */
#include <fcntl.h>
#include <unistd.h>

#include "../test.h"
#include "../unit/export_fixture.h"
#include "export_browser.h"

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

TEST_TIMEOUT(export_svg_search_in_chromium, 200)
{
	struct sonde_profile *p = export_fixture();
	const char *svg = export_fixture_write(p, SONDE_PROFILE_SVG, "flame.svg");
	char url[4200];
	struct test_output o;

	/* ?s= runs the search at load: the match is highlighted and its share shown */
	snprintf(url, sizeof(url), "file://%s?s=^compute_(hot|cool)$", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_CONTAINS(o.out, ">Matched: 66.7% (2 frames)<");
	ASSERT_INT(count(o.out, "fill=\"rgb(230,0,230)\""), ==, 2);
	ASSERT_CONTAINS(o.out, ">Reset Search<");
	test_output_free(&o);

	/* a recursive match counts once: run contains everything below it */
	snprintf(url, sizeof(url), "file://%s?s=^(run|path_hot|spin)$", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_CONTAINS(o.out, ">Matched: 100.0% (3 frames)<");
	test_output_free(&o);

	/* without a search nothing is highlighted */
	snprintf(url, sizeof(url), "file://%s", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_INT(count(o.out, "rgb(230,0,230)\""), ==, 0);
	ASSERT_CONTAINS(o.out, ">Search<");
	test_output_free(&o);
	sonde_profile__free(p);
}

/* The width of the rect of the first frame whose title starts with `title`. */
static double rect_width(const char *dom, const char *title)
{
	char key[128];
	double w = -1;

	snprintf(key, sizeof(key), "<title>%s", title);
	const char *t = strstr(dom, key);
	const char *wa = t ? strstr(t, "width=\"") : NULL;
	if (!wa || sscanf(wa, "width=\"%lf", &w) != 1)
		FAIL("no frame %s in:\n%.3000s", title, dom);
	return w;
}

TEST_TIMEOUT(export_svg_zoom_in_chromium, 200)
{
	struct sonde_profile *p = export_fixture();
	const char *svg = export_fixture_write(p, SONDE_PROFILE_SVG, "flame.svg");
	char url[4200];
	struct test_output o;

	/* zoomed into path_hot: it and its callees span the width, its callers stay as
	 * faded full-width parents, frames elsewhere are hidden */
	snprintf(url, sizeof(url), "file://%s?z=^path_hot$", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "path_hot ("), 1180, 0.01);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "spin ("), 1180, 0.01);
	ASSERT_CONTAINS(o.out, "<g class=\"parent\"><title>run (");
	ASSERT_CONTAINS(o.out, "<g class=\"hide\"><title>compute_warm (");
	ASSERT_CONTAINS(o.out, "<g class=\"hide\"><title>path_cool (");
	ASSERT_NOT_CONTAINS(o.out, "id=\"unzoom\" class=\"hide\"");
	/* the labels were refitted to the new widths */
	ASSERT_CONTAINS(o.out, ">compute_hot</text>");
	test_output_free(&o);

	/* unzoomed, compute_hot keeps its share of the width */
	snprintf(url, sizeof(url), "file://%s", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "path_hot ("), 1180.0 * 60 / 105, 0.01);
	test_output_free(&o);
	sonde_profile__free(p);
}

/* An icicle zooms the same way upside down: its callers are above a frame, so they stay
 * as faded parents while its callees below widen with it. */
TEST_TIMEOUT(export_svg_icicle_zoom_in_chromium, 200)
{
	struct sonde_profile *p = export_fixture();
	struct sonde_profile_write_opts wo = {.sz = sizeof(wo), .inverted = 1};
	const char *svg = test_path("icicle.svg");
	int fd = open(svg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char url[4200];
	struct test_output o;

	ASSERT_INT(fd, >=, 0);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_SVG, fd, &wo));
	close(fd);
	snprintf(url, sizeof(url), "file://%s?z=^path_hot$", svg);
	export_chromium(&o, "--dump-dom", url);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "path_hot ("), 1180, 0.01);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "spin ("), 1180, 0.01);
	ASSERT_DOUBLE_NEAR(rect_width(o.out, "run ("), 1180, 0.01);
	ASSERT_CONTAINS(o.out, "<g class=\"parent\"><title>run (");
	ASSERT_CONTAINS(o.out, "<g class=\"parent\"><title>main (");
	ASSERT_CONTAINS(o.out, "<g><title>compute_hot (");
	ASSERT_CONTAINS(o.out, "<g class=\"hide\"><title>compute_warm (");
	ASSERT_CONTAINS(o.out, "<g class=\"hide\"><title>path_cool (");
	test_output_free(&o);
	sonde_profile__free(p);
}

TEST_TIMEOUT(export_speedscope_renders_in_chromium, 600)
{
	struct sonde_profile *p = export_fixture();
	const char *json = export_fixture_write(p, SONDE_PROFILE_SPEEDSCOPE, "p.speedscope.json");

	export_check_speedscope(json, "split (pid 42, tid 42)");
	sonde_profile__free(p);
}
