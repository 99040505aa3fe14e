/* The exporters on a hand-built profile: each output is read back, by our own decoder and by
 * an independent one (protoc, python's json and xml parsers); and the names every reader of
 * a spool gives a frame the recording names ([exiting]). */
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include "base/pb.h"
#include "export/flame.h"

#include <sonde/spool.h>
#include <sonde/symbolize.h>
#include <sonde/view_source.h>

#include "../test.h"
#include "../util.h"
#include "export_fixture.h"

TEST(export_folded_lines)
{
	struct sonde_profile *p = export_fixture();
	const char *path = export_fixture_write(p, SONDE_PROFILE_FOLDED, "out.folded");
	char *text = ASSERT_NOT_NULL(test_read_file(path, NULL));

	/* tree order, children by name; ';' inside a name would split a frame, so it is ':' */
	ASSERT_STR_EQ(text, "main;run;libc.so.6+0x1234 4\n"
			    "main;run;operator<<(a&, \"b\"):\t<x>\xff'y' 1\n"
			    "main;run;path_cool;compute_cool 10\n"
			    "main;run;path_hot;compute_hot;spin 60\n"
			    "main;run;path_warm;compute_warm 30\n");
	free(text);
	sonde_profile__free(p);
}

TEST(export_empty_profile_is_valid_everywhere)
{
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(NULL));
	const char *folded = export_fixture_write(p, SONDE_PROFILE_FOLDED, "e.folded");
	char *text = ASSERT_NOT_NULL(test_read_file(folded, NULL));

	ASSERT_STR_EQ(text, "");
	free(text);
	export_fixture_write(p, SONDE_PROFILE_PPROF, "e.pb.gz");
	export_fixture_write(p, SONDE_PROFILE_SPEEDSCOPE, "e.json");
	export_fixture_write(p, SONDE_PROFILE_SVG, "e.svg");
	sonde_profile__free(p);
}

TEST(export_rejects_bad_references)
{
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(NULL));
	uint32_t bad = 7, t;

	ASSERT_ERR(sonde_profile__add_sample(p, 0, 0, &bad, 1, 1), -SONDE_E_REFERENCE);
	ASSERT_ERR(sonde_profile__add_sample(p, 0, 3, NULL, 0, 1), -EINVAL);
	ASSERT_ERR(sonde_profile__add_location(p, 5, 0, NULL, 0, &t), -EINVAL);
	struct sonde_profile_module m = {.start = 10, .end = 5};
	ASSERT_ERR(sonde_profile__add_module(p, &m, &t), -EINVAL);
	ASSERT_ERR(sonde_profile__write(p, SONDE_PROFILE_SVG, -1, NULL), -EINVAL);
	sonde_profile__free(p);
	sonde_profile__free(NULL);
}

