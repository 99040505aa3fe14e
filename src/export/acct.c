/* The accounting tables of a spool (acct.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/acct.h"

struct build {
	const struct sonde_spool *s;
	struct sonde_spool_info info;
	const struct sonde_profile_spool_opts *f; /* NULL: no filter */
	size_t cap;
	struct sonde_acct *a;
};

static bool id_in(const uint32_t *v, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == id)
			return true;
	return false;
}

/* Whether thread t passes the pid, tid and comm filters. */
static bool thread_kept(const struct build *b, const struct sonde_spool_thread *t)
{
	const struct sonde_profile_spool_opts *f = b->f;
	size_t i;

	if (!f)
		return true;
	if (f->n_pids && !id_in(f->pids, f->n_pids, t->pid))
		return false;
	if (f->n_tids && !id_in(f->tids, f->n_tids, t->tid))
		return false;
	for (i = 0; i < f->n_comms && strcmp(f->comms[i], t->comm); i++)
		;
	return !f->n_comms || i < f->n_comms;
}

/* Whether what t took at time_ns on cpu passes every filter. */
static bool kept(const struct build *b, const struct sonde_spool_thread *t, uint64_t time_ns,
		 uint32_t cpu)
{
	const struct sonde_profile_spool_opts *f = b->f;
	size_t i;

	if (!thread_kept(b, t))
		return false;
	if (!f)
		return true;
	for (i = 0; i < f->n_cpus && (uint32_t)f->cpus[i] != cpu; i++)
		;
	if (f->n_cpus && i == f->n_cpus)
		return false;
	if (f->time_range) {
		double at = ((double)time_ns - (double)b->info.header.start_monotonic_ns) / 1e9;
		if (at < f->time_from_s || (f->time_to_s >= 0 && at > f->time_to_s))
			return false;
	}
	return true;
}

/* The name of process t->pid: its main thread's (the first thread whose tid is the pid),
 * else t's own. */
static const char *process_comm(const struct build *b, const struct sonde_spool_thread *t)
{
	struct sonde_spool_thread m;

	for (uint32_t i = 1; i <= b->info.threads; i++)
		if (sonde_spool__get_thread(b->s, i, &m) == 0 && m.tid == t->pid &&
		    m.pid == t->pid)
			return m.comm;
	return t->comm;
}

/* The row of process t->pid, added on first use; NULL when out of memory. */
static struct sonde_acct_row *row_of(struct build *b, const struct sonde_spool_thread *t)
{
	struct sonde_acct *a = b->a;

	for (size_t i = 0; i < a->n_rows; i++)
		if (a->rows[i].pid == t->pid)
			return &a->rows[i];
	if (a->n_rows == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		struct sonde_acct_row *v = realloc(a->rows, cap * sizeof(*v));
		if (!v)
			return NULL;
		a->rows = v;
		b->cap = cap;
	}
	struct sonde_acct_row *row = &a->rows[a->n_rows++];
	*row = (struct sonde_acct_row){.pid = t->pid};
	snprintf(row->comm, sizeof(row->comm), "%s", process_comm(b, t));
	return row;
}

static int by_total(const void *x, const void *y)
{
	const struct sonde_acct_row *p = x, *q = y;

	if (p->total != q->total)
		return p->total < q->total ? 1 : -1;
	return p->pid < q->pid ? -1 : p->pid > q->pid;
}

void sonde__acct_window(const struct sonde_spool *s, uint64_t *start, uint64_t *end)
{
	struct sonde_spool_info in;
	struct sonde_spool_offcpu o;
	uint64_t first = sonde_spool__first_switch_ns(s);

	sonde_spool__get_info(s, &in);
	*start = in.header.start_monotonic_ns;
	*end = sonde_spool__last_switch_ns(s);
	if (first < *start)
		*start = first;
	if (in.samples && in.first_time_ns < *start)
		*start = in.first_time_ns;
	if (in.samples && in.last_time_ns > *end)
		*end = in.last_time_ns;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &o) == 0; i++)
		if (o.switch_in_ns > *end)
			*end = o.switch_in_ns;
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &o) == 0; i++)
		if (o.switch_in_ns > *end)
			*end = o.switch_in_ns;
}

/* Each on-CPU sample weighs the sample period, on its process's row and its CPU. */
static int add_samples(struct build *b)
{
	struct sonde_acct *a = b->a;
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;

	for (uint64_t i = 0; sonde_spool__get_sample(b->s, i, &smp) == 0; i++) {
		if (sonde_spool__get_thread(b->s, smp.thread, &t) < 0 ||
		    !kept(b, &t, smp.time_ns, smp.cpu))
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_ON] += a->period_ns;
		uint32_t c = smp.cpu < SONDE_ACCT_MAX_CPU ? smp.cpu : SONDE_ACCT_MAX_CPU;
		a->cpu_ns[c] += a->period_ns;
		if (c < SONDE_ACCT_MAX_CPU && c >= a->cpu_max)
			a->cpu_max = c + 1;
	}
	return 0;
}

