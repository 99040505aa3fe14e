/* sonde report: where a recording spent its samples.
 *
 * The report is a view of the recording (include/sonde/view.h) that the library builds
 * from the spool (include/sonde/view_source.h: the events the filters keep, their stacks
 * symbolized once per stack node, inline frames functions of their own unless
 * --no-inline); this file parses options and prints what the view answers.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>
#include <sonde/view.h>
#include <sonde/view_source.h>

#include "base/out.h"
#include "export/acct.h"
#include "cli.h"
#include "output.h"
#include "progress.h"

/* --sort keys: the view's order, and which rows a key's table shows. */
struct sort_key {
	const char *name;
	enum sonde_view_sort sort;
	bool self_rows; /* only rows with self samples */
};

struct report {
	const char *path;
	const char *buildid_cache; /* NULL: the default the recorder writes to */
	const char *path_after;	   /* --diff: the second spool */
	int folded, lines, no_inline, diff, summary;
	long top;
	double percent_limit;
	const struct sort_key *sort;	  /* NULL: a table by self, then one by total */
	bool sort_cpu;			  /* --sort cpu: samples by CPU instead of by function */
	enum sonde_view_roots roots;	  /* --folded-roots */
	struct cli_filter filt;		  /* which samples count (every filter given must match) */
	const char *cpu_list;		  /* --cpu as given, for the count line */
	enum sonde_profile_metric metric; /* --metric: what a sample or an interval weighs */
	/* The process/thread column of the tables (SONDE_VIEW_ROOTS_NONE: none). */
	enum sonde_view_roots column;
	bool column_auto;
	struct sonde_spool *spool;
	struct sonde_spool_info info;
	struct sonde_symbolizer *sym;

	/* filt on the sample clock with the metric's states, once the spool is open */
	struct sonde_view_filter vf;
	struct sonde_view *view; /* what passed, by function: every figure comes from it */
	/* the view's figures, once loaded */
	uint64_t samples; /* samples (and, for off-CPU metrics, intervals) that passed */
	uint64_t total;	  /* their weight: samples, or nanoseconds */
	uint64_t on_samples, intervals; /* of those, on-CPU samples and off-CPU intervals */
	uint64_t on_ns, off_ns;		/* their weights under a time metric */
	uint64_t unsampled_ns;		/* of on_ns: tasks' stays on CPUs with no sample */
	bool wall_by_switches;		/* --metric wall: samples weigh by the CPUs' switches */
	uint64_t unknown_ns, unknowns;	/* of off_ns: intervals a loss cut, and how many */
	uint64_t empty;			/* samples with an empty stack */
	uint32_t processes, tids;	/* distinct processes and threads among them */
	uint64_t fn_stacks;		/* distinct stacks by function: --folded's lines */
	uint64_t unresolved_samples;	/* weight with an unresolved frame on its stack */
	uint64_t short_count, short_ns; /* intervals too short to stack (of the threads kept) */

	uint64_t resolved;	       /* distinct frames symbolized */
	uint64_t unresolved;	       /* of those, the ones the symbolizer could not name */
	const char *phase;	       /* the progress shown, NULL: none yet */
	struct cli_progress *progress; /* NULL: none shown */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde report [options] [-i FILE | FILE]\n"
		"       sonde report --diff [options] BEFORE AFTER\n\n"
		"Summarizes a spool written by 'sonde record' (default sonde.spool): the "
		"functions\n"
		"with the most samples, by self (the sampled function itself) and by total\n"
		"(anywhere on the stack, counted once per sample even when recursive).\n\n"
		"  -i, --input FILE  the spool to read (or give it as the argument)\n"
		"  --folded      print 'outer;...;inner COUNT' lines (flamegraph.pl, speedscope)\n"
		"  --folded-roots process|thread|none  with --folded, start each stack with a\n"
		"                'comm-pid' (process) or 'comm-pid/tid' (thread) frame\n"
		"  --metric cpu|off-cpu|wall  what stacks weigh (default cpu: on-CPU samples);\n"
		"                off-cpu: the time threads spent off the CPU (a recording made\n"
		"                with record's off-CPU option), under an [off-cpu: R|S|D|other]\n"
		"                frame naming the state;\n"
		"                wall: both, samples weighing their period (where the CPUs'\n"
		"                switches were recorded, their thread's on-CPU time by them);\n"
		"                --folded then prints microseconds, the tables milliseconds\n"
		"  --top N       rows per table (default 20)\n"
		"  --column auto|process|thread|none  a column naming the process ('comm-pid') or\n"
		"                thread ('comm-pid/tid') of each row, whose counts are then its\n"
		"                own (default auto: when the samples come from more than one)\n"
		"  --sort KEY    one table, ordered by self, total or name (default: a table by\n"
		"                self, then one by total); cpu: samples by CPU instead\n"
		"  --percent-limit P  leave out rows under P percent (of the key's count)\n"
		"  --pid PID[,PID...]  only samples of these processes\n"
		"  --tid TID[,TID...]  only samples of these threads\n"
		"  --comm NAME[,NAME...]  only samples of threads with these names\n"
		"  --cpu LIST    only samples taken on these CPUs (perf's list syntax: 0,2-3)\n"
		"  --time START,END  only samples in this window, in seconds from the start of\n"
		"                the recording (either side may be left out: 2.5, or ,10)\n"
		"  --diff        compare two spools: each function's self %% in BEFORE and in\n"
		"                AFTER and the change, largest changes first (perf diff)\n"
		"  --summary     where the wall-clock time went: seconds per process on CPU,\n"
		"                runnable, sleeping (S), blocked (D), other and unknown, and\n"
		"                on-CPU seconds per CPU (the filters apply)\n"
		"  --lines       add file:line to each function when debug info has it\n"
		"  --no-inline   attribute inlined code to the function it was inlined into\n"
		"  --buildid-cache DIR  where 'sonde record --buildid-cache DIR' kept deleted or\n"
		"                replaced images (default $SONDE_BUILDID_CACHE, else\n"
		"                $XDG_CACHE_HOME/sonde/buildid, else ~/.cache/sonde/buildid)\n"
		"  -h, --help    this help\n");
}