TEST(export_format_names_and_extensions)
{
	enum sonde_profile_format f;

	ASSERT_OK(sonde_profile__format_from_path("x/cpu.pb.gz", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_PPROF);
	ASSERT_OK(sonde_profile__format_from_path("cpu.pprof", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_PPROF);
	ASSERT_OK(sonde_profile__format_from_path("a.folded", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_FOLDED);
	ASSERT_OK(sonde_profile__format_from_path("a.txt", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_FOLDED);
	ASSERT_OK(sonde_profile__format_from_path("a.speedscope.json", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_SPEEDSCOPE);
	ASSERT_OK(sonde_profile__format_from_path("a.svg", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_SVG);
	ASSERT_ERR(sonde_profile__format_from_path("a.gz", &f), -EINVAL);
	ASSERT_ERR(sonde_profile__format_from_path(".svg", &f), -EINVAL);
	ASSERT_OK(sonde_profile__parse_format("speedscope", &f));
	ASSERT_INT(f, ==, SONDE_PROFILE_SPEEDSCOPE);
	ASSERT_ERR(sonde_profile__parse_format("perfetto", &f), -EINVAL);
}

/* --- pprof, decoded by our own reader --- */

static uint8_t *gunzip_file(const char *path, size_t *len)
{
	size_t zlen;
	uint8_t *z = (uint8_t *)ASSERT_NOT_NULL(test_read_file(path, &zlen));
	ASSERT(zlen > 2 && z[0] == 0x1f && z[1] == 0x8b); /* gzip magic */
	size_t cap = 1 << 20;
	uint8_t *out = malloc(cap);
	z_stream s = {
		.next_in = z, .avail_in = (uInt)zlen, .next_out = out, .avail_out = (uInt)cap};
	ASSERT_INT(inflateInit2(&s, 15 + 16), ==, Z_OK);
	ASSERT_INT(inflate(&s, Z_FINISH), ==, Z_STREAM_END);
	*len = s.total_out;
	inflateEnd(&s);
	free(z);
	return out;
}

struct pstr {
	const uint8_t *p;
	size_t n;
};

struct decoded {
	struct pstr strs[256];
	size_t n_strs;
	struct pb_field samples[64], locs[64], funcs[64], maps[8], types[4];
	size_t n_samples, n_locs, n_funcs, n_maps, n_types;
	uint64_t period, time_nanos, duration, default_type;
	struct pb_field period_type;
};

#define PUSH(arr, n, f)                                                                            \
	do {                                                                                       \
		ASSERT((n) < sizeof(arr) / sizeof(arr[0]));                                        \
		(arr)[(n)++] = (f);                                                                \
	} while (0)

static void decode_profile(const uint8_t *buf, size_t len, struct decoded *d)
{
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	int rc;

	memset(d, 0, sizeof(*d));
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		switch (f.num) {
		case 1:
			PUSH(d->types, d->n_types, f);
			break;
		case 2:
			PUSH(d->samples, d->n_samples, f);
			break;
		case 3:
			PUSH(d->maps, d->n_maps, f);
			break;
		case 4:
			PUSH(d->locs, d->n_locs, f);
			break;
		case 5:
			PUSH(d->funcs, d->n_funcs, f);
			break;
		case 6:
			ASSERT(d->n_strs < 256);
			d->strs[d->n_strs++] = (struct pstr){f.ptr, f.len};
			break;
		case 9:
			d->time_nanos = f.u;
			break;
		case 10:
			d->duration = f.u;
			break;
		case 11:
			d->period_type = f;
			break;
		case 12:
			d->period = f.u;
			break;
		case 14:
			d->default_type = f.u;
			break;
		}
	}
	ASSERT_INT(rc, ==, 0);
}

/* A string table entry as a C string (static, rotating). */
static const char *S(const struct decoded *d, uint64_t i)
{
	static char bufs[4][256];
	static unsigned next;
	char *b = bufs[next++ % 4];

	ASSERT_UINT(i, <, d->n_strs);
	snprintf(b, 256, "%.*s", (int)d->strs[i].n, (const char *)d->strs[i].p);
	return b;
}

/* Field `num` (varint) of a message, or def. */
static uint64_t msg_u(const struct pb_field *m, uint32_t num, uint64_t def)
{
	struct pb_reader r = pb_sub(m);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == num && f.wire == PB_VARINT)
			def = f.u;
	return def;
}

static const struct pb_field *by_id(const struct pb_field *arr, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (msg_u(&arr[i], 1, 0) == id)
			return &arr[i];
	FAIL("no message with id %llu", (unsigned long long)id);
}

/* The function names of a location's lines, innermost first, joined by '<'. */
static void loc_names(const struct decoded *d, uint64_t loc_id, char *out, size_t cap)
{
	const struct pb_field *loc = by_id(d->locs, d->n_locs, loc_id);
	struct pb_reader r = pb_sub(loc);
	struct pb_field f;

	out[0] = 0;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 4)
			continue;
		const struct pb_field *fn = by_id(d->funcs, d->n_funcs, msg_u(&f, 1, 0));
		snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "<" : "",
			 S(d, msg_u(fn, 2, 0)));
	}
}

TEST(export_pprof_decodes_with_own_reader)
{
	struct sonde_profile *p = export_fixture();
	const char *path = export_fixture_write(p, SONDE_PROFILE_PPROF, "cpu.pb.gz");
	size_t len;
	uint8_t *raw = gunzip_file(path, &len);
	struct decoded d;
	char names[256];

	decode_profile(raw, len, &d);
	ASSERT_STR_EQ(S(&d, 0), "");
	/* every metric's type, whether or not the profile has off-CPU intervals */
	ASSERT_UINT(d.n_types, ==, 4);
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[0], 1, 0)), "samples");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[0], 2, 0)), "count");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[1], 1, 0)), "cpu");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[1], 2, 0)), "nanoseconds");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[2], 1, 0)), "off_cpu");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[2], 2, 0)), "nanoseconds");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[3], 1, 0)), "wall");
	ASSERT_STR_EQ(S(&d, msg_u(&d.types[3], 2, 0)), "nanoseconds");
	ASSERT_STR_EQ(S(&d, d.default_type), "cpu");
	ASSERT_STR_EQ(S(&d, msg_u(&d.period_type, 2, 0)), "nanoseconds");
	ASSERT_UINT(d.period, ==, 1000000);
	ASSERT_UINT(d.time_nanos, ==, 1700000000000000000ULL);
	/* from the recording start to the last sample plus one period */
	ASSERT_UINT(d.duration, ==, 2000000 + 42 * 1000000 - 1000000 + 1000000);

	/* one sample per (stack, thread); values add up; leaf locations carry the shape */
	ASSERT_UINT(d.n_samples, ==, 9);
	uint64_t total = 0, cpu = 0, spin = 0, warm = 0, cool = 0, labels = 0;
	for (size_t i = 0; i < d.n_samples; i++) {
		struct pb_reader r = pb_sub(&d.samples[i]);
		struct pb_field f;
		uint64_t leaf = 0, v[4] = {0}, depth = 0;
		while (sonde__pb_next(&r, &f) > 0) {
			struct pb_reader pr = pb_sub(&f);
			uint64_t x;
			if (f.num == 1)
				while (sonde__pb_packed_next(&pr, &x) > 0)
					leaf = depth++ ? leaf : x;
			if (f.num == 2)
				for (int k = 0; k < 4 && sonde__pb_packed_next(&pr, &x) > 0; k++)
					v[k] = x;
			labels += f.num == 3;
		}
		ASSERT_UINT(v[1], ==, v[0] * 1000000);
		ASSERT_UINT(v[2], ==, 0); /* no off-CPU time */
		ASSERT_UINT(v[3], ==, v[1]);
		total += v[0];
		cpu += v[1];
		loc_names(&d, leaf, names, sizeof(names));
		spin += strcmp(names, "spin<compute_hot") == 0 ? v[0] : 0;
		warm += strcmp(names, "compute_warm") == 0 ? v[0] : 0;
		cool += strcmp(names, "compute_cool") == 0 ? v[0] : 0;
	}
	ASSERT_UINT(total, ==, EXPORT_FIXTURE_TOTAL);
	ASSERT_UINT(cpu, ==, EXPORT_FIXTURE_TOTAL * 1000000ULL);
	ASSERT_UINT(spin, ==, 60);
	ASSERT_UINT(warm, ==, 30);
	ASSERT_UINT(cool, ==, 10);
	ASSERT_UINT(labels, ==, 3 * 9); /* pid, tid, thread */

	/* mappings: the executable is symbolized, with its build id; libc is not */
	ASSERT_UINT(d.n_maps, ==, 2);
	ASSERT_STR_EQ(S(&d, msg_u(&d.maps[0], 5, 0)), "/opt/split");
	ASSERT_STR_EQ(S(&d, msg_u(&d.maps[0], 6, 0)), "deadbeef0102");
	ASSERT_UINT(msg_u(&d.maps[0], 2, 0), ==, 0x400000);
	ASSERT_UINT(msg_u(&d.maps[0], 4, 0), ==, 0x1000);
	ASSERT_UINT(msg_u(&d.maps[0], 7, 0), ==, 1);
	ASSERT_UINT(msg_u(&d.maps[0], 10, 0), ==, 1);
	ASSERT_UINT(msg_u(&d.maps[1], 7, 1), ==, 0);
	/* addresses are virtual: start + offset - pgoff; libc keeps the raw address only */
	ASSERT_UINT(d.n_locs, ==, 11);
	int seen_raw = 0;
	for (size_t i = 0; i < d.n_locs; i++) {
		uint64_t id = msg_u(&d.locs[i], 1, 0);
		loc_names(&d, id, names, sizeof(names));
		if (!strcmp(names, "spin<compute_hot"))
			ASSERT_UINT(msg_u(&d.locs[i], 3, 0), ==, 0x400000 + 0x1400 - 0x1000);
		if (msg_u(&d.locs[i], 2, 0) == 2) {
			ASSERT_STR_EQ(names, "");
			ASSERT_UINT(msg_u(&d.locs[i], 3, 0), ==, 0x7f0000000000 + 0x1234);
			seen_raw = 1;
		}
	}
	ASSERT(seen_raw);
	free(raw);
	sonde_profile__free(p);
}

