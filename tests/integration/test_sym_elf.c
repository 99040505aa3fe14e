/* Symbolization from ELF symbol tables: offsets inside functions of real binaries (PIE,
 * fixed-address, shared object, stripped to .dynsym) resolve to the names nm reports. */
#include "../test.h"
#include "../util.h"
#include "sym_util.h"

/* Resolves the file offset of nm's address of name + delta and checks the name. */
static const struct sonde_sym_frame *expect_sym(struct sonde_symbolizer *s, const char *path,
						const char *nm_path, const char *name,
						uint64_t delta, int dynamic, uint8_t origin)
{
	static struct sonde_sym_frame f[8];
	struct sonde_sym_module m = sym_test_module(path);
	uint64_t va = sym_test_nm(nm_path, name, dynamic) + delta;
	uint64_t off = sym_test_vaddr_to_off(nm_path, va);
	int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 8));

	ASSERT_INT(n, >=, 1);
	ASSERT_STR_EQ(f[n - 1].name, name);
	ASSERT_STR_EQ(f[n - 1].module, path);
	ASSERT_INT(f[n - 1].kind, ==, SONDE_SYM_NATIVE);
	if (origin != 255)
		ASSERT_INT(f[n - 1].origin, ==, origin);
	ASSERT_INT(f[n - 1].inline_depth, ==, 0);
	return &f[n - 1];
}

TEST(sym_split_pie_symtab)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *split = test_prog("split");

	for (int i = 0; i < 2; i++) { /* cold, then warm */
		expect_sym(s, split, split, "compute_hot", 0, 0, 255);
		expect_sym(s, split, split, "compute_hot", 5, 0, 255);
		expect_sym(s, split, split, "compute_warm", 3, 0, 255);
		expect_sym(s, split, split, "compute_cool", 1, 0, 255);
		expect_sym(s, split, split, "path_hot", 2, 0, 255);
		expect_sym(s, split, split, "run", 4, 0, 255);
		expect_sym(s, split, split, "main", 1, 0, 255);
	}
	sonde_symbolizer__free(s);
}

TEST(sym_split_fixed_address_executable)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *exe = test_prog("sym_split_nopie");
	uint64_t va = sym_test_nm(exe, "compute_hot", 0);

	/* the case where offset and address really differ */
	ASSERT_UINT(sym_test_vaddr_to_off(exe, va), !=, va);
	expect_sym(s, exe, exe, "compute_hot", 1, 0, 255);
	expect_sym(s, exe, exe, "compute_warm", 1, 0, 255);
	expect_sym(s, exe, exe, "path_cool", 1, 0, 255);
	sonde_symbolizer__free(s);
}

TEST(sym_shared_object_symtab_and_ifunc)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *so = test_prog("libsym_shlib.so");
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .no_demangle = 1};

	expect_sym(s, so, so, "shlib_exported", 2, 0, 255);
	expect_sym(s, so, so, "shlib_local_helper", 1, 0, 255);
	expect_sym(s, so, so, "shlib_spin", 6, 0, 255);
	/* debug info names the code at an ifunc symbol for what it is, the resolver */
	expect_sym(s, so, so, "shlib_pick", 0, 0, SONDE_SYM_ORIGIN_DWARF);
	/* in the symbol table the ifunc and its resolver share an address: the global name
	 * wins */
	const char *nodebug = test_path("libnodebug.so");
	sym_test_sh("strip -g -o %s %s", nodebug, so);
	expect_sym(s, nodebug, nodebug, "shlib_ifunc", 0, 0, SONDE_SYM_ORIGIN_SYMTAB);
	expect_sym(s, nodebug, nodebug, "shlib_local_helper", 1, 0, SONDE_SYM_ORIGIN_SYMTAB);
	sonde_symbolizer__free(s);
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	expect_sym(s, so, so, "shlib_exported", 0, 0, 255);
	sonde_symbolizer__free(s);
}

TEST(sym_stripped_shared_object_uses_dynsym)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *so = test_prog("libsym_shlib.so");
	const char *copy = test_path("libstripped.so");
	struct sonde_sym_frame f[4];

	sym_test_sh("strip -o %s %s", copy, so);
	expect_sym(s, copy, copy, "shlib_exported", 3, 1, SONDE_SYM_ORIGIN_DYNSYM);
	expect_sym(s, copy, copy, "shlib_spin", 1, 1, SONDE_SYM_ORIGIN_DYNSYM);

	/* the local helper is gone with .symtab: it falls inside no dynamic symbol */
	struct sonde_sym_module m = sym_test_module(copy);
	uint64_t off = sym_test_vaddr_to_off(so, sym_test_nm(so, "shlib_local_helper", 0));
	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 4)), ==, 1);
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	char want[64];
	snprintf(want, sizeof(want), "libstripped.so+0x%llx", (unsigned long long)off);
	ASSERT_STR_EQ(f[0].name, want);
	sonde_symbolizer__free(s);
}

