/* Symbolization from DWARF: source lines, inline frames with their call sites, and
 * separate debug files found by build id and by .gnu_debuglink. Expected lines come from
 * objdump's decoding of the line table and from markers in the sources. */
#include <malloc.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

static const char *basename_of(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;
	return s ? s + 1 : p;
}

TEST(sym_dwarf_inline_frames_and_call_sites)
{
	const char *exe = test_prog("sym_inline");
	const char *src = test_src_path("tests/progs/sym_inline.c");
	uint32_t body = sym_test_marker_line(src, "sym:inner-body");
	uint32_t mid_call = sym_test_marker_line(src, "sym:middle-call");
	uint32_t out_call = sym_test_marker_line(src, "sym:outer-call");
	static struct sym_test_row rows[4096];
	size_t n_rows = sym_test_lines(exe, rows, 4096);
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_sym_module m = sym_test_module(exe);
	uint64_t lo = sym_test_nm(exe, "outer_work", 0);
	int checked = 0;

	for (size_t i = 0; i < n_rows; i++) {
		uint64_t a = rows[i].addr;
		/* addresses inside outer_work whose line is the inner loop's body */
		if (a < lo || a > lo + 0x200 || sym_test_line_at(rows, n_rows, a) != body)
			continue;
		struct sonde_sym_frame f[8];
		int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, sym_test_vaddr_to_off(exe, a), f, 8));
		ASSERT_INT(n, ==, 3);
		ASSERT_STR_EQ(f[0].name, "inner_mix");
		ASSERT_INT(f[0].line, ==, body);
		ASSERT_INT(f[0].inline_depth, ==, 2);
		ASSERT_STR_EQ(f[1].name, "middle_step");
		ASSERT_INT(f[1].line, ==, mid_call);
		ASSERT_INT(f[1].inline_depth, ==, 1);
		ASSERT_STR_EQ(f[2].name, "outer_work");
		ASSERT_INT(f[2].line, ==, out_call);
		ASSERT_INT(f[2].inline_depth, ==, 0);
		for (int k = 0; k < 3; k++) {
			ASSERT_STR_EQ(basename_of(f[k].file), "sym_inline.c");
			ASSERT_INT(f[k].origin, ==, SONDE_SYM_ORIGIN_DWARF);
			ASSERT_STR_EQ(f[k].module, exe);
		}
		/* with room for one frame only, the real function is kept */
		ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize(s, &m, sym_test_vaddr_to_off(exe, a), f, 1)),
			   ==, 1);
		ASSERT_STR_EQ(f[0].name, "outer_work");
		ASSERT_INT(f[0].inline_depth, ==, 0);
		checked++;
	}
	ASSERT_INT(checked, >=, 1);
	sonde_symbolizer__free(s);
}

/* compute_hot and friends: name, file and the line objdump decodes at a few addresses. */
static void check_split_lines(struct sonde_symbolizer *s, const char *path, const char *orig,
			      const struct sonde_sym_module *m, uint8_t origin)
{
	static struct sym_test_row rows[4096];
	size_t n_rows = sym_test_lines(orig, rows, 4096);
	static const char *const fns[] = {"compute_hot", "compute_warm", "path_cool", "run"};

	for (size_t i = 0; i < 4; i++) {
		for (uint64_t d = 0; d < 12; d += 3) {
			uint64_t va = sym_test_nm(orig, fns[i], 0) + d;
			struct sonde_sym_frame f[8];
			int n = ASSERT_OK(
				sonde_symbolizer__symbolize(s, m, sym_test_vaddr_to_off(orig, va), f, 8));
			ASSERT_STR_EQ(f[n - 1].name, fns[i]);
			ASSERT_INT(f[n - 1].origin, ==, origin);
			ASSERT_STR_EQ(basename_of(f[0].file), "split.c");
			ASSERT_INT(f[0].line, ==, sym_test_line_at(rows, n_rows, va));
			ASSERT_STR_EQ(f[0].module, path);
		}
	}
}

TEST(sym_dwarf_lines_of_split)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *split = test_prog("split");
	struct sonde_sym_module m = sym_test_module(split);

	check_split_lines(s, split, split, &m, SONDE_SYM_ORIGIN_DWARF);
	sonde_symbolizer__free(s);
}

static void make_stripped(const char *orig, const char *stripped, const char *debug)
{
	sym_test_sh("objcopy --only-keep-debug %s %s", orig, debug);
	sym_test_sh("strip --strip-all -o %s %s", stripped, orig);
}