TEST(export_pprof_decodes_with_protoc)
{
	struct sonde_profile *p = export_fixture();
	const char *path = export_fixture_write(p, SONDE_PROFILE_PPROF, "cpu.pb.gz");
	const char *protoc = export_which("protoc");
	size_t len;
	uint8_t *raw = gunzip_file(path, &len);
	struct test_output o;

	if (!protoc)
		FAIL("protoc not found: it is in scripts/packages (protobuf-compiler)");
	const char *pb = test_path("cpu.pb");
	test_write_file(pb, raw, len);
	const char *sh = export_which("sh");
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "%s --decode_raw < %s", protoc, pb);
	test_run(&o, 30, (const char *const[]){sh, "-c", cmd, NULL});
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "6: \"compute_hot\"");
	ASSERT_CONTAINS(o.out, "6: \"deadbeef0102\"");
	ASSERT_CONTAINS(o.out, "12: 1000000");
	/* count the top-level messages: samples (2) and locations (4) */
	int samples = 0, locs = 0;
	for (const char *l = o.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		samples += strncmp(l, "2 {\n", 4) == 0;
		locs += strncmp(l, "4 {\n", 4) == 0;
	}
	ASSERT_INT(samples, ==, 9);
	ASSERT_INT(locs, ==, 11);
	test_output_free(&o);
	free(raw);
	sonde_profile__free(p);
}