TEST(sym_fallback_names)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_sym_module m = sym_test_module("/nonexistent/dir/libgone.so.1");
	struct sonde_sym_frame f[2];

	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x1234, f, 2)), ==, 1);
	ASSERT_STR_EQ(f[0].name, "libgone.so.1+0x1234");
	ASSERT_STR_EQ(f[0].module, "/nonexistent/dir/libgone.so.1");
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	ASSERT(f[0].file == NULL && f[0].line == 0);
	const char *first = f[0].name;
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x1234, f, 2));
	ASSERT(f[0].name == first); /* cached, not rebuilt */

	/* an offset past every segment of a real binary */
	struct sonde_sym_module sp = sym_test_module(test_prog("split"));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &sp, 0x7fffff00, f, 2));
	ASSERT_STR_EQ(f[0].name, "split+0x7fffff00");
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);

	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize_raw(s, 4242, 0xdeadbeef, f, 2)), ==, 1);
	ASSERT_STR_EQ(f[0].name, "0xdeadbeef");
	ASSERT(f[0].module == NULL);
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);

	ASSERT_ERR(sonde_symbolizer__symbolize(s, &m, 0, f, 0), -EINVAL);
	ASSERT_ERR(sonde_symbolizer__symbolize(s, NULL, 0, f, 1), -EINVAL);
	ASSERT_ERR(sonde_symbolizer__symbolize(NULL, &m, 0, f, 1), -EINVAL);
	sonde_symbolizer__free(s);
	sonde_symbolizer__free(NULL);
}

TEST(sym_replaced_file_is_not_trusted)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	const char *copy = test_path("libreplaced.so");
	struct sonde_sym_frame f[2];

	sym_test_copy(test_prog("libsym_shlib.so"), copy);
	/* the module was recorded with another build id: the file at the path is not it */
	static const uint8_t other_id[20] = {1, 2, 3};
	struct sonde_sym_module m = sym_test_module(copy);
	m.build_id = other_id;
	m.build_id_len = sizeof(other_id);
	uint64_t off = sym_test_vaddr_to_off(copy, sym_test_nm(copy, "shlib_spin", 0));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 2));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	sonde_symbolizer__free(s);
}

TEST(sym_cxx_names_are_demangled)
{
	const char *exe = test_prog("sym_cxx");
	const char *nodebug = test_path("sym_cxx_nodebug");
	static const char frob[] = "_ZN10sonde_test6Widget4frobEi";
	struct sonde_sym_module m = sym_test_module(exe);
	struct sonde_sym_frame f[8];
	uint64_t off = sym_test_vaddr_to_off(exe, sym_test_nm(exe, frob, 0) + 4);
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));

	/* from DWARF (the linkage name) */
	int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, "sonde_test::Widget::frob(int)");
	ASSERT_INT(f[n - 1].origin, ==, SONDE_SYM_ORIGIN_DWARF);
	/* from the symbol table */
	sym_test_sh("strip -g -o %s %s", nodebug, exe);
	struct sonde_sym_module mn = sym_test_module(nodebug);
	n = ASSERT_OK(sonde_symbolizer__symbolize(s, &mn, off, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, "sonde_test::Widget::frob(int)");
	ASSERT_INT(f[n - 1].origin, ==, SONDE_SYM_ORIGIN_SYMTAB);
	uint64_t t =
		sym_test_vaddr_to_off(exe, sym_test_nm(exe, "_ZN10sonde_test5twiceIiEET_S1_", 0));
	n = ASSERT_OK(sonde_symbolizer__symbolize(s, &mn, t, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, "int sonde_test::twice<int>(int)");
	sonde_symbolizer__free(s);

	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .no_demangle = 1};
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, frob);
	n = ASSERT_OK(sonde_symbolizer__symbolize(s, &mn, off, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, frob);
	sonde_symbolizer__free(s);
}

/* PLT stubs are named "NAME@plt" at the addresses objdump labels them. */
TEST(sym_plt_stubs_are_named_as_objdump_names_them)
{
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	/* .plt past its header (a PIE, a fixed-address executable), .plt.sec (IBT) and .plt.got
	 * (__cxa_finalize, called and loaded from the GOT) */
	const char *progs[] = {test_prog("split"), test_prog("sym_split_nopie"),
			       test_prog("sym_split_ibt")};
	struct test_output o;
	int checked = 0;

	for (size_t p = 0; p < 3; p++) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "objdump -d -j .plt -j .plt.sec -j .plt.got %s",
			 progs[p]);
		const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
		test_run(&o, 30, sh);
		if (o.status == 127)
			SKIP("objdump is not installed");
		struct sonde_sym_module m = sym_test_module(progs[p]);
		for (const char *l = o.out; (l = strstr(l, "@plt>:\n")); l++) {
			const char *bol = l;
			while (bol > o.out && bol[-1] != '\n')
				bol--;
			unsigned long long va;
			char name[256], want[300];
			if (sscanf(bol, "%llx <%255[^@]@plt>:", &va, name) != 2)
				continue;
			snprintf(want, sizeof(want), "%s@plt", name);
			struct sonde_sym_frame f[4];
			/* the last byte of the stub too: 16 bytes, or 8 in .plt.got without IBT */
			const char *sec = bol;
			while (sec > o.out && strncmp(sec, "Disassembly of section ", 23))
				sec--;
			uint64_t last = !strncmp(sec, "Disassembly of section .plt.got:", 32) &&
							!strstr(progs[p], "ibt")
						? 7
						: 15;
			for (uint64_t d = 0; d <= last; d += last) {
				uint64_t off = sym_test_vaddr_to_off(progs[p], va + d);
				int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 4));
				ASSERT_INT(n, >=, 1);
				ASSERT_STR_EQ(f[n - 1].name, want);
			}
			checked++;
		}
		test_output_free(&o);
	}
	ASSERT_INT(checked, >=, 9);
	sonde_symbolizer__free(s);
}
