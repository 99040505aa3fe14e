/* Headless Chromium and speedscope for the export tests. */
#ifndef SONDE_TEST_EXPORT_BROWSER_H
#define SONDE_TEST_EXPORT_BROWSER_H

#include "../util.h"

/* Runs Debian's chromium headless on url with one extra flag (e.g. "--dump-dom" or
 * "--screenshot=PATH"); fails the test if chromium is missing or does not finish. */
void export_chromium(struct test_output *o, const char *flag, const char *url);
/* speedscope's index.html from the npm package, installed under build/ on first use. */
const char *export_speedscope_index(void);
/* Loads the speedscope file `json` into speedscope in chromium; fails unless the flame
 * chart drew and the page shows `expect_title`. */
void export_check_speedscope(const char *json, const char *expect_title);

#endif