/* --- speedscope and SVG, checked by python's parsers --- */

static void run_python(const char *code, const char *arg, struct test_output *o)
{
	const char *py = export_which("python3");

	if (!py)
		FAIL("python3 not found: it is in scripts/packages");
	test_run(o, 60, (const char *const[]){py, "-c", code, arg, NULL});
	if (o->status != 0)
		FAIL("python check failed (%d):\n%s%s", o->status, o->out, o->err);
}

TEST(export_speedscope_is_valid_json)
{
	struct sonde_profile *p = export_fixture();
	const char *path = export_fixture_write(p, SONDE_PROFILE_SPEEDSCOPE, "p.speedscope.json");
	struct test_output o;
	static const char code[] =
		"import json, sys\n"
		"d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
		"assert d['$schema'] == 'https://www.speedscope.app/file-format-schema.json'\n"
		"frames = d['shared']['frames']\n"
		"names = [f['name'] for f in frames]\n"
		"assert len(names) == len(set((f['name'], f.get('file')) for f in frames))\n"
		"w = {}\n"
		"tot = 0\n"
		"for p in d['profiles']:\n"
		"  assert p['type'] == 'sampled' and p['unit'] == 'nanoseconds'\n"
		"  assert len(p['samples']) == len(p['weights'])\n"
		"  assert p['endValue'] - p['startValue'] == sum(p['weights'])\n"
		"  for s, x in zip(p['samples'], p['weights']):\n"
		"    leaf = names[s[-1]]\n"
		"    assert names[s[0]] == 'main', s\n"
		"    w[leaf] = w.get(leaf, 0) + x\n"
		"    tot += x\n"
		"print(len(d['profiles']), d['profiles'][d['activeProfileIndex']]['name'])\n"
		"for k in sorted(w): print('%s=%d' % (k, w[k] * 100 // tot))\n";

	run_python(code, path, &o);
	ASSERT_CONTAINS(o.out, "2 split (pid 42, tid 42)\n");
	ASSERT_CONTAINS(o.out, "spin=57\n"); /* 60 of 105 */
	ASSERT_CONTAINS(o.out, "compute_warm=28\n");
	ASSERT_CONTAINS(o.out, "compute_cool=9\n");
	/* the odd name survives escaping, its bad byte as U+FFFD */
	ASSERT_CONTAINS(o.out, "operator<<(a&, \"b\");\t<x>\xef\xbf\xbd'y'=0\n");
	test_output_free(&o);
	sonde_profile__free(p);
}