/* The view's figures, into the report's. */
static int take_stats(struct report *r)
{
	struct sonde_view_stats st = {.sz = sizeof(st)};
	int err = sonde_view__stats(r->view, &st);

	if (err < 0)
		return err;
	r->samples = st.events;
	r->total = st.total;
	r->on_samples = st.state_events[SONDE_VIEW_ON_CPU];
	r->unsampled_ns = st.weight[SONDE_VIEW_UNSAMPLED];
	r->on_ns = st.weight[SONDE_VIEW_ON_CPU] + r->unsampled_ns;
	for (int s = SONDE_VIEW_ON_CPU + 1; s < SONDE_VIEW_UNSAMPLED; s++) {
		r->intervals += st.state_events[s];
		r->off_ns += st.weight[s];
	}
	r->unknowns = st.state_events[SONDE_VIEW_UNKNOWN];
	r->unknown_ns = st.weight[SONDE_VIEW_UNKNOWN];
	r->empty = st.empty;
	r->processes = st.processes;
	r->tids = st.threads;
	r->fn_stacks = st.stacks;
	r->unresolved_samples = st.unresolved;
	r->short_count = st.short_count;
	r->short_ns = st.short_ns;
	return 0;
}

/* A new key is one more row here. */
static const struct sort_key sort_keys[] = {
	{"self", SONDE_VIEW_SORT_SELF, true},
	{"total", SONDE_VIEW_SORT_TOTAL, false},
	{"name", SONDE_VIEW_SORT_NAME, false},
};

static const struct sort_key *sort_key_named(const char *name)
{
	for (size_t i = 0; i < sizeof(sort_keys) / sizeof(sort_keys[0]); i++)
		if (!strcmp(sort_keys[i].name, name))
			return &sort_keys[i];
	return NULL;
}

/* The width of the process/thread column: its longest label, within reason. */
static int column_width(const struct report *r, const struct sonde_view_row *rows, size_t n)
{
	size_t w = strlen(r->column == SONDE_VIEW_ROOTS_PROCESS ? "process" : "thread");

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(rows[i].label);
		w = len > w ? len : w;
	}
	return w > 32 ? 32 : (int)w;
}

static bool time_metric(const struct report *r)
{
	return r->metric != SONDE_PROFILE_METRIC_CPU;
}

/* A count column: samples, or milliseconds for a time metric. */
static void print_value(const struct report *r, uint64_t v)
{
	if (time_metric(r))
		printf("%9.1f", v / 1e6);
	else
		printf("%9" PRIu64, v);
}

static int print_table(const struct report *r, const struct sort_key *key)
{
	struct sonde_view_rows_opts o = {
		.sz = sizeof(o),
		.group = r->column == SONDE_VIEW_ROOTS_PROCESS	? SONDE_VIEW_BY_FUNCTION_PROCESS
			 : r->column == SONDE_VIEW_ROOTS_THREAD ? SONDE_VIEW_BY_FUNCTION_THREAD
								: SONDE_VIEW_BY_FUNCTION,
		.sort = key->sort,
		.ties_by_name = 1,
	};
	const struct sonde_view_row *rows;
	size_t n, shown = 0;
	double all = r->total ? (double)r->total : 1;
	int err = sonde_view__rows(r->view, &o, &rows, &n, NULL);

	if (err < 0)
		return err;
	int cw = r->column != SONDE_VIEW_ROOTS_NONE ? column_width(r, rows, n) : 0;
	bool by_name = key->sort == SONDE_VIEW_SORT_NAME;
	printf("\nTop functions by %s%s:\n", key->name,
	       by_name					? ""
	       : r->metric == SONDE_PROFILE_METRIC_CPU	? " samples"
	       : r->metric == SONDE_PROFILE_METRIC_WALL ? " wall-clock time (ms)"
							: " off-CPU time (ms)");
	printf("%8s %9s %8s %9s  ", "self%", "self", "total%", "total");
	if (cw)
		printf("%-*s  ", cw, r->column == SONDE_VIEW_ROOTS_PROCESS ? "process" : "thread");
	printf("function [module]\n");
	for (size_t i = 0; i < n && shown < (size_t)r->top; i++) {
		const struct sonde_view_row *f = &rows[i];
		uint64_t v = key->self_rows ? f->self : f->total;
		if (!f->total) /* only in events of no weight */
			continue;
		if (key->self_rows && !f->self)
			break;
		if (100.0 * v / all < r->percent_limit) {
			if (by_name)
				continue;
			break;
		}
		/* names that are already bracketed ([kernel.kallsyms], [vdso]) are not wrapped
		 * again */
		size_t ml = strlen(f->module);
		bool bracketed = ml && f->module[0] == '[' && f->module[ml - 1] == ']';
		printf("%7.2f%% ", 100.0 * f->self / all);
		print_value(r, f->self);
		printf(" %7.2f%% ", 100.0 * f->total / all);
		print_value(r, f->total);
		printf("  ");
		if (cw)
			printf("%-*s  ", cw, f->label);
		printf("%s %s%s%s\n", f->name, bracketed ? "" : "[", f->module,
		       bracketed ? "" : "]");
		shown++;
	}
	return 0;
}

