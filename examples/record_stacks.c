/* record_stacks: the recorder's basic usage pattern, using only sonde's public headers.
 *
 *   1. attach to a process: launch a command suspended before execve (sampling starts at
 *      its first instruction), or stop-and-attach to a running pid
 *   2. poll until the process exits or a deadline passes
 *   3. finish the recording (drains the rings, completes the spool file)
 *   4. read the spool back and print its most frequent stacks, symbolized
 *
 * usage: record_stacks [-d SECONDS] [-o FILE] [-n STACKS] -p PID
 *        record_stacks [-d SECONDS] [-o FILE] [-n STACKS] CMD ARGS...
 *
 * Build: make (this file becomes build/VARIANT/examples/record_stacks).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>
#include <sonde/view_source.h>
#include <sonde/symbolize.h>

struct options {
	double seconds;	  /* deadline of the recording */
	const char *file; /* spool path */
	int stacks;	  /* how many stacks to print */
	pid_t pid;	  /* attach to this pid, or ... */
	char **cmd;	  /* ... launch this command */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(void)
{
	fprintf(stderr, "usage: record_stacks [-d SECONDS] [-o FILE] [-n STACKS] (-p PID | CMD "
			"ARGS...)\n");
	return 2;
}

/* ---- steps 1 to 3: record ---- */

static int record(const struct options *o)
{
	/* Zero-initialized: the processes the command forks are recorded too (set
	 * no_follow_children to record it alone). */
	struct sonde_record_opts ro = {.sz = sizeof(ro), .frequency = 999};
	struct sonde_launch *l = NULL;
	pid_t pid = o->pid;

	if (o->cmd) {
		/* The child waits before execve until sonde_launch__resume, so the recorder can
		 * arm its events with enable-on-exec first. */
		l = sonde_launch__new(o->cmd, NULL);
		if (!l) {
			fprintf(stderr, "cannot run %s: %s\n", o->cmd[0], strerror(errno));
			return -1;
		}
		pid = sonde_launch__pid(l);
	}
	struct sonde_recorder *r = sonde_recorder__attach(
		pid, o->file, l ? SONDE_ATTACH_ON_EXEC : SONDE_ATTACH_STOP, &ro);
	if (!r) {
		/* The library has logged the detailed cause to stderr already. */
		fprintf(stderr, "cannot record pid %d: %s\n", (int)pid, strerror(errno));
		sonde_launch__free(l);
		return -1;
	}
	if (l && sonde_launch__resume(l) < 0)
		fprintf(stderr, "%s did not start\n", o->cmd[0]);

	/* Nothing is drained in the background: this loop is what moves samples from the
	 * kernel's rings into the spool. */
	double deadline = now_s() + o->seconds;
	int status, err = 0;
	while (now_s() < deadline) {
		err = sonde_recorder__poll(r, 100, NULL);
		if (err < 0)
			break;
		bool exited = l ? sonde_launch__wait(l, WNOHANG, &status) == 1
				: sonde_recorder__active_process_count(r) == 0;
		if (exited)
			break;
	}

	struct sonde_record_summary s = {.sz = sizeof(s)};
	int ferr = sonde_recorder__finish(r, &s);
	if (err >= 0)
		err = ferr;
	if (err < 0)
		fprintf(stderr, "recording failed: %s\n", sonde_strerror(err));
	else
		fprintf(stderr, "%llu samples written, %llu lost\n",
			(unsigned long long)s.samples_written, (unsigned long long)s.lost_events);
	sonde_recorder__free(r);
	/* A command still running at the deadline is left running, as a -p process is. */
	sonde_launch__free(l);
	return err < 0 ? -1 : 0;
}

/* ---- step 4: read and print ---- */

struct stack_count {
	uint32_t stack;
	uint64_t count;
	uint32_t pid; /* of a sample with this stack, for frames outside any module */
};

static int by_count(const void *a, const void *b)
{
	const struct stack_count *x = a, *y = b;

	return x->count < y->count ? 1 : x->count > y->count ? -1 : 0;
}