TEST(export_svg_is_well_formed_xml)
{
	struct sonde_profile *p = export_fixture();
	const char *path = export_fixture_write(p, SONDE_PROFILE_SVG, "flame.svg");
	struct test_output o;
	static const char code[] = "import sys, xml.etree.ElementTree as ET\n"
				   "ns = '{http://www.w3.org/2000/svg}'\n"
				   "root = ET.parse(sys.argv[1]).getroot()\n"
				   "assert root.tag == ns + 'svg'\n"
				   "assert root.find(ns + 'script') is not None\n"
				   "frames = root.find(\".//*[@id='frames']\")\n"
				   "for g in frames.findall(ns + 'g'):\n"
				   "  r = g.find(ns + 'rect')\n"
				   "  print('%s|%s|%s' % (g.find(ns + 'title').text, "
				   "r.get('width'), r.get('fill')))\n";

	run_python(code, path, &o);
	ASSERT_CONTAINS(o.out, "all (105 samples, 100.00%)|1180.0000|");
	ASSERT_CONTAINS(o.out, "compute_hot (60 samples, 57.14%)|674.2857|");
	ASSERT_CONTAINS(o.out, "spin (60 samples, 57.14%)|674.2857|");
	ASSERT_CONTAINS(o.out, "operator<<(a&, \"b\"); <x>\xef\xbf\xbd'y' (1 sample, 0.95%)|");
	ASSERT_CONTAINS(o.out, "libc.so.6+0x1234 (4 samples, 3.81%)|44.9524|rgb(");
	/* colors depend on the name only: both compute_cool locations merged into one frame */
	ASSERT_CONTAINS(o.out, "compute_cool (10 samples, 9.52%)|");
	test_output_free(&o);
	sonde_profile__free(p);
}

/* A profile of three processes: "busy" (pid 20, 7 samples: user frames, one stack entering
 * the kernel), "light" (pid 10, 3: a JIT frame no module covers), and the kernel thread
 * "kworker" (pid 30, 5: kernel frames only, no module). */
static struct sonde_profile *three_processes(void)
{
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(NULL));
	struct sonde_profile_module kern = {.flags = SONDE_MODULE_EXEC | SONDE_MODULE_KERNEL,
					    .start = 0xffffffff81000000ULL,
					    .end = 0xffffffff82000000ULL,
					    .path = "[kernel.kallsyms]"};
	struct sonde_profile_module busy = {.pid = 20, .flags = SONDE_MODULE_EXEC,
					    .start = 0x1000, .end = 0x9000, .path = "/bin/busy"};
	uint32_t mk, mb, t_busy, t_light, t_kw, l_main, l_work, l_sys, l_kthread, l_wq, l_jit;
	struct sonde_sym_frame f = {.name = "main", .kind = SONDE_SYM_NATIVE};

	ASSERT_OK(sonde_profile__add_module(p, &kern, &mk));
	ASSERT_OK(sonde_profile__add_module(p, &busy, &mb));
	ASSERT_OK(sonde_profile__add_thread(p, 20, 20, "busy", &t_busy));
	ASSERT_OK(sonde_profile__add_thread(p, 10, 10, "light", &t_light));
	ASSERT_OK(sonde_profile__add_thread(p, 30, 30, "kworker", &t_kw));
	ASSERT_OK(sonde_profile__add_location(p, mb, 0x100, &f, 1, &l_main));
	f.name = "work";
	ASSERT_OK(sonde_profile__add_location(p, mb, 0x200, &f, 1, &l_work));
	f = (struct sonde_sym_frame){.name = "sys_read", .kind = SONDE_SYM_KERNEL};
	ASSERT_OK(sonde_profile__add_location(p, mk, 0x100, &f, 1, &l_sys));
	f.name = "kthread";
	ASSERT_OK(sonde_profile__add_location(p, mk, 0x200, &f, 1, &l_kthread));
	f.name = "worker_thread";
	ASSERT_OK(sonde_profile__add_location(p, mk, 0x300, &f, 1, &l_wq));
	f = (struct sonde_sym_frame){.name = "jitted", .kind = SONDE_SYM_JIT};
	ASSERT_OK(sonde_profile__add_location(p, 0, 0x7f0000001000ULL, &f, 1, &l_jit));
	uint32_t s_busy[] = {l_work, l_main}, s_sys[] = {l_sys, l_work, l_main};
	uint32_t s_kw[] = {l_wq, l_kthread}, s_jit[] = {l_jit};
	ASSERT_OK(sonde_profile__add_sample(p, 1, t_busy, s_busy, 2, 5));
	ASSERT_OK(sonde_profile__add_sample(p, 2, t_busy, s_sys, 3, 2));
	ASSERT_OK(sonde_profile__add_sample(p, 3, t_light, s_jit, 1, 3));
	ASSERT_OK(sonde_profile__add_sample(p, 4, t_kw, s_kw, 2, 5));
	return p;
}