TEST(sym_debug_file_by_build_id)
{
	const char *split = test_prog("split");
	char hex[130], dir[2048], path[4096];

	sym_test_build_id_hex(split, hex, sizeof(hex));
	snprintf(dir, sizeof(dir), "%s/debug/.build-id/%.2s", test_tmpdir(), hex);
	sym_test_sh("mkdir -p %s %s/bin", dir, test_tmpdir());
	snprintf(path, sizeof(path), "%s/%s.debug", dir, hex + 2);
	const char *stripped = test_path("bin/split");
	make_stripped(split, stripped, path);

	/* without the debug directory: nothing but the fallback */
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_sym_module m = sym_test_module(stripped);
	struct sonde_sym_frame f[4];
	uint64_t off = sym_test_vaddr_to_off(split, sym_test_nm(split, "compute_hot", 0));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 4));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	sonde_symbolizer__free(s);

	char dirs[4096];
	snprintf(dirs, sizeof(dirs), "/nonexistent:%s/debug", test_tmpdir());
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .debug_dirs = dirs};
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	check_split_lines(s, stripped, split, &m, SONDE_SYM_ORIGIN_DWARF);

	/* the image itself is gone: the recorded build id alone finds the debug file */
	uint8_t id[64];
	size_t id_len = strlen(hex) / 2;
	for (size_t i = 0; i < id_len; i++)
		sscanf(hex + 2 * i, "%2hhx", &id[i]);
	struct sonde_sym_module gone = sym_test_module("/nonexistent/split");
	gone.build_id = id;
	gone.build_id_len = id_len;
	/* as recorded: the executable mapping starts at its segment's page */
	uint64_t text = sym_test_nm(split, "compute_hot", 0);
	gone.pgoff = sym_test_vaddr_to_off(split, text) & ~0xfffULL;
	check_split_lines(s, "/nonexistent/split", split, &gone, SONDE_SYM_ORIGIN_DWARF);
	sonde_symbolizer__free(s);
}

TEST(sym_debug_file_by_debuglink_with_crc)
{
	const char *split = test_prog("split");
	const char *stripped = test_path("split");
	char debug[4096];

	sym_test_sh("mkdir -p %s/.debug", test_tmpdir());
	snprintf(debug, sizeof(debug), "%s/.debug/split.dbg", test_tmpdir());
	make_stripped(split, stripped, debug);
	sym_test_sh("objcopy --add-gnu-debuglink=%s %s", debug, stripped);
	/* no build-id directory knows this file: the link must find it */
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .debug_dirs = "/nonexistent"};
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	struct sonde_sym_module m = sym_test_module(stripped);
	check_split_lines(s, stripped, split, &m, SONDE_SYM_ORIGIN_DWARF);
	sonde_symbolizer__free(s);

	/* a debug file of the same name but other contents fails the CRC check */
	sym_test_sh("objcopy --only-keep-debug %s %s", test_prog("sym_split_nopie"), debug);
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	struct sonde_sym_frame f[4];
	uint64_t off = sym_test_vaddr_to_off(split, sym_test_nm(split, "compute_hot", 0));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 4));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	sonde_symbolizer__free(s);
}

TEST(sym_warm_lookups_allocate_nothing)
{
#if defined(__SANITIZE_ADDRESS__)
	SKIP("ASan replaces glibc's allocator, which mallinfo2 measures");
#endif
	const char *inl = test_prog("sym_inline"), *split = test_prog("split");
	const char *cxx = test_prog("sym_cxx");
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_sym_module mods[3] = {sym_test_module(inl), sym_test_module(split),
					   sym_test_module(cxx)};
	struct sonde_sym_frame f[16];
	uint64_t offs[3];

	offs[0] = sym_test_vaddr_to_off(inl, sym_test_nm(inl, "outer_work", 0));
	offs[1] = sym_test_vaddr_to_off(split, sym_test_nm(split, "compute_hot", 0));
	offs[2] = sym_test_vaddr_to_off(cxx, sym_test_nm(cxx, "_ZN10sonde_test6Widget4frobEi", 0));
	/* warm: every module loaded, every unit indexed, every name demangled, every
	 * fallback name made once */
	for (int pass = 0; pass < 2; pass++) {
		struct mallinfo2 before = mallinfo2();
		for (int k = 0; k < 3; k++)
			for (uint64_t d = 0; d < 0x80; d++)
				ASSERT_OK(sonde_symbolizer__symbolize(s, &mods[k], offs[k] + d, f, 16));
		ASSERT_OK(sonde_symbolizer__symbolize(s, &mods[1], 0x7fffff00, f, 16)); /* fallback */
		ASSERT_OK(sonde_symbolizer__symbolize_raw(s, 1, 0x1234, f, 16));
		struct mallinfo2 after = mallinfo2();
		if (pass == 1)
			ASSERT_UINT(after.uordblks + after.hblkhd, ==,
				    before.uordblks + before.hblkhd);
	}
	/* the measurement itself sees an allocation */
	struct mallinfo2 b = mallinfo2();
	void *volatile probe = malloc(4096);
	struct mallinfo2 a = mallinfo2();
	ASSERT_UINT(a.uordblks + a.hblkhd, >, b.uordblks + b.hblkhd);
	free(probe);
	sonde_symbolizer__free(s);
}