/* Why a report has no samples, on stderr: the filter left none, or the recording has
 * none (and what that usually means). */
static void explain_empty(const struct report *r)
{
	const struct cli_filter *f = &r->filt;

	if (r->info.samples && (f->n_pids || f->n_tids || f->n_comms || f->has_time))
		cli_error("report",
			  "%s: no samples match --pid, --tid, --comm or --time (the recording "
			  "has %" PRIu64 ")",
			  r->path, r->info.samples);
	else if (!r->info.samples)
		cli_error("report",
			  "%s: no samples: the targets used no CPU while recorded (sonde "
			  "samples CPU time: a sleeping or blocked program is not sampled), or "
			  "ran too briefly",
			  r->path);
}

/* --cpu's list, for the paths that end before report_free. */
static void free_cpus(struct report *r)
{
	free(r->filt.cpus);
	r->filt.cpus = NULL;
}

/* --sort cpu: one row per CPU that has samples (as perf report --sort cpu). */
static int print_cpus(const struct report *r)
{
	struct sonde_view_rows_opts o = {
		.sz = sizeof(o), .group = SONDE_VIEW_BY_CPU, .sort = SONDE_VIEW_SORT_NAME};
	const struct sonde_view_row *rows;
	double all = r->total ? (double)r->total : 1;
	size_t n;
	int err = sonde_view__rows(r->view, &o, &rows, &n, NULL);

	if (err < 0)
		return err;
	if (time_metric(r))
		printf("\nTime by CPU (ms):\n%8s %9s  %s\n", "time%", "time", "cpu");
	else
		printf("\nSamples by CPU:\n%8s %9s  %s\n", "samples%", "samples", "cpu");
	for (size_t i = 0; i < n; i++) {
		if (!rows[i].self)
			continue;
		printf("%7.2f%% ", 100.0 * rows[i].self / all);
		print_value(r, rows[i].self);
		printf("  %s\n", rows[i].name);
	}
	return 0;
}

static int print_summary(const struct report *r, bool title);

/* The metric and its total, and how it was made up. */
static void print_metric(const struct report *r)
{
	if (!time_metric(r)) {
		printf("metric cpu: %" PRIu64 " on-CPU samples", r->total);
		if (sonde_spool__offcpu_count(r->spool))
			printf(" (the recording also has %" PRIu64
			       " off-CPU intervals: --metric off-cpu or wall)",
			       sonde_spool__offcpu_count(r->spool));
		printf("\n");
		return;
	}
	printf("metric %s: %.3f s in all", sonde_profile__metric_name(r->metric), r->total / 1e9);
	/* on-CPU time measured: by the CPUs' switches, or, where every switch-out of the
	 * threads was tracked from their start, as their lives less their waits */
	if (r->metric == SONDE_PROFILE_METRIC_WALL && r->wall_by_switches)
		printf(" = %.3f s on CPU (%s, spread over %" PRIu64
		       " samples; %.3f s of it not sampled) + %.3f s off CPU",
		       r->on_ns / 1e9,
		       sonde_spool__switch_cpus(r->spool) ? "by the CPUs' switches"
							  : "the threads' lives less their waits",
		       r->on_samples, r->unsampled_ns / 1e9, (r->off_ns - r->unknown_ns) / 1e9);
	else if (r->metric == SONDE_PROFILE_METRIC_WALL)
		printf(" = %.3f s on CPU (%" PRIu64 " samples of %.3f ms) + %.3f s off CPU",
		       r->on_ns / 1e9, r->on_samples, r->info.header.sample_period_ns / 1e6,
		       (r->off_ns - r->unknown_ns) / 1e9);
	if (r->unknowns)
		printf(" + %.3f s unknown", r->unknown_ns / 1e9);
	printf(" (%" PRIu64 " intervals)", r->intervals);
	if (r->short_count)
		printf("; %" PRIu64 " shorter intervals not stacked, %.3f s", r->short_count,
		       r->short_ns / 1e9);
	if (!sonde__acct_offcpu_recorded(r->spool))
		printf("; the recording has no off-CPU intervals (record with --off-cpu)");
	printf("\n");
}