/* The id of the root's child named name, 0 if none. */
static uint32_t top_child(const struct flame *f, const struct sonde_profile *p, const char *name)
{
	for (uint32_t c = f->nodes.v[0].first_child; c; c = f->nodes.v[c].next_sibling)
		if (!strcmp(sonde__flame_name(f, p, c), name))
			return c;
	return 0;
}

/* The flame tree's idle modes and its heaviest-first order, on a hand-built profile. */
TEST(export_flame_groups_or_hides_kernel_threads_heaviest_first)
{
	struct sonde_profile *p = three_processes();
	struct flame_opts o = {.metric = SONDE_PROFILE_METRIC_CPU};
	struct flame f;

	ASSERT_UINT(sonde__flame_count_processes(p, SONDE_PROFILE_METRIC_CPU), ==, 3);
	/* kept: the kernel thread's stack is a top frame like any other, in name order */
	ASSERT_OK(sonde__flame_build_opts(&f, p, &o));
	ASSERT_UINT(f.nodes.v[0].total, ==, 15);
	ASSERT_UINT(f.hidden, ==, 0);
	ASSERT_UINT(f.idle, ==, 0);
	uint32_t c = f.nodes.v[0].first_child;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "jitted");
	c = f.nodes.v[c].next_sibling;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "kthread");
	c = f.nodes.v[c].next_sibling;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "main");
	sonde__flame_free(&f);

	/* grouped, heaviest first: main (7), jitted (3), then the group (5) last */
	o.idle = FLAME_IDLE_GROUP;
	o.heaviest_first = true;
	ASSERT_OK(sonde__flame_build_opts(&f, p, &o));
	ASSERT_UINT(f.nodes.v[0].total, ==, 15);
	c = f.nodes.v[0].first_child;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "main");
	ASSERT_UINT(f.nodes.v[c].total, ==, 7);
	ASSERT_UINT(f.nodes.v[c].x, ==, 0);
	c = f.nodes.v[c].next_sibling;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "jitted");
	ASSERT_UINT(f.nodes.v[c].x, ==, 7);
	c = f.nodes.v[c].next_sibling;
	ASSERT_UINT(c, ==, f.idle);
	ASSERT_STR_EQ(sonde__flame_name(&f, p, c), "[idle and kernel threads]");
	ASSERT_UINT(f.nodes.v[c].total, ==, 5);
	ASSERT_UINT(f.nodes.v[c].x, ==, 10);
	ASSERT_UINT(f.nodes.v[c].next_sibling, ==, 0);
	uint32_t k = f.nodes.v[c].first_child;
	ASSERT_STR_EQ(sonde__flame_name(&f, p, k), "kthread");
	ASSERT_UINT(f.nodes.v[k].depth, ==, 2);
	ASSERT_UINT(f.weighed_depth, ==, 3);
	sonde__flame_free(&f);

	/* hidden: out of the tree, its weight said */
	o.idle = FLAME_IDLE_HIDE;
	ASSERT_OK(sonde__flame_build_opts(&f, p, &o));
	ASSERT_UINT(f.nodes.v[0].total, ==, 10);
	ASSERT_UINT(f.hidden, ==, 5);
	ASSERT_UINT(f.nodes.v[top_child(&f, p, "kthread")].total, ==, 0);
	ASSERT_UINT(f.nodes.v[top_child(&f, p, "main")].total, ==, 7);
	ASSERT_UINT(f.nodes.v[top_child(&f, p, "jitted")].total, ==, 3);
	/* the SVG draws nothing of it and says so */
	struct sonde_profile_write_opts wo = {.sz = sizeof(wo), .hide_idle = 1};
	const char *path = test_path("hidden.svg");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT_INT(fd, >=, 0);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_SVG, fd, &wo));
	close(fd);
	char *svg = ASSERT_NOT_NULL(test_read_file(path, NULL));
	ASSERT_NOT_CONTAINS(svg, "kthread");
	ASSERT_NOT_CONTAINS(svg, "worker_thread");
	ASSERT_CONTAINS(svg, ">10 samples; idle and kernel threads hidden: 5 samples, 33.3% of "
			     "all samples<");
	free(svg);
	sonde__flame_free(&f);
	sonde_profile__free(p);
}

