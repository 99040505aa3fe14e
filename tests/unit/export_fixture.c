#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <sonde/spool.h>

#include "../test.h"
#include "../util.h"
#include "export_fixture.h"

const char export_fixture_weird[] = "operator<<(a&, \"b\");\t<x>\xff'y'";

static uint32_t loc(struct sonde_profile *p, uint32_t mod, uint64_t off, const char *inner,
		    const char *outer, uint32_t line)
{
	struct sonde_sym_frame fr[2] = {
		{.name = inner,
		 .module = "/opt/split",
		 .file = "split.c",
		 .line = line,
		 .inline_depth = outer ? 1 : 0,
		 .origin = SONDE_SYM_ORIGIN_DWARF},
		{.name = outer,
		 .module = "/opt/split",
		 .file = "split.c",
		 .line = line + 10,
		 .origin = SONDE_SYM_ORIGIN_DWARF},
	};
	uint32_t id;

	ASSERT_OK(sonde_profile__add_location(p, mod, off, fr, outer ? 2 : 1, &id));
	return id;
}

struct sonde_profile *export_fixture(void)
{
	static const uint8_t bid[] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02};
	struct sonde_profile_info info = {.sz = sizeof(info),
					  .start_time_ns = 1700000000000000000ULL,
					  .start_monotonic_ns = 1000000,
					  .sample_period_ns = 1000000};
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__new(&info));
	struct sonde_profile_module exe = {.pid = 42,
					   .flags = SONDE_MODULE_EXEC,
					   .start = 0x400000,
					   .end = 0x500000,
					   .pgoff = 0x1000,
					   .build_id = bid,
					   .build_id_len = sizeof(bid),
					   .path = "/opt/split"};
	struct sonde_profile_module libc = {.pid = 42,
					    .flags = SONDE_MODULE_EXEC,
					    .start = 0x7f0000000000,
					    .end = 0x7f0000100000,
					    .path = "/usr/lib/libc.so.6"};
	uint32_t m_exe, m_libc, t1, t2;

	ASSERT_OK(sonde_profile__add_module(p, &exe, &m_exe));
	ASSERT_OK(sonde_profile__add_module(p, &libc, &m_libc));
	ASSERT_OK(sonde_profile__add_thread(p, 42, 42, "split", &t1));
	ASSERT_OK(sonde_profile__add_thread(p, 42, 43, "worker", &t2));

	uint32_t l_main = loc(p, m_exe, 0x1100, "main", NULL, 90);
	uint32_t l_run = loc(p, m_exe, 0x1200, "run", NULL, 70);
	uint32_t l_phot = loc(p, m_exe, 0x1300, "path_hot", NULL, 40);
	uint32_t l_pwarm = loc(p, m_exe, 0x1310, "path_warm", NULL, 45);
	uint32_t l_pcool = loc(p, m_exe, 0x1320, "path_cool", NULL, 50);
	uint32_t l_hot = loc(p, m_exe, 0x1400, "spin", "compute_hot", 20);
	uint32_t l_warm = loc(p, m_exe, 0x1500, "compute_warm", NULL, 30);
	uint32_t l_cool1 = loc(p, m_exe, 0x1600, "compute_cool", NULL, 35);
	uint32_t l_cool2 = loc(p, m_exe, 0x1608, "compute_cool", NULL, 36);
	uint32_t l_weird = loc(p, m_exe, 0x1700, export_fixture_weird, NULL, 1);
	uint32_t l_raw;
	ASSERT_OK(sonde_profile__add_location(p, m_libc, 0x1234, NULL, 0, &l_raw));

	const uint32_t hot[] = {l_hot, l_phot, l_run, l_main};
	const uint32_t warm[] = {l_warm, l_pwarm, l_run, l_main};
	const uint32_t cool1[] = {l_cool1, l_pcool, l_run, l_main};
	const uint32_t cool2[] = {l_cool2, l_pcool, l_run, l_main};
	const uint32_t raw[] = {l_raw, l_run, l_main};
	const uint32_t weird[] = {l_weird, l_run, l_main};
	uint64_t t = 2000000;
	/* interleaved in time as a real recording is; counts add up to the documented shape */
	for (int i = 0; i < 10; i++) {
		ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, t1, hot, 4, 5));
		ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, t2, hot, 4, 1));
		ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, t1, warm, 4, 3));
		ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, i < 5 ? t1 : t2,
						   i & 1 ? cool1 : cool2, 4, 1));
	}
	ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, t1, raw, 3, 4));
	ASSERT_OK(sonde_profile__add_sample(p, t += 1000000, t2, weird, 3, 1));
	ASSERT_UINT(sonde_profile__sample_count(p), ==, EXPORT_FIXTURE_TOTAL);
	return p;
}

const char *export_fixture_write_opts(const struct sonde_profile *p, enum sonde_profile_format fmt,
				      const char *name, const struct sonde_profile_write_opts *opts)
{
	const char *path = test_path(name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		FAIL("open %s: %s", path, strerror(errno));
	ASSERT_OK(sonde_profile__write(p, fmt, fd, opts));
	close(fd);
	return path;
}

const char *export_fixture_write(const struct sonde_profile *p, enum sonde_profile_format fmt,
				 const char *name)
{
	return export_fixture_write_opts(p, fmt, name, NULL);
}

const char *export_which(const char *name)
{
	static char found[8][PATH_MAX];
	static unsigned next;
	const char *path = getenv("PATH");
	char *slot = found[next++ % 8];

	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);
		snprintf(slot, PATH_MAX, "%.*s/%s", (int)n, path, name);
		if (access(slot, X_OK) == 0)
			return slot;
		path += n + (colon ? 1 : 0);
	}
	return NULL;
}