static void print_sum_row(const char *name, const uint64_t *ns, uint64_t total)
{
	printf("%-24.24s", name);
	for (int c = 0; c < SONDE_ACCT_COLS; c++)
		printf(" %9.3f", ns[c] / 1e9);
	printf(" %9.3f\n", total / 1e9);
}

static double report_window(const struct report *r);
static void print_account(const struct report *r, FILE *f, const char *prefix);

/* Each CPU's time by the switches the recording kept (-a --off-cpu of every process):
 * busy, idle and unknown, adding up to CPUs x the window. */
static void print_cpu_time(const struct sonde_acct *a)
{
	uint64_t busy = 0, idle = 0, unknown = 0, span = a->window_end_ns - a->window_start_ns;

	if (!a->n_cpus)
		return;
	printf("\n%-6s %9s %9s %9s %9s  (seconds over %.3f s, by the CPUs' switches)\n", "cpu",
	       "busy", "idle", "unknown", "total", span / 1e9);
	for (uint32_t i = 0; i < a->n_cpus; i++) {
		const struct sonde_acct_cpu *t = &a->cpus[i];
		printf("%-6" PRIu32 " %9.3f %9.3f %9.3f %9.3f\n", t->cpu, t->busy_ns / 1e9,
		       t->idle_ns / 1e9, t->unknown_ns / 1e9,
		       (t->busy_ns + t->idle_ns + t->unknown_ns) / 1e9);
		busy += t->busy_ns;
		idle += t->idle_ns;
		unknown += t->unknown_ns;
	}
	printf("%-6s %9.3f %9.3f %9.3f %9.3f  (%" PRIu32 " CPUs x %.3f s)\n", "all", busy / 1e9,
	       idle / 1e9, unknown / 1e9, (busy + idle + unknown) / 1e9, a->n_cpus, span / 1e9);
}

/* --summary: the library's accounting tables (src/export/acct.h) of what passes the
 * report's filters, printed. */
static int print_summary(const struct report *r, bool title)
{
	struct sonde_profile_spool_opts o = {.sz = sizeof(o)};
	struct sonde_acct a;

	cli_filter_to_spool_opts(&r->filt, &o);
	int err = sonde__acct_build(r->spool, &o, &a);
	if (err < 0)
		return err;

	double span = report_window(r);
	if (title) {
		char on[64];
		/* exact: the stays on the CPUs, by the switches, or by every wait being known */
		if (a.exact_on)
			snprintf(on, sizeof(on), "the threads' time on the CPUs");
		else
			snprintf(on, sizeof(on), "samples of %.3f ms", a.period_ns / 1e6);
		printf("%s: where the wall-clock time went, over %.3f s (seconds; on-CPU: %s; the "
		       "states are how threads left the CPU)\n",
		       r->path, span, on);
		if (!a.offcpu)
			printf("recorded without --off-cpu: the time threads spent off the CPUs is "
			       "not in the recording, so a row holds its on-CPU samples alone\n");
		print_account(r, stdout, "");
	}
	printf("%-24s %9s %9s %9s %9s %9s %9s %9s %9s\n", "process", "on-CPU", "runnable",
	       "sleeping", "blocked", "other", "unknown", "short", "total");
	uint64_t rest[SONDE_ACCT_COLS] = {0}, rest_total = 0;
	size_t shown = 0;
	for (size_t i = 0; i < a.n_rows; i++) {
		char name[48];
		if (shown < (size_t)r->top) {
			snprintf(name, sizeof(name), "%s-%" PRIu32, a.rows[i].comm, a.rows[i].pid);
			/* a process's name is its own: its control characters shown as '?', as
			 * the view shows every name (docs/view.md) */
			sonde__out_unctrl(name);
			print_sum_row(name, a.rows[i].ns, a.rows[i].total);
			shown++;
			continue;
		}
		for (int c = 0; c < SONDE_ACCT_COLS; c++)
			rest[c] += a.rows[i].ns[c];
		rest_total += a.rows[i].total;
	}
	if (shown < a.n_rows) {
		char name[48];
		snprintf(name, sizeof(name), "(%zu others)", a.n_rows - shown);
		print_sum_row(name, rest, rest_total);
	}
	print_sum_row("all", a.all, a.all_total);

	printf("\n%-6s %9s %9s  (seconds over %.3f s: on-CPU samples of the processes "
	       "recorded)\n",
	       "cpu", "on-CPU", "rest", span);
	for (uint32_t c = 0; c < a.cpu_max; c++) {
		double busy = a.cpu_ns[c] / 1e9;
		if (a.cpu_ns[c])
			printf("%-6" PRIu32 " %9.3f %9.3f\n", c, busy,
			       span > busy ? span - busy : 0);
	}
	if (a.cpu_ns[SONDE_ACCT_MAX_CPU])
		printf("%-6s %9.3f\n", "?", a.cpu_ns[SONDE_ACCT_MAX_CPU] / 1e9);
	print_cpu_time(&a);
	sonde__acct_free(&a);
	return 0;
}

/* The time the recording covers, in seconds: from its first sample or switch-out to its
 * last sample or switch-in (a recording of a sleeping program has intervals and no
 * sample, and its time is theirs). */
