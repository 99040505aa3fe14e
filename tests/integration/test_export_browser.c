/* The SVG flame graph and the speedscope export, opened in headless Chromium. */
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
	sonde_profile_free(p);
}

TEST_TIMEOUT(export_speedscope_renders_in_chromium, 600)
{
	struct sonde_profile *p = export_fixture();
	const char *json = export_fixture_write(p, SONDE_PROFILE_SPEEDSCOPE, "p.speedscope.json");

	export_check_speedscope(json, "split (pid 42, tid 42)");
	sonde_profile_free(p);
}
