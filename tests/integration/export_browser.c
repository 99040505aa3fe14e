#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

#include "../test.h"
#include "../unit/export_fixture.h"
#include "export_browser.h"

void export_chromium(struct test_output *o, const char *flag, const char *url)
{
	const char *chromium = export_which("chromium");
	char profile_dir[PATH_MAX];

	if (!chromium)
		FAIL("chromium not found: it is in scripts/packages");
	snprintf(profile_dir, sizeof(profile_dir), "--user-data-dir=%s", test_path("chromium"));
	/* the network flags keep chromium from reaching out at start (the machine is offline);
	 * the virtual time budget lets scripts and rendering finish before the dump */
	const char *argv[] = {chromium,
			      "--headless",
			      "--no-sandbox",
			      "--disable-gpu",
			      "--disable-quic",
			      "--no-first-run",
			      "--disable-background-networking",
			      "--disable-component-update",
			      "--disable-sync",
			      "--allow-file-access-from-files",
			      "--window-size=1200,600",
			      "--virtual-time-budget=8000",
			      profile_dir,
			      flag,
			      url,
			      NULL};
	test_run(o, 90, argv);
	if (o->status != 0)
		FAIL("chromium exited with %d:\n%.3000s", o->status, o->err);
}

const char *export_speedscope_index(void)
{
	static char index[PATH_MAX];
	const char *dir = test_src_path("build/npm-speedscope");
	struct test_output o;

	snprintf(index, sizeof(index), "%s/node_modules/speedscope/dist/release/index.html", dir);
	if (access(index, R_OK) == 0)
		return index;
	const char *npm = export_which("npm");
	if (!npm)
		FAIL("npm not found (the machine's Node.js provides it)");
	/* Tests running at once would install into the same directory, and one npm removes
	 * what the other is writing: the first installs, the others wait and find it there. */
	char lock_path[PATH_MAX];
	snprintf(lock_path, sizeof(lock_path), "%s.lock", dir);
	int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		FAIL("lock %s: %s", lock_path, strerror(errno));
	if (access(index, R_OK) != 0) {
		test_run(&o, 300,
			 (const char *const[]){npm, "install", "--no-audit", "--no-fund", "--prefix",
					       dir, "speedscope@1", NULL});
		if (o.status != 0 || access(index, R_OK) != 0)
			FAIL("npm install speedscope failed (%d):\n%s%s", o.status, o.out, o.err);
		test_output_free(&o);
	}
	close(lock);
	return index;
}

/* Decodes an 8-bit RGB(A) PNG and counts saturated pixels (flame chart frames, not the
 * white background, grey grid or black text) below row argv[2]. */
static const char png_count[] =
	"import sys, zlib, struct\n"
	"d = open(sys.argv[1], 'rb').read()\n"
	"assert d[:8] == b'\\x89PNG\\r\\n\\x1a\\n'\n"
	"pos, idat = 8, b''\n"
	"while pos < len(d):\n"
	"  n, t = struct.unpack('>I4s', d[pos:pos + 8]); body = d[pos + 8:pos + 8 + n]; pos += 12 "
	"+ n\n"
	"  if t == b'IHDR': w, h, bd, ct, _, _, il = struct.unpack('>IIBBBBB', body)\n"
	"  elif t == b'IDAT': idat += body\n"
	"assert bd == 8 and ct in (2, 6) and il == 0, (bd, ct, il)\n"
	"bpp = 3 if ct == 2 else 4\n"
	"raw = zlib.decompress(idat); stride = w * bpp; prev = bytearray(stride); i = 0\n"
	"y0 = int(sys.argv[2]); count = 0\n"
	"for y in range(h):\n"
	"  f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride\n"
	"  for x in range(stride):\n"
	"    a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else "
	"0\n"
	"    if f == 1: line[x] = (line[x] + a) & 255\n"
	"    elif f == 2: line[x] = (line[x] + b) & 255\n"
	"    elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255\n"
	"    elif f == 4:\n"
	"      p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)\n"
	"      line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255\n"
	"  prev = line\n"
	"  if y >= y0:\n"
	"    for x in range(0, stride, bpp):\n"
	"      px = line[x:x + 3]\n"
	"      if max(px) - min(px) > 30: count += 1\n"
	"print(count, w * (h - y0))\n";

void export_check_speedscope(const char *json, const char *expect_title)
{
	const char *index = export_speedscope_index();
	const char *py = export_which("python3");
	const char *loader = test_path("load-profile.js");
	const char *png = test_path("speedscope.png");
	char url[PATH_MAX * 2], shot[PATH_MAX + 16];
	struct test_output o;
	long colored = 0, area = 0;

	if (!py)
		FAIL("python3 not found: it is in scripts/packages");
	/* speedscope's own command line loads a profile this way: a script calling
	 * speedscope.loadFileFromBase64, named in the page's #localProfilePath */
	static const char mk_loader[] =
		"import base64, json, sys\n"
		"b = open(sys.argv[1], 'rb').read()\n"
		"open(sys.argv[2], 'w').write('speedscope.loadFileFromBase64(%s, %s)' % "
		"(json.dumps('profile.speedscope.json'), "
		"json.dumps(base64.b64encode(b).decode())))\n";
	test_run(&o, 60, (const char *const[]){py, "-c", mk_loader, json, loader, NULL});
	ASSERT_INT(o.status, ==, 0);
	test_output_free(&o);
	snprintf(url, sizeof(url), "file://%s#localProfilePath=%s", index, loader);

	export_chromium(&o, "--dump-dom", url);
	ASSERT_CONTAINS(o.out, expect_title);
	test_output_free(&o);

	snprintf(shot, sizeof(shot), "--screenshot=%s", png);
	export_chromium(&o, shot, url);
	test_output_free(&o);
	/* rows below 130 px: the main flame chart, under the toolbar and the overview */
	test_run(&o, 120, (const char *const[]){py, "-c", png_count, png, "130", NULL});
	ASSERT_INT(o.status, ==, 0);
	ASSERT_INT(sscanf(o.out, "%ld %ld", &colored, &area), ==, 2);
	/* a drawn chart covers a good part of the area; a failed load leaves it blank */
	if (colored * 20 < area)
		FAIL("speedscope drew %ld colored pixels of %ld (screenshot %s)", colored, area,
		     png);
	test_output_free(&o);
}