static double recording_span(const struct report *r)
{
	const struct sonde_spool_info *in = &r->info;
	uint64_t first = in->samples ? in->first_time_ns : UINT64_MAX;
	uint64_t last = in->samples ? in->last_time_ns : 0;
	struct sonde_spool_offcpu o;

	for (uint64_t i = 0; sonde_spool__get_offcpu(r->spool, i, &o) == 0; i++) {
		if (o.switch_out_ns < first)
			first = o.switch_out_ns;
		if (o.switch_in_ns > last)
			last = o.switch_in_ns;
	}
	for (uint64_t i = 0; sonde_spool__get_unknown(r->spool, i, &o) == 0; i++) {
		if (o.switch_out_ns < first)
			first = o.switch_out_ns;
		if (o.switch_in_ns > last)
			last = o.switch_in_ns;
	}
	return last > first ? (last - first) / 1e9 : 0;
}

/* The seconds the report's header and --summary's tables are given over, one figure: the
 * accounting's window (sonde__acct_window: with the CPUs' switches, where the machine was
 * first and last seen, over which the tables add up; else, off CPU, the recording's start
 * to its last wait or exit, where a program whose waits are all short had only the span
 * of its few long ones, 1.0 s of a 2.0 s ping-pong), else the span of the samples. */
static double report_window(const struct report *r)
{
	uint64_t start, end;

	if (!sonde_spool__switch_cpus(r->spool) && !sonde__acct_offcpu_recorded(r->spool))
		return recording_span(r);
	sonde__acct_window(r->spool, &start, &end);
	return end > start ? (end - start) / 1e9 : 0;
}

/* The footer on unresolved frames, in the metric's unit: samples, or time. */
static void print_unresolved(const struct report *r)
{
	double share = r->total ? 100.0 * r->unresolved_samples / (double)r->total : 0.0;

	printf("\nunresolved frames: %" PRIu64 " of %" PRIu64
	       " distinct frame addresses have no symbol; ",
	       r->unresolved, r->resolved);
	if (time_metric(r))
		printf("%.3f s (%.2f%%) of the time has one on its stack\n",
		       r->unresolved_samples / 1e9, share);
	else
		printf("%" PRIu64 " samples (%.2f%%) have one on their stack\n",
		       r->unresolved_samples, share);
}

/* What the recording could not see (its account record), one line each, to f: time in
 * the kernel when it was not sampled, and the time lost records covered. Nothing for a
 * recording that saw everything, or one made before the account was written. */
static void print_account(const struct report *r, FILE *f, const char *prefix)
{
	struct sonde_spool_account a;

	if (sonde_spool__get_account(r->spool, &a) < 0)
		return;
	if (!a.kernel_time && a.kernel_error == ERANGE)
		fprintf(f,
			"%skernel time not visible: recorded above 10000 Hz, where kernel time is "
			"not sampled by default, so time in system calls has no samples\n",
			prefix);
	else if (!a.kernel_time && a.kernel_error)
		fprintf(f,
			"%skernel time not visible: the kernel refused kernel sampling (%s; it "
			"needs kernel.perf_event_paranoid <= 1 or CAP_PERFMON), so time in system "
			"calls has no samples\n",
			prefix, strerror((int)a.kernel_error));
	else if (!a.kernel_time)
		fprintf(f,
			"%skernel time not visible: recorded with --no-kernel, so time in system "
			"calls has no samples\n",
			prefix);
	/* without a loss, unknown spans are waits whose switch-in the kernel did not trace
	 * (the thread seen running again later: docs/record.md, "Off-CPU backends") */
	if (r->unknowns && time_metric(r))
		fprintf(f,
			"%s%.1f %% of thread time unknown: %" PRIu64
			" records lost%s (%.3f s, in %" PRIu64
			" intervals under [unknown: lost records])\n",
			prefix, r->total ? 100.0 * r->unknown_ns / (double)r->total : 0.0,
			a.lost_records,
			a.lost_records ? "" : ", waits whose switch-in the kernel did not trace",
			r->unknown_ns / 1e9, r->unknowns);
	if (a.lost_records || a.lost_samples)
		fprintf(f,
			"%stime unknown: %" PRIu64 " records and %" PRIu64
			" samples lost (full rings); the samples they held are in no figure here "
			"(%" PRIu64 " off-CPU intervals dropped)\n",
			prefix, a.lost_records, a.lost_samples, a.offcpu_dropped);
	else if (a.offcpu_dropped)
		fprintf(f,
			"%s%" PRIu64 " off-CPU intervals dropped with no record lost (waits the "
			"recorder could not write): their time is in no figure here\n",
			prefix, a.offcpu_dropped);
}

