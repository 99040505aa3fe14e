/* JIT perf maps (perf's parsing and override rules, re-read as they grow), kernel symbols
 * from kallsyms, and the vDSO. */
#include <fcntl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

static void append(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);

	ASSERT_INT(fd, >=, 0);
	ASSERT_INT(write(fd, text, strlen(text)), ==, (long long)strlen(text));
	close(fd);
}

static const char *raw_name(struct sonde_symbolizer *s, uint32_t pid, uint64_t addr,
			    uint8_t *origin)
{
	struct sonde_sym_frame f[2];

	ASSERT_INT(ASSERT_OK(sonde_symbolizer__symbolize_raw(s, pid, addr, f, 2)), ==, 1);
	*origin = f[0].origin;
	if (f[0].origin == SONDE_SYM_ORIGIN_PERF_MAP) {
		ASSERT_INT(f[0].kind, ==, SONDE_SYM_JIT);
		ASSERT_CONTAINS(f[0].module, "perf-4242.map");
	}
	return f[0].name;
}

#define EXPECT_RAW(s, addr, want)                                                                  \
	do {                                                                                       \
		uint8_t o_;                                                                        \
		ASSERT_STR_EQ(raw_name(s, 4242, addr, &o_), want);                                 \
		ASSERT_INT(o_, ==, SONDE_SYM_ORIGIN_PERF_MAP);                                     \
	} while (0)

TEST(sym_perf_map_rules_and_growth)
{
	const char *map = test_path("perf-4242.map");
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .perf_map_dir = test_tmpdir()};
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	uint8_t origin;

	append(map, "1000 100 first_fn\n"
		    "0x1100 0x80 second fn with spaces\n"
		    "1040 20 override_inside_first\n"
		    "2000 0 zero_sized\n"
		    "2100 10 ab\n"
		    "3000 10 Lambda$1/0x1234::apply\n");
	EXPECT_RAW(s, 0x1000, "first_fn");
	EXPECT_RAW(s, 0x103f, "first_fn");
	EXPECT_RAW(s, 0x1040, "override_inside_first"); /* the later line wins */
	EXPECT_RAW(s, 0x105f, "override_inside_first");
	EXPECT_RAW(s, 0x1060, "first_fn");
	EXPECT_RAW(s, 0x1100, "second fn with spaces"); /* the name is the rest of the line */
	EXPECT_RAW(s, 0x117f, "second fn with spaces");
	EXPECT_RAW(s, 0x2000, "zero_sized"); /* size 0 reaches the next entry */
	EXPECT_RAW(s, 0x2100, "zero_sized"); /* "ab" is too short a name for perf */
	EXPECT_RAW(s, 0x3005, "Lambda$1/0x1234::apply");
	ASSERT_STR_EQ(raw_name(s, 4242, 0x3010, &origin), "0x3010");
	ASSERT_INT(origin, ==, SONDE_SYM_ORIGIN_NONE);
	ASSERT_STR_EQ(raw_name(s, 4243, 0x1000, &origin), "0x1000"); /* no map for that pid */

	/* the JIT appends: new code, and code memory reused for another method */
	append(map, "1000 10 recompiled\n5000 40 new_method\n");
	EXPECT_RAW(s, 0x1005, "recompiled");
	EXPECT_RAW(s, 0x1010, "first_fn");
	EXPECT_RAW(s, 0x5020, "new_method");
	/* a line still being written is read again once complete */
	append(map, "6000 10 part");
	EXPECT_RAW(s, 0x6000, "part");
	append(map, "ial_name\n");
	EXPECT_RAW(s, 0x6000, "partial_name");

	/* through a JIT module: the offset is placed at the mapping's address */
	struct sonde_sym_module m = {.pid = 4242,
				     .flags = SONDE_MODULE_JIT | SONDE_MODULE_EXEC,
				     .start = 0x5000,
				     .end = 0x6000,
				     .pgoff = 0,
				     .path = "//anon"};
	struct sonde_sym_frame f[2];
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x30, f, 2));
	ASSERT_STR_EQ(f[0].name, "new_method");
	ASSERT_INT(f[0].kind, ==, SONDE_SYM_JIT);
	ASSERT_OK(sonde_symbolizer__symbolize(s, &m, 0x800, f, 2));
	ASSERT_STR_EQ(f[0].name, "anon+0x800");
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);

	/* the pid is reused by a process with another map of the same size */
	const char *old_name = raw_name(s, 4242, 0x5000, &origin);
	unlink(map);
	append(map, "1000 100 first_fn\n5000 40 other_method\n");
	ASSERT_INT(ASSERT_OK(sonde_symbolizer__forget_pid(s, 4242)), ==, 1);
	EXPECT_RAW(s, 0x5000, "other_method");
	ASSERT_STR_EQ(old_name, "new_method"); /* still valid */
	ASSERT_INT(ASSERT_OK(sonde_symbolizer__forget_pid(s, 999)), ==, 0);
	sonde_symbolizer__free(s);
}

