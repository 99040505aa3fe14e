/* Fuzz target: any bytes as a spool, through the readers' view (sonde_view__from_spool,
 * without a symbolizer, which would open whatever paths the input names) under every
 * metric, then every grouping, sort, figure, diff and folded writer of the view; and the
 * same bytes through a tail into a live view, which must add up to what the spool's view
 * does (under wall and off-CPU only where the spool's view does not weigh samples by
 * the tasks' time on the CPUs, sonde__acct_weights_known: with the switches, or every
 * switch-out known, the live view weighs a task's samples by the sample period or its
 * stays, the spool's view by its life, which a malformed file can make differ: tids
 * reused, exits, stays before a thread's definition; and the spool's view weighs an
 * interval a loss cut less the thread's stays within it, which the live view does not
 * have; the live view is still built and read). The first byte chooses a filter and the
 * state frames; the rest is the spool. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/log.h>
#include <sonde/spool_reader.h>
#include <sonde/tail.h>
#include <sonde/view.h>
#include <sonde/view_source.h>

#include "export/acct.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every question a reader asks of a view. */
static void read_view(struct sonde_view *v, int null_fd)
{
	struct sonde_view_stats st = {.sz = sizeof(st)};
	const struct sonde_view_row *rows;
	size_t n, n_all;

	sonde_view__stats(v, &st);
	for (int g = SONDE_VIEW_BY_FUNCTION; g <= SONDE_VIEW_BY_CPU; g++)
		for (int s = SONDE_VIEW_SORT_SELF; s <= SONDE_VIEW_SORT_PROCESS; s++) {
			struct sonde_view_rows_opts ro = {.sz = sizeof(ro),
							  .group = (enum sonde_view_group)g,
							  .sort = (enum sonde_view_sort)s,
							  .max = 5};
			sonde_view__rows(v, &ro, &rows, &n, &n_all);
		}
	for (int r = SONDE_VIEW_ROOTS_NONE; r <= SONDE_VIEW_ROOTS_THREAD; r++) {
		struct sonde_view_folded_opts fo = {
			.sz = sizeof(fo), .roots = (enum sonde_view_roots)r, .unit = 1000};
		sonde_view__write_folded(v, null_fd, &fo);
	}
}

/* The live view of the same bytes, tailed from a memfd, must weigh what v weighs (when
 * same: else it is only read). */
static void check_live(const uint8_t *file, size_t len, const struct sonde_view_source_opts *o,
		       const struct sonde_view *v, bool same, int null_fd)
{
	struct sonde_tail_batch b = {.sz = sizeof(b)};
	int fd = memfd_create("fuzz-view", MFD_CLOEXEC), n;

	if (fd < 0 || write(fd, file, len) != (ssize_t)len) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct sonde_tail *t = sonde_tail__open_fd(fd, NULL);
	struct sonde_view_live *l = t ? sonde_view_live__new(t, 0, o) : NULL;
	while (l && (n = sonde_tail__poll(t, 0, 0, &b)) > 0)
		if (sonde_view_live__add(l, &b) < 0)
			__builtin_trap();
	struct sonde_view *lv = l ? sonde_view_live__view(l) : NULL;
	uint64_t events, live_events;
	if (lv && same &&
	    (sonde_view__total(lv, &live_events) != sonde_view__total(v, &events) ||
	     live_events != events))
		__builtin_trap();
	if (lv && !same)
		read_view(lv, null_fd);
	sonde_view_live__free(l);
	sonde_tail__free(t);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int null_fd = -1;
	struct sonde_view *views[SONDE_PROFILE_METRIC_WALL + 1] = {0};

	/* Malformed input is the normal case here: its error messages are noise. */
	sonde_log__set_level(SONDE_LOG_OFF);
	if (null_fd < 0)
		null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (size < 1 || null_fd < 0)
		return 0;
	uint8_t ctl = data[0];
	struct sonde_spool *s = sonde_spool__open_mem(data + 1, size - 1, NULL);
	if (!s)
		return 0;
	/* the control byte: a pid or tid filter of its low bits, a time range from the
	 * first sample, state frames */
	uint32_t id = ctl & 0x0f;
	struct sonde_spool_info in;
	sonde_spool__get_info(s, &in);
	struct sonde_view_filter f = {.sz = sizeof(f),
				      .pids = &id,
				      .n_pids = (ctl & 0x30) == 0x10,
				      .tids = &id,
				      .n_tids = (ctl & 0x30) == 0x20,
				      .time_range = (ctl & 0x30) == 0x30,
				      .time_from_ns = in.first_time_ns,
				      .time_to_ns = in.first_time_ns + id * 1000000ull};
	for (int m = SONDE_PROFILE_METRIC_CPU; m <= SONDE_PROFILE_METRIC_WALL; m++) {
		struct sonde_view_source_opts o = {.sz = sizeof(o),
						   .filter = &f,
						   .metric = (enum sonde_profile_metric)m,
						   .state_frames = (ctl & 0x40) != 0,
						   .no_symbolize = 1};
		struct sonde_view_source_stats st = {.sz = sizeof(st)};
		if (sonde_view__from_spool(s, &o, &views[m], &st) < 0)
			continue;
		read_view(views[m], null_fd);
		check_live(data + 1, size - 1, &o, views[m],
			   m == SONDE_PROFILE_METRIC_CPU || !sonde__acct_weights_known(s), null_fd);
	}
	const struct sonde_view_diff_row *diff;
	size_t n;
	for (int m = SONDE_PROFILE_METRIC_OFF_CPU; m <= SONDE_PROFILE_METRIC_WALL; m++)
		if (views[m] && views[m - 1])
			sonde_view__diff(views[m - 1], views[m], &diff, &n);
	for (int m = SONDE_PROFILE_METRIC_CPU; m <= SONDE_PROFILE_METRIC_WALL; m++)
		sonde_view__free(views[m]);
	sonde_spool__close(s);
	return 0;
}