static int print_report(const struct report *r)
{
	const struct sonde_spool_info *in = &r->info;
	double secs = report_window(r);

	printf("%s: %" PRIu64 " samples", r->path, r->on_samples);
	if (r->on_samples != in->samples && r->metric != SONDE_PROFILE_METRIC_OFF_CPU)
		printf(" (of %" PRIu64 ")", in->samples);
	if (time_metric(r))
		printf(" and %" PRIu64 " off-CPU intervals (of %" PRIu64 ")", r->intervals,
		       sonde_spool__offcpu_count(r->spool) + sonde_spool__unknown_count(r->spool));
	printf(" over %.2f s", secs);
	if (in->header.sample_period_ns)
		printf(" at %.0f Hz", 1e9 / in->header.sample_period_ns);
	printf(", sampled in %" PRIu32 " process%s and %" PRIu32 " thread%s; %" PRIu64
	       " distinct stack%s (by function, as --folded prints them)\n",
	       r->processes, r->processes == 1 ? "" : "es", r->tids, r->tids == 1 ? "" : "s",
	       r->fn_stacks, r->fn_stacks == 1 ? "" : "s");
	print_metric(r);
	print_account(r, stdout, "");
	/* system-wide, where the machine's time went: --summary's tables, per process and
	 * state and each CPU's busy, idle, unknown */
	if (r->metric == SONDE_PROFILE_METRIC_WALL && sonde_spool__switch_cpus(r->spool)) {
		int err = print_summary(r, false);
		if (err < 0)
			return err;
		printf("\n");
	}
	if (r->empty)
		printf("%" PRIu64 " samples (%.2f%%) have an empty stack\n", r->empty,
		       100.0 * r->empty / (double)r->samples);
	if (r->filt.cpus)
		printf("%" PRIu64 " samples on CPUs %s\n", r->samples, r->cpu_list);
	if (!r->samples)
		explain_empty(r);
	int err = r->sort_cpu ? print_cpus(r)
		  : r->sort   ? print_table(r, r->sort)
			      : print_table(r, &sort_keys[0]) ?: print_table(r, &sort_keys[1]);
	if (err < 0)
		return err;
	print_unresolved(r);
	return 0;
}

/* The stacks by function, with their root frames, through the library's one folded writer
 * (docs/view.md): stacks whose functions are the same (different addresses in one function)
 * merge; an empty stack has no line, unless it has a root frame. */
static int print_folded(struct report *r)
{
	/* a time metric in microseconds; a line under half of one rounds away */
	struct sonde_view_folded_opts o = {
		.sz = sizeof(o), .roots = r->roots, .unit = time_metric(r) ? 1000 : 1};

	fflush(stdout);
	return sonde_view__write_folded(r->view, STDOUT_FILENO, &o);
}

static void report_free(struct report *r)
{
	sonde_view__free(r->view);
	free(r->filt.cpus);
	sonde_symbolizer__free(r->sym);
	sonde_spool__close(r->spool);
}

/* Opens the spool, printing the one-line error or truncation warning. */
static int open_spool(struct report *r)
{
	uint64_t off = 0;

	r->spool = sonde_spool__open(r->path, &off);
	if (!r->spool) {
		int e = errno;
		cli_spool_error("report", r->path, e, off);
		return -e;
	}
	sonde_spool__get_info(r->spool, &r->info);
	if (!r->info.complete)
		cli_spool_truncated("report", r->path, r->info.valid_bytes, r->info.samples);
	/* --metric's states are the library's business (sonde_view_metric_states) */
	cli_filter_to_view(&r->filt, r->info.header.start_monotonic_ns, &r->vf);
	return 0;
}

enum {
	OPT_FOLDED = 256,
	OPT_TOP,
	OPT_LINES,
	OPT_NO_INLINE,
	OPT_BUILDID_CACHE,
	OPT_SORT,
	OPT_CPU,
	OPT_PERCENT_LIMIT,
	OPT_PID,
	OPT_TID,
	OPT_COMM,
	OPT_TIME,
	OPT_ROOTS,
	OPT_DIFF,
	OPT_COLUMN,
	OPT_METRIC,
	OPT_SUMMARY,
};

