/* The recorder's filters part: what a system-wide recording records (the pid, tid and comm
 * filters, the process check and its answers) and the tracepoint filter of every event
 * (system.c). Internal. */
#ifndef SONDE_RECORD_FILTERS_H
#define SONDE_RECORD_FILTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/u64map.h"

struct rec_filters {
	pid_t self_pid;	    /* the recorder's own process: never recorded */
	pid_t *filter_pids; /* record only these and their descendants; NULL: every process */
	size_t n_filter_pids;
	/* the events are per CPU for a launched command's tree, filter_pids, and not for -a
	 * (sonde__rec_system_launched) */
	bool launched;
	pid_t *filter_tids; /* and these threads, and what they create */
	size_t n_filter_tids;
	char (*filter_comms)[16]; /* and the tasks so named at their sample */
	size_t n_filter_comms;
	bool (*process_check)(void *ctx, pid_t pid); /* opts.process_check */
	void *process_check_ctx;
	struct u64map checked; /* pid -> CHECK_ALLOWED / CHECK_REFUSED: process_check's answer */
	/* The tracepoint's filter (opts.tracepoint_filter), set on every event; NULL: none */
	char *tracepoint_filter;
};

#endif