/* An interval weighs its length, in the state the thread left the CPU in up to its
 * wakeup and runnable from there (waiting for a CPU), as a scheduler's own accounting
 * has it; one a loss cut (unknown) is unknown throughout. */
static int add_intervals(struct build *b, bool unknown)
{
	struct sonde_spool_offcpu o;
	struct sonde_spool_thread t;

	for (uint64_t i = 0;; i++) {
		if ((unknown ? sonde_spool__get_unknown(b->s, i, &o)
			     : sonde_spool__get_offcpu(b->s, i, &o)) < 0)
			return 0;
		if (sonde_spool__get_thread(b->s, o.thread, &t) < 0 ||
		    !kept(b, &t, o.switch_out_ns, o.cpu))
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		uint64_t until = o.switch_in_ns;
		if (!unknown && o.state != SONDE_OFFCPU_RUNNABLE && o.wakeup_ns &&
		    o.wakeup_ns >= o.switch_out_ns && o.wakeup_ns <= o.switch_in_ns) {
			until = o.wakeup_ns;
			row->ns[SONDE_ACCT_R] += o.switch_in_ns - o.wakeup_ns;
		}
		row->ns[unknown ? SONDE_ACCT_UNKNOWN : SONDE_ACCT_R + o.state] +=
			until - o.switch_out_ns;
	}
}

/* Short intervals: by thread only (they have no time nor CPU), as the metrics count them. */
static int add_shorts(struct build *b)
{
	struct sonde_spool_offcpu_short sh;
	struct sonde_spool_thread t;

	for (uint64_t i = 0; sonde_spool__get_offcpu_short(b->s, i, &sh) == 0; i++) {
		if (sonde_spool__get_thread(b->s, sh.thread, &t) < 0 || !thread_kept(b, &t))
			continue;
		struct sonde_acct_row *row = row_of(b, &t);
		if (!row)
			return -ENOMEM;
		row->ns[SONDE_ACCT_SHORT] += sh.total_ns;
	}
	return 0;
}

/* Each CPU's busy, idle and unknown time by its switches, over the window. */
static int add_cpus(struct build *b)
{
	struct sonde_acct *a = b->a;
	uint32_t n = sonde_spool__switch_cpus(b->s);

	if (!n)
		return 0;
	sonde__acct_window(b->s, &a->window_start_ns, &a->window_end_ns);
	a->cpus = calloc(n, sizeof(*a->cpus));
	if (!a->cpus)
		return -ENOMEM;
	for (uint32_t c = 0; c < n; c++) {
		struct sonde_spool_cpu_time t;
		if (sonde_spool__get_cpu_time(b->s, c, a->window_start_ns, a->window_end_ns, &t) <
		    0)
			continue;
		a->cpus[a->n_cpus++] = (struct sonde_acct_cpu){c, t.busy_ns, t.idle_ns,
							       t.unknown_ns};
	}
	return 0;
}

int sonde__acct_build(const struct sonde_spool *s, const struct sonde_profile_spool_opts *f,
		      struct sonde_acct *out)
{
	struct build b = {.s = s, .f = f, .a = out};
	int err;

	*out = (struct sonde_acct){0};
	sonde_spool__get_info(s, &b.info);
	out->period_ns = b.info.header.sample_period_ns;
	out->cpu_ns = calloc(SONDE_ACCT_MAX_CPU + 1, sizeof(*out->cpu_ns));
	if (!out->cpu_ns)
		return -ENOMEM;
	if ((err = add_samples(&b)) < 0 || (err = add_intervals(&b, false)) < 0 ||
	    (err = add_intervals(&b, true)) < 0 || (err = add_shorts(&b)) < 0 ||
	    (err = add_cpus(&b)) < 0) {
		sonde__acct_free(out);
		return err;
	}
	for (size_t i = 0; i < out->n_rows; i++)
		for (int c = 0; c < SONDE_ACCT_COLS; c++) {
			out->rows[i].total += out->rows[i].ns[c];
			out->all[c] += out->rows[i].ns[c];
			out->all_total += out->rows[i].ns[c];
		}
	if (out->n_rows)
		qsort(out->rows, out->n_rows, sizeof(*out->rows), by_total);
	return 0;
}

void sonde__acct_free(struct sonde_acct *a)
{
	free(a->rows);
	free(a->cpu_ns);
	free(a->cpus);
	*a = (struct sonde_acct){0};
}