/* One option; 0, or CLI_USAGE after saying why. */
static int parse_opt(struct report *r, int c, char *arg, char **argv)
{
	char *end;

	switch (c) {
	case OPT_FOLDED:
		r->folded = 1;
		return 0;
	case OPT_DIFF:
		r->diff = 1;
		return 0;
	case OPT_SUMMARY:
		r->summary = 1;
		return 0;
	case OPT_COLUMN:
		r->column_auto = !strcmp(arg, "auto");
		if (!strcmp(arg, "process"))
			r->column = SONDE_VIEW_ROOTS_PROCESS;
		else if (!strcmp(arg, "thread"))
			r->column = SONDE_VIEW_ROOTS_THREAD;
		else if (strcmp(arg, "none") && !r->column_auto) {
			cli_error("report",
				  "--column wants auto, process, thread or none, not '%s'", arg);
			return CLI_USAGE;
		} else {
			r->column = SONDE_VIEW_ROOTS_NONE;
		}
		return 0;
	case OPT_METRIC:
		if (sonde_profile__parse_metric(arg, &r->metric)) {
			cli_error("report", "--metric wants cpu, off-cpu or wall, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_TOP:
		errno = 0;
		r->top = strtol(arg, &end, 10);
		if (errno || *end || r->top < 1) {
			cli_error("report", "--top wants a positive number, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_LINES:
		r->lines = 1;
		return 0;
	case OPT_NO_INLINE:
		r->no_inline = 1;
		return 0;
	case OPT_BUILDID_CACHE:
		r->buildid_cache = arg;
		return 0;
	case OPT_SORT:
		r->sort_cpu = !strcmp(arg, "cpu");
		if (!r->sort_cpu && !(r->sort = sort_key_named(arg))) {
			cli_error("report", "--sort wants self, total, name or cpu, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_PERCENT_LIMIT:
		r->percent_limit = strtod(arg, &end);
		if (end == arg || *end || !(r->percent_limit >= 0) || r->percent_limit > 100) {
			cli_error("report", "--percent-limit wants a percentage, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case OPT_CPU:
		r->cpu_list = arg; /* the parser reads a CPU list without cutting it up */
		return cli_filter_parse("report", &r->filt, "cpu", arg);
	case OPT_PID:
		return cli_filter_parse("report", &r->filt, "pid", arg);
	case OPT_TID:
		return cli_filter_parse("report", &r->filt, "tid", arg);
	case OPT_COMM:
		return cli_filter_parse("report", &r->filt, "comm", arg);
	case OPT_TIME:
		return cli_filter_parse("report", &r->filt, "time", arg);
	case OPT_ROOTS:
		if (!strcmp(arg, "process"))
			r->roots = SONDE_VIEW_ROOTS_PROCESS;
		else if (!strcmp(arg, "thread"))
			r->roots = SONDE_VIEW_ROOTS_THREAD;
		else if (!strcmp(arg, "none"))
			r->roots = SONDE_VIEW_ROOTS_NONE;
		else {
			cli_error("report",
				  "--folded-roots wants process, thread or none, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	default:
		return cli_bad_option("report", c, argv);
	}
}

static int parse_args(struct report *r, int argc, char **argv)
{
	static const struct option opts[] = {
		{"input", required_argument, NULL, 'i'},
		{"folded", no_argument, NULL, OPT_FOLDED},
		{"diff", no_argument, NULL, OPT_DIFF},
		{"summary", no_argument, NULL, OPT_SUMMARY},
		{"column", required_argument, NULL, OPT_COLUMN},
		{"folded-roots", required_argument, NULL, OPT_ROOTS},
		{"top", required_argument, NULL, OPT_TOP},
		{"metric", required_argument, NULL, OPT_METRIC},
		{"lines", no_argument, NULL, OPT_LINES},
		{"no-inline", no_argument, NULL, OPT_NO_INLINE},
		{"buildid-cache", required_argument, NULL, OPT_BUILDID_CACHE},
		{"sort", required_argument, NULL, OPT_SORT},
		{"cpu", required_argument, NULL, OPT_CPU},
		{"percent-limit", required_argument, NULL, OPT_PERCENT_LIMIT},
		{"pid", required_argument, NULL, OPT_PID},
		{"tid", required_argument, NULL, OPT_TID},
		{"comm", required_argument, NULL, OPT_COMM},
		{"time", required_argument, NULL, OPT_TIME},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *input = NULL;
	int c;

	r->top = 20;
	r->column_auto = true;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":i:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return CLI_OK;
		}
		if (c == 'i') {
			input = optarg;
			continue;
		}
		int err = parse_opt(r, c, optarg, argv);
		if (err)
			return err;
	}
	if (r->roots != SONDE_VIEW_ROOTS_NONE && !r->folded) {
		cli_error("report", "--folded-roots goes with --folded");
		return CLI_USAGE;
	}
	if (r->diff) {
		if (input || argc - optind != 2 || r->folded || r->sort) {
			cli_error("report",
				  "--diff takes two spools, BEFORE AFTER, and no --folded "
				  "or --sort");
			return CLI_USAGE;
		}
		r->path = argv[optind];
		r->path_after = argv[optind + 1];
		r->column_auto = false; /* functions compare across the two, whoever ran them */
		r->column = SONDE_VIEW_ROOTS_NONE;
		return -1;
	}
	r->path = cli_input("report", input, argc, argv);
	return r->path ? -1 : CLI_USAGE;
}

/* One line on stderr when files were refused: their names are missing from the report,
 * and the warnings said which files (docs/symbolize.md). */
static void note_refused(const struct report *r)
{
	struct sonde_symbolizer_stats st = {.sz = sizeof(st)};
	uint64_t n;

	if (sonde_symbolizer__get_stats(r->sym, &st) < 0)
		return;
	n = st.refused_symlink + st.refused_not_regular + st.refused_too_big + st.refused_owner;
	if (n)
		fprintf(stderr,
			"sonde report: %llu file%s ignored (%llu symbolic links, %llu not regular "
			"files, %llu too big, %llu of another owner): their names are missing\n",
			(unsigned long long)n, n == 1 ? "" : "s",
			(unsigned long long)st.refused_symlink,
			(unsigned long long)st.refused_not_regular,
			(unsigned long long)st.refused_too_big,
			(unsigned long long)st.refused_owner);
}

/* The library's progress, as the command line shows it: a line per phase. */
static void on_progress(void *ctx, const char *phase, uint64_t done, uint64_t total)
{
	struct report *r = ctx;

	if (phase != r->phase) {
		cli_progress_end(r->progress);
		r->progress = cli_progress_begin("report", phase);
		r->phase = phase;
	}
	cli_progress_update(r->progress, done, total);
}

/* Opens r->path and has the library build the view of the events its filters keep.
 * 0, or CLI_FAILURE after saying why. */
static int load(struct report *r)
{
	if (open_spool(r) < 0)
		return CLI_FAILURE;
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .buildid_cache_dir = r->buildid_cache};
	r->sym = sonde_symbolizer__new(&so);
	if (!r->sym) {
		cli_error("report", "cannot create the symbolizer: %s", strerror(errno));
		return CLI_FAILURE;
	}
	struct sonde_view_source_opts o = {
		.sz = sizeof(o),
		.filter = &r->vf,
		.metric = r->metric,
		.state_frames = 1,
		.lines = r->lines,
		.no_inline = r->no_inline,
		.symbolizer = r->sym,
		.progress = on_progress,
		.progress_ctx = r,
	};
	struct sonde_view_source_stats vs = {.sz = sizeof(vs)};
	int err = sonde_view__from_spool(r->spool, &o, &r->view, &vs);
	cli_progress_end(r->progress);
	r->progress = NULL;
	r->resolved = vs.frames;
	r->unresolved = vs.unresolved_frames;
	r->wall_by_switches = vs.wall_by_switches;
	if (!err)
		err = take_stats(r);
	if (err < 0) {
		cli_error("report", "%s: %s", r->path, sonde_strerror(err));
		return CLI_FAILURE;
	}
	/* --column auto: a process column when the samples come from more than one process,
	 * a thread column when from more than one thread of one, else none */
	if (r->column_auto && !r->folded)
		r->column = r->processes > 1 ? SONDE_VIEW_ROOTS_PROCESS
			    : r->tids > 1    ? SONDE_VIEW_ROOTS_THREAD
					     : SONDE_VIEW_ROOTS_NONE;
	return 0;
}

/* The functions with self samples in either, their self %% in each and the change. */
static int print_diff(const struct report *a, struct report *b, double limit, long top)
{
	const struct sonde_view_diff_row *rows;
	size_t n;
	int err = sonde_view__diff(a->view, b->view, &rows, &n);

	if (err < 0)
		return err;
	printf("before: %s, %" PRIu64 " samples\nafter:  %s, %" PRIu64 " samples\n", a->path,
	       a->samples, b->path, b->samples);
	printf("\nSelf samples, as a share of each profile, largest changes first:\n");
	printf("%8s %8s %9s  %s\n", "before%", "after%", "change", "function [module]");
	for (size_t i = 0, shown = 0; i < n && shown < (size_t)top; i++) {
		const struct sonde_view_diff_row *d = &rows[i];
		if (d->before_pct < limit && d->after_pct < limit)
			continue;
		bool bracketed = d->module[0] == '[';
		printf("%7.2f%% %7.2f%% %+8.2f%%  %s %s%s%s\n", d->before_pct, d->after_pct,
		       d->after_pct - d->before_pct, d->name, bracketed ? "" : "[", d->module,
		       bracketed ? "" : "]");
		shown++;
	}
	return 0;
}

static int run_diff(struct report *a)
{
	struct report b = *a; /* the same options (nothing is loaded yet) */
	int rc, err;

	b.path = a->path_after;
	rc = load(a);
	if (!rc)
		rc = load(&b);
	if (!rc && (err = print_diff(a, &b, a->percent_limit, a->top)) < 0) {
		cli_error("report", "%s", sonde_strerror(err));
		rc = CLI_FAILURE;
	}
	report_free(a);
	b.filt.cpus = NULL; /* a's --cpu list, freed with a */
	report_free(&b);
	if (fflush(stdout) != 0)
		rc = CLI_FAILURE;
	return rc;
}

static int cmd_report(int argc, char **argv)
{
	struct report r = {0};
	int rc = parse_args(&r, argc, argv), err;

	if (rc >= 0) {
		free_cpus(&r);
		return rc;
	}
	if (r.diff)
		return run_diff(&r);
	if (r.sort_cpu && r.folded) {
		cli_error("report", "--sort cpu and --folded do not go together");
		report_free(&r);
		return CLI_USAGE;
	}
	if (r.summary) {
		/* a table of its own: no stacks to count or symbolize */
		err = open_spool(&r) < 0 ? -1 : print_summary(&r, true);
		if (err < -1)
			cli_error("report", "%s: %s", r.path, sonde_strerror(err));
		report_free(&r);
		if (fflush(stdout) != 0)
			err = -errno;
		return err < 0 ? CLI_FAILURE : CLI_OK;
	}
	if ((rc = load(&r))) {
		report_free(&r);
		return rc;
	}
	err = r.folded ? print_folded(&r) : print_report(&r);
	if (!err && r.folded && !r.samples)
		explain_empty(&r);
	if (!err && r.folded) /* stdout holds the stacks alone */
		print_account(&r, stderr, "sonde report: note: ");
	note_refused(&r);
	if (err < 0)
		cli_error("report", "%s: %s", r.path, sonde_strerror(err));
	report_free(&r);
	if (fflush(stdout) != 0)
		err = -errno;
	return err < 0 ? CLI_FAILURE : CLI_OK;
}

SONDE_COMMAND("report", "summarize a recording: top functions, folded stacks", cmd_report)