/* One frame, as every name the symbolizer gives for it (inlined functions first). */
static void print_frame(const struct sonde_spool *s, struct sonde_symbolizer *sym, uint32_t frame,
			uint32_t pid)
{
	struct sonde_sym_frame out[8];
	int n = sonde_spool__symbolize_frame(s, sym, frame, pid, out, 8);

	for (int i = 0; i < n; i++) {
		const char *mod = out[i].module ? strrchr(out[i].module, '/') : NULL;
		printf("    %s%s", out[i].inline_depth ? "(inlined) " : "", out[i].name);
		if (out[i].file)
			printf(" (%s:%u)", out[i].file, out[i].line);
		printf(" [%s]\n", mod ? mod + 1 : out[i].module ? out[i].module : "?");
	}
}

static int print_stacks(const struct options *o)
{
	uint64_t bad_offset = 0;
	struct sonde_spool *s = sonde_spool__open(o->file, &bad_offset);

	if (!s) {
		fprintf(stderr, "cannot read %s: %s (at byte %llu)\n", o->file,
			sonde_strerror(errno), (unsigned long long)bad_offset);
		return -1;
	}
	struct sonde_spool_info info;
	sonde_spool__get_info(s, &info);
	/* Stack ids are dense (1..info.stacks), so an array indexed by id counts them. */
	struct stack_count *counts = calloc((size_t)info.stacks + 1, sizeof(*counts));
	struct sonde_symbolizer *sym = sonde_symbolizer__new(NULL);
	uint32_t *frames = calloc(SONDE_SPOOL_MAX_DEPTH, sizeof(*frames));
	int ret = -1;
	if (!counts || !sym || !frames) {
		fprintf(stderr, "out of memory\n");
		goto out;
	}
	for (uint64_t i = 0; i < info.samples; i++) {
		struct sonde_spool_sample smp;
		struct sonde_spool_thread th;
		if (sonde_spool__get_sample(s, i, &smp) < 0 || !smp.stack)
			continue;
		sonde_spool__get_thread(s, smp.thread, &th);
		counts[smp.stack] =
			(struct stack_count){smp.stack, counts[smp.stack].count + 1, th.pid};
	}
	qsort(counts, (size_t)info.stacks + 1, sizeof(*counts), by_count);
	printf("%llu samples, %u distinct stacks\n", (unsigned long long)info.samples, info.stacks);
	for (int k = 0; k < o->stacks && k <= (int)info.stacks && counts[k].count; k++) {
		int depth =
			sonde_spool__get_stack(s, counts[k].stack, frames, SONDE_SPOOL_MAX_DEPTH);
		printf("\nstack %d: %llu samples (%.1f%%)\n", k + 1,
		       (unsigned long long)counts[k].count,
		       100.0 * (double)counts[k].count / (double)info.samples);
		/* Leaf first: the function that was running, then its callers. */
		for (int i = 0; i < depth && i < SONDE_SPOOL_MAX_DEPTH; i++)
			print_frame(s, sym, frames[i], counts[k].pid);
	}
	ret = 0;
out:
	free(frames);
	sonde_symbolizer__free(sym);
	free(counts);
	sonde_spool__close(s);
	return ret;
}

int main(int argc, char **argv)
{
	struct options o = {.seconds = 10, .file = "record_stacks.spool", .stacks = 5};
	int c;

	while ((c = getopt(argc, argv, "+d:o:n:p:")) != -1) {
		switch (c) {
		case 'd':
			o.seconds = atof(optarg);
			break;
		case 'o':
			o.file = optarg;
			break;
		case 'n':
			o.stacks = atoi(optarg);
			break;
		case 'p':
			o.pid = (pid_t)atoi(optarg);
			break;
		default:
			return usage();
		}
	}
	if (optind < argc)
		o.cmd = &argv[optind];
	if ((o.pid > 0) == (o.cmd != NULL) || o.seconds <= 0)
		return usage();
	if (record(&o) < 0)
		return 1;
	return print_stacks(&o) < 0 ? 1 : 0;
}
