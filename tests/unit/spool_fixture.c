#include <sonde/spool.h>

#include "spool_fixture.h"
#include "../test.h"

int spool_fixture_write(void *ctx, const void *p, size_t n)
{
	sonde__buf_append(ctx, p, n);
	return buf_error(ctx);
}

static uint32_t fixture_module(struct sonde_spool_writer *w, uint32_t pid, uint64_t start,
			       const char *path)
{
	static const uint8_t bid[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	struct sonde_spool_module_def m = {.pid = pid,
					   .flags = SONDE_MODULE_EXEC,
					   .start = start,
					   .end = start + 0x10000,
					   .pgoff = 0x1000,
					   .dev = 0x801,
					   .inode = start >> 12,
					   .build_id = bid,
					   .build_id_len = sizeof(bid),
					   .path = path};
	uint32_t id;

	ASSERT_OK(sonde_spool_writer__add_module(w, 10, &m, &id));
	return id;
}

void spool_fixture_small(struct buf *out, int n_samples, int finish)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 5000000000ULL, 1001001};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, out, &h));
	uint32_t t1, t2, t3 = 0, exe, libc, exe2 = 0;
	uint64_t t = 5000000000ULL;

	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 100, 100, "main", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, t, 100, 101, "worker", &t2));
	exe = fixture_module(w, 100, 0x400000, "/usr/bin/prog");
	libc = fixture_module(w, 100, 0x7f0000000000ULL, "/lib/libc.so.6");
	for (int i = 0; i < n_samples; i++) {
		t += 1001001 + (uint64_t)(i % 3);
		if (i == n_samples / 2) {
			/* pid 100 execs: its modules retire, new ones and a new thread appear */
			ASSERT_OK(sonde_spool_writer__retire_process(w, t, 100));
			exe2 = fixture_module(w, 100, 0x500000, "/usr/bin/other");
			ASSERT_OK(sonde_spool_writer__add_thread(w, t, 100, 100, "other", &t3));
		}
		struct sonde_spool_frame st[4];
		size_t n = 0;
		uint32_t flags = 0;
		if (i < n_samples / 2) {
			st[n++] = (struct sonde_spool_frame){libc, 0x1000 + (uint64_t)(i % 5)};
			st[n++] = (struct sonde_spool_frame){exe, 0x2000 + (uint64_t)(i % 2) * 8};
			st[n++] = (struct sonde_spool_frame){exe, 0x3000};
		} else {
			st[n++] =
				(struct sonde_spool_frame){0, 0xffffffff81000000ULL + (uint64_t)i};
			st[n++] = (struct sonde_spool_frame){exe2, 0x4000};
			flags = SONDE_SAMPLE_KERNEL;
		}
		if (i % 7 == 3) {
			n = 0; /* empty stack */
			flags = 0;
		}
		if (i % 11 == 5)
			flags |= SONDE_SAMPLE_TRUNCATED;
		uint32_t thread = i < n_samples / 2 ? (i % 4 ? t1 : t2) : t3;
		ASSERT_OK(sonde_spool_writer__add_sample(w, t, thread, st, n, flags));
	}
	if (finish)
		ASSERT_OK(sonde_spool_writer__finish(w));
	else
		ASSERT_OK(sonde_spool_writer__flush(w));
	sonde_spool_writer__free(w);
}