/* --- a wait of a thread exiting after its memory was released, from a spool --- */

/* A spool whose thread 500 waited 30 ms in D in exit_aio, called from do_exit, with an
 * [exiting] frame for its user part (docs/spool.md); the kernel's names in `kallsyms`. */
static void write_exiting_spool(const char *path, const char *kallsyms)
{
	static const char ksyms[] = "ffffffff81000000 T do_exit\n"
				    "ffffffff81000100 T exit_aio\n"
				    "ffffffff81000200 T kernel_end\n";
	struct sonde_spool_header h = {.start_time_ns = 1, .start_monotonic_ns = 1000};
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint32_t t, kmod, xmod;

	test_write_file(kallsyms, ksyms, strlen(ksyms));
	ASSERT(fd >= 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 1000, 500, 500, "quitter", &t));
	struct sonde_spool_module_def k = {.flags = SONDE_MODULE_EXEC | SONDE_MODULE_KERNEL,
					   .start = 0xffff800000000000,
					   .end = UINT64_MAX,
					   .pgoff = 0xffff800000000000,
					   .path = "[kernel.kallsyms]"};
	ASSERT_OK(sonde_spool_writer__add_module(w, 1000, &k, &kmod));
	k.path = "[exiting]";
	ASSERT_OK(sonde_spool_writer__add_module(w, 1000, &k, &xmod));
	const struct sonde_spool_frame frames[] = {
		{kmod, 0xffffffff81000110}, {kmod, 0xffffffff81000010}, {xmod, k.start}};
	struct sonde_spool_offcpu iv = {.switch_out_ns = 2000,
					.switch_in_ns = 2000 + 30000000,
					.thread = t,
					.cpu = SONDE_SPOOL_CPU_NONE,
					.state = SONDE_OFFCPU_BLOCKED,
					.flags = SONDE_SAMPLE_KERNEL};
	ASSERT_OK(sonde_spool_writer__add_offcpu(w, &iv, frames, 3));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);
}

/* The outermost location's names of the pprof sample that has an off-CPU time. */
static void pprof_offcpu_root(const char *path, char *out, size_t cap)
{
	size_t len;
	uint8_t *raw = gunzip_file(path, &len);
	struct decoded d;

	decode_profile(raw, len, &d);
	out[0] = 0;
	for (size_t i = 0; i < d.n_samples; i++) {
		struct pb_reader r = pb_sub(&d.samples[i]);
		struct pb_field f;
		uint64_t root = 0, v[4] = {0};
		while (sonde__pb_next(&r, &f) > 0) {
			struct pb_reader pr = pb_sub(&f);
			uint64_t x;
			if (f.num == 1)
				while (sonde__pb_packed_next(&pr, &x) > 0)
					root = x; /* leaf first: the last is outermost */
			if (f.num == 2)
				for (int k = 0; k < 4 && sonde__pb_packed_next(&pr, &x) > 0; k++)
					v[k] = x;
		}
		if (v[2])
			loc_names(&d, root, out, cap);
	}
	free(raw);
}

/* Every reader of a spool names the [exiting] module's frame [exiting], outermost where
 * the user frames would be, with the kernel frames inside it: the report's view, folded,
 * pprof, speedscope, the SVG flame graph and the Perfetto trace. */
