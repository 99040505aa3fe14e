/* The accounting invariants of an -a --off-cpu recording (acct_util.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sonde/spool_reader.h>

#include "../test.h"
#include "acct_util.h"

bool acct_check_spool(const char *spool, bool expect_switches)
{
	struct sonde_spool *s = ASSERT_NOT_NULL(sonde_spool__open(spool, NULL));
	struct sonde_spool_info in;
	struct sonde_spool_sample smp;
	uint32_t n = sonde_spool__switch_cpus(s);

	sonde_spool__get_info(s, &in);
	if (!n) {
		sonde_spool__close(s);
		if (expect_switches)
			FAIL("%s has no CPU switches", spool);
		return false;
	}
	/* the window: the first to the last switch, sample or interval end */
	uint64_t start = sonde_spool__first_switch_ns(s), end = sonde_spool__last_switch_ns(s);
	if (in.samples && in.first_time_ns < start)
		start = in.first_time_ns;
	if (in.samples && in.last_time_ns > end)
		end = in.last_time_ns;
	uint64_t *sampled = ASSERT_NOT_NULL(calloc(n, sizeof(*sampled)));
	for (uint64_t i = 0; sonde_spool__get_sample(s, i, &smp) == 0; i++)
		if (smp.cpu < n)
			sampled[smp.cpu] += in.header.sample_period_ns;
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t cpus = 0;
	for (uint32_t c = 0; c < n; c++) {
		struct sonde_spool_cpu_time t;
		int err = sonde_spool__get_cpu_time(s, c, start, end, &t);
		if (err == -ENOENT)
			continue;
		ASSERT_OK(err);
		cpus++;
		printf("cpu %u: busy %.3f s, idle %.3f s, unknown %.3f s of %.3f s; samples %.3f "
		       "s; %llu switches, %llu inferred\n",
		       c, t.busy_ns / 1e9, t.idle_ns / 1e9, t.unknown_ns / 1e9, (end - start) / 1e9,
		       sampled[c] / 1e9, (unsigned long long)t.switches,
		       (unsigned long long)t.inferred);
		ASSERT_UINT(t.busy_ns + t.idle_ns + t.unknown_ns, ==, end - start);
		/* a sample weighs a period: allow a few periods over the busy time */
		ASSERT_UINT(sampled[c], <=, t.busy_ns + t.unknown_ns + 5 * in.header.sample_period_ns);
	}
	ASSERT_UINT(cpus, ==, (uint32_t)online);
	free(sampled);
	sonde_spool__close(s);
	return true;
}