TEST(sym_kallsyms_file_and_live)
{
	const char *ks = test_path("kallsyms");
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .kallsyms_path = ks};
	struct sonde_sym_module k = {.flags = SONDE_MODULE_KERNEL, .path = "[kernel.kallsyms]"};
	struct sonde_sym_frame f[2];

	append(ks, "ffffffff81000000 T _stext\n"
		   "ffffffff81000100 t helper_fn\n"
		   "ffffffff81000200 D some_data\n"
		   "ffffffff81000300 T after_data\n"
		   "ffffffffc0100000 t mod_fn\t[my_mod]\n"
		   "0000000000000000 T hidden\n"
		   "garbage line\n");
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &k, 0xffffffff81000105, f, 2));
	ASSERT_STR_EQ(f[0].name, "helper_fn");
	ASSERT_STR_EQ(f[0].module, "[kernel.kallsyms]");
	ASSERT_INT(f[0].kind, ==, SONDE_SYM_KERNEL);
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_KALLSYMS);
	ASSERT_OK(sonde_symbolizer__symbolize(s, &k, 0xffffffff81000250, f, 2)); /* data is not code */
	ASSERT_STR_EQ(f[0].name, "helper_fn");
	ASSERT_OK(sonde_symbolizer__symbolize(s, &k, 0xffffffffc0100010, f, 2));
	ASSERT_STR_EQ(f[0].name, "mod_fn");
	ASSERT_STR_EQ(f[0].module, "[my_mod]");
	ASSERT_OK(sonde_symbolizer__symbolize(s, &k, 0x1000, f, 2));
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_NONE);
	ASSERT_INT(f[0].kind, ==, SONDE_SYM_KERNEL);
	sonde_symbolizer__free(s);

	/* the live kernel: a well-known function, its address read from /proc/kallsyms */
	char *text = test_read_file("/proc/kallsyms", NULL);
	ASSERT_NOT_NULL(text);
	unsigned long long addr = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char type, name[256];
		unsigned long long a;
		if (sscanf(line, "%llx %c %255s", &a, &type, name) == 3 &&
		    !strcmp(name, "schedule") && (type == 'T' || type == 't'))
			addr = a;
	}
	free(text);
	if (!addr)
		SKIP("/proc/kallsyms shows no addresses (no privilege, or kptr_restrict)");
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	ASSERT_OK(sonde_symbolizer__symbolize(s, &k, addr + 4, f, 2));
	ASSERT_STR_EQ(f[0].name, "schedule");
	ASSERT_INT(f[0].origin, ==, SONDE_SYM_ORIGIN_KALLSYMS);
	sonde_symbolizer__free(s);
}

TEST(sym_vdso_from_our_own_image)
{
	const unsigned char *base = (const unsigned char *)getauxval(AT_SYSINFO_EHDR);
	char maps_line[512] = "";
	struct sonde_sym_frame f[4];

	if (!base)
		SKIP("no vDSO in this process");
	FILE *maps = fopen("/proc/self/maps", "r");
	ASSERT_NOT_NULL(maps);
	while (fgets(maps_line, sizeof(maps_line), maps))
		if (strstr(maps_line, "[vdso]"))
			break;
	fclose(maps);
	ASSERT_CONTAINS(maps_line, "[vdso]");
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	struct sonde_sym_module m = {.flags = SONDE_MODULE_VDSO | SONDE_MODULE_EXEC,
				     .pid = (uint32_t)getpid(),
				     .path = "[vdso]"};
	/* the image has no file: some offset of its code must resolve to clock_gettime
	 * through our own copy of the vDSO */
	int found = 0;
	for (uint64_t off = 0; off < 0x2000 && !found; off += 4) {
		int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &m, off, f, 4));
		if (f[n - 1].origin != SONDE_SYM_ORIGIN_NONE &&
		    strstr(f[n - 1].name, "clock_gettime"))
			found = 1;
	}
	ASSERT(found);
	sonde_symbolizer__free(s);
}