TEST(export_exiting_frame_named_in_every_format)
{
	char spool[PATH_MAX], ksyms[PATH_MAX], out[PATH_MAX], root[256];

	/* (test_path's buffers are reused: these are kept) */
	snprintf(spool, sizeof(spool), "%s", test_path("exiting.spool"));
	snprintf(ksyms, sizeof(ksyms), "%s", test_path("kallsyms"));
	snprintf(out, sizeof(out), "%s", test_path("exiting.out"));
	write_exiting_spool(spool, ksyms);
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .kallsyms_path = ksyms};

	/* sonde report: the view */
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_symbolizer *sym = ASSERT_NOT_NULL(sonde_symbolizer__new(&so));
	/* the symbolizer gives the recording's own name, not an unresolved address */
	struct sonde_sym_module xm = {.flags = SONDE_MODULE_EXEC | SONDE_MODULE_KERNEL,
				      .start = 0xffff800000000000,
				      .end = UINT64_MAX,
				      .pgoff = 0xffff800000000000,
				      .path = "[exiting]"};
	struct sonde_sym_frame f;
	ASSERT_INT(sonde_symbolizer__symbolize(sym, &xm, xm.start, &f, 1), ==, 1);
	ASSERT_STR_EQ(f.name, "[exiting]");
	ASSERT_UINT(f.origin, ==, SONDE_SYM_ORIGIN_RECORDING);
	ASSERT_UINT(f.kind, ==, SONDE_SYM_KERNEL);
	struct sonde_view_source_opts vo = {
		.sz = sizeof(vo), .metric = SONDE_PROFILE_METRIC_OFF_CPU, .symbolizer = sym};
	struct sonde_view *v = NULL;
	ASSERT_OK(sonde_view__from_spool(s, &vo, &v, NULL));
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT(fd >= 0);
	struct sonde_view_folded_opts fo = {.sz = sizeof(fo), .unit = 1000};
	ASSERT_OK(sonde_view__write_folded(v, fd, &fo));
	close(fd);
	sonde_view__free(v);
	sonde_symbolizer__free(sym);
	sonde_spool__close(s);
	char *text = ASSERT_NOT_NULL(test_read_file(out, NULL));
	ASSERT_STR_EQ(text, "[exiting];do_exit;exit_aio 30000\n");
	free(text);

	/* sonde convert: folded, pprof, speedscope, SVG */
	struct sonde_profile_spool_opts po = {.sz = sizeof(po), .sym = &so};
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__from_spool(spool, &po));
	struct sonde_profile_write_opts wo = {.sz = sizeof(wo),
					      .metric = SONDE_PROFILE_METRIC_OFF_CPU};
	const char *folded = export_fixture_write_opts(p, SONDE_PROFILE_FOLDED, "x.folded", &wo);
	text = ASSERT_NOT_NULL(test_read_file(folded, NULL));
	ASSERT_STR_EQ(text, "[exiting];do_exit;exit_aio;[off-cpu: D] 30000\n");
	free(text);
	const char *pprof = export_fixture_write_opts(p, SONDE_PROFILE_PPROF, "x.pb.gz", &wo);
	pprof_offcpu_root(pprof, root, sizeof(root));
	ASSERT_STR_EQ(root, "[exiting]");
	const char *json = export_fixture_write_opts(p, SONDE_PROFILE_SPEEDSCOPE, "x.json", &wo);
	text = ASSERT_NOT_NULL(test_read_file(json, NULL));
	ASSERT_CONTAINS(text, "\"name\":\"[exiting]\"");
	free(text);
	const char *svg = export_fixture_write_opts(p, SONDE_PROFILE_SVG, "x.svg", &wo);
	text = ASSERT_NOT_NULL(test_read_file(svg, NULL));
	ASSERT_CONTAINS(text, "<title>[exiting] (");
	free(text);
	sonde_profile__free(p);

	/* the Perfetto trace interns the name */
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT(fd >= 0);
	ASSERT_OK(sonde_profile__spool_to_perfetto(spool, fd, &po));
	close(fd);
	size_t len;
	char *trace = ASSERT_NOT_NULL(test_read_file(out, &len));
	/* an interned string (field 2) of exactly that name */
	ASSERT(memmem(trace, len, "\x12\x09[exiting]", 11) != NULL);
	ASSERT(memmem(trace, len, "exit_aio", 8) != NULL);
	free(trace);
}
