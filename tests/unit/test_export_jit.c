/* Exports symbolize frames no module covered (JIT code whose mapping was not seen) through
 * the JIT perf map of the process that sampled them, as sonde report does. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/profile.h>
#include <sonde/spool.h>
#include <sonde/symbolize.h>

#include "../test.h"
#include "../util.h"

static char *folded_of(const struct sonde_profile *p, const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ASSERT(fd >= 0);
	ASSERT_OK(sonde_profile__write(p, SONDE_PROFILE_FOLDED, fd, NULL));
	close(fd);
	return ASSERT_NOT_NULL(test_read_file(path, NULL));
}

static void write_spool(const char *path)
{
	struct sonde_spool_header h = {.start_time_ns = 1, .start_monotonic_ns = 1000};
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint32_t t1, t2;

	ASSERT(fd >= 0);
	struct sonde_spool_writer *w = ASSERT_NOT_NULL(
		sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd, &h));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 1000, 1111, 1111, "one", &t1));
	ASSERT_OK(sonde_spool_writer__add_thread(w, 1000, 2222, 2222, "two", &t2));
	struct sonde_spool_frame a[1] = {{0, 0x1010}};
	struct sonde_spool_frame b[2] = {{0, 0x5010}, {0, 0x5050}};
	for (int i = 0; i < 3; i++) {
		ASSERT_OK(sonde_spool_writer__add_sample(w, 2000 + i, t1, a, 1, 0));
		ASSERT_OK(sonde_spool_writer__add_sample(w, 2000 + i, t2, b, 2, 0));
	}
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	close(fd);
}

TEST(kernel_convert_names_module0_frames_from_the_samples_perf_map)
{
	const char *spool = test_path("jit.spool"), *out = test_path("jit.folded");
	static const char one[] = "1000 40 jit_one\n";
	static const char two[] = "5000 40 jit_two_leaf\n5040 40 jit_two_caller\n";

	test_write_file(test_path("perf-1111.map"), one, strlen(one));
	test_write_file(test_path("perf-2222.map"), two, strlen(two));
	write_spool(spool);
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .perf_map_dir = test_tmpdir()};
	struct sonde_profile_spool_opts po = {.sz = sizeof(po), .sym = &so};
	struct sonde_profile *p = ASSERT_NOT_NULL(sonde_profile__from_spool(spool, &po));
	char *text = folded_of(p, out);
	sonde_profile__free(p);
	ASSERT_CONTAINS(text, "jit_one 3\n");
	ASSERT_CONTAINS(text, "jit_two_caller;jit_two_leaf 3\n");
	free(text);

	/* The Perfetto export interns the same names (its frames are strings in the trace). */
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT(fd >= 0);
	ASSERT_OK(sonde_profile__spool_to_perfetto(spool, fd, &po));
	close(fd);
	size_t len;
	char *trace = ASSERT_NOT_NULL(test_read_file(out, &len));
	ASSERT(memmem(trace, len, "jit_one", 7) != NULL);
	ASSERT(memmem(trace, len, "jit_two_leaf", 12) != NULL);
	ASSERT(memmem(trace, len, "jit_two_caller", 14) != NULL);
	free(trace);

	/* --no-symbolize keeps them raw. */
	struct sonde_profile_spool_opts raw = {.sz = sizeof(raw), .no_symbolize = 1};
	p = ASSERT_NOT_NULL(sonde_profile__from_spool(spool, &raw));
	text = folded_of(p, out);
	sonde_profile__free(p);
	ASSERT_NOT_CONTAINS(text, "jit_");
	ASSERT_CONTAINS(text, "0x1010");
	free(text);
}
