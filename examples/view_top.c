/* view_top: the readers' usage pattern, using only sonde's public headers.
 *
 *   1. open a spool written by `sonde record` (or the recorder)
 *   2. have the library build a view of it: the events the filter keeps, their stacks
 *      symbolized, weighed by a metric
 *   3. ask the view for its heaviest functions, and print them
 *
 * usage: view_top [-n ROWS] [-m cpu|off-cpu|wall] [-p PID] SPOOL
 *
 * Build: make (this file becomes build/VARIANT/examples/view_top).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/spool_reader.h>
#include <sonde/view.h>
#include <sonde/view_source.h>

static int usage(void)
{
	fprintf(stderr, "usage: view_top [-n ROWS] [-m cpu|off-cpu|wall] [-p PID] SPOOL\n");
	return 2;
}

/* Step 3: the heaviest functions by self weight, with their total. */
static int print_rows(struct sonde_view *v, size_t max)
{
	struct sonde_view_rows_opts o = {.sz = sizeof(o), .sort = SONDE_VIEW_SORT_SELF, .max = max};
	const struct sonde_view_row *rows;
	size_t n, n_all;
	uint64_t events, total = sonde_view__total(v, &events);
	int err = sonde_view__rows(v, &o, &rows, &n, &n_all);

	if (err < 0)
		return err;
	printf("%" PRIu64 " events weighing %" PRIu64 "; %zu of %zu functions:\n", events, total, n,
	       n_all);
	printf("%12s %12s  %s\n", "self", "total", "function [module]");
	for (size_t i = 0; i < n; i++)
		printf("%12" PRIu64 " %12" PRIu64 "  %s [%s]\n", rows[i].self, rows[i].total,
		       rows[i].name, rows[i].module);
	return 0;
}

int main(int argc, char **argv)
{
	enum sonde_profile_metric metric = SONDE_PROFILE_METRIC_CPU;
	uint32_t pid = 0;
	long max = 10;
	int c;

	while ((c = getopt(argc, argv, "n:m:p:")) != -1) {
		if (c == 'n' && (max = strtol(optarg, NULL, 10)) > 0)
			continue;
		if (c == 'm' && sonde_profile__parse_metric(optarg, &metric) == 0)
			continue;
		if (c == 'p' && (pid = (uint32_t)strtoul(optarg, NULL, 10)) > 0)
			continue;
		return usage();
	}
	if (argc - optind != 1)
		return usage();

	/* step 1: the whole file (a file cut short keeps what it holds) */
	uint64_t off = 0;
	struct sonde_spool *s = sonde_spool__open(argv[optind], &off);
	if (!s) {
		fprintf(stderr, "view_top: %s: %s (at byte %" PRIu64 ")\n", argv[optind],
			sonde_strerror(-errno), off);
		return 1;
	}

	/* step 2: the view; a filter of one process when -p was given */
	struct sonde_view_filter f = {.sz = sizeof(f), .pids = &pid, .n_pids = pid != 0};
	struct sonde_view_source_opts o = {
		.sz = sizeof(o), .filter = &f, .metric = metric, .state_frames = 1};
	struct sonde_view *v = NULL;
	int err = sonde_view__from_spool(s, &o, &v, NULL);

	if (!err)
		err = print_rows(v, (size_t)max);
	if (err < 0)
		fprintf(stderr, "view_top: %s: %s\n", argv[optind], sonde_strerror(err));
	sonde_view__free(v);
	sonde_spool__close(s);
	return err < 0 ? 1 : 0;
}
