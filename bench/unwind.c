/* bench-unwind: DWARF unwinding speed on real samples.
 *
 * Records a -O2 -fomit-frame-pointer program (default: progs/split-nofp) with perf_event
 * (registers + user stack copies, as the recorder does), keeps the samples in memory, then
 * replays the unwinding of all of them on one thread with warm tables and reports frames
 * per second, plus how the stacks ended and any fallbacks. bench/unwind.sh runs it next to
 * `perf report` on a `perf record --call-graph dwarf` recording of the same program.
 *
 * usage: bench-unwind PROGRAM SECONDS [FREQ]
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"
#include "proc/launch.h"
#include "record/modules.h"
#include "record/stack.h"
#include "unwind/cache.h"
#include "unwind/dwarf.h"

struct sample {
	struct unwind_regs regs;
	uint8_t *data;
	size_t len;
	uint64_t sp;
};

struct samples {
	struct sample *v;
	size_t n, cap;
};

/* The target's executable mappings, looked up as the recorder looks them up. */
struct self_maps {
	struct rec_modtable mods;
	struct unwind_cache *cache;
	struct rec_find_ctx find;
};

/* CPU time of this thread: frames per second per core, whatever else the machine runs. */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int keep(struct samples *s, const struct perf_sample *ps)
{
	if (ps->regs_abi == PERF_SAMPLE_REGS_ABI_NONE || !ps->stack_len)
		return 0;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			return -ENOMEM;
	}
	struct sample *e = &s->v[s->n++];
	e->regs = ps->regs;
	e->len = ps->stack_len;
	e->sp = ps->regs.r[UREG_RSP];
	e->data = malloc(e->len);
	if (!e->data)
		return -ENOMEM;
	memcpy(e->data, ps->stack, e->len);
	return 0;
}

static int drain(struct perf_ring *r, const struct perf_layout *l, struct samples *s)
{
	const void *rec;
	size_t len;
	int rc = 0;

	sonde__perf_ring_begin(r);
	while (rc >= 0 && sonde__perf_ring_next(r, &rec, &len) > 0) {
		struct perf_rec pr;
		if (sonde__perf_decode(rec, len, l, &pr) == 0 && pr.type == PERF_RECORD_SAMPLE)
			rc = keep(s, &pr.sample);
	}
	sonde__perf_ring_end(r);
	return rc;
}

enum { MAX_CPUS = 256 };

/* Runs prog for its own duration, sampling it on every CPU (inherited events need per-CPU
 * rings); loads its mappings once it runs. */
static int record(char *const argv[], uint64_t freq, struct samples *s, struct self_maps *maps)
{
	struct perf_event_cfg cfg = {.kind = PERF_KIND_CPU_CLOCK,
				     .freq = freq,
				     .stack_bytes = 16384,
				     .enable_on_exec = true,
				     .wakeup_bytes = 1 << 16};
	static struct perf_ring rings[MAX_CPUS];
	struct pollfd pfd[MAX_CPUS];
	struct perf_event_attr a;
	struct perf_layout l;
	struct proc_launch pl;
	int *cpus = NULL, rc, status;
	size_t ncpu = 0, nr = 0;

	if ((rc = sonde__proc_launch_start(&pl, argv, NULL)) < 0)
		return rc;
	sonde__perf_attr_fill(&a, &cfg);
	sonde__perf_event_layout(&l);
	rc = sonde__perf_online_cpus(&cpus, &ncpu);
	for (size_t i = 0; rc >= 0 && i < ncpu && nr < MAX_CPUS; i++, nr++) {
		int fd = sonde__perf_open(&a, pl.pid, cpus[i]);
		rc = fd < 0 ? fd : sonde__perf_ring_map(&rings[nr], fd, cpus[i], 512, 64);
		pfd[nr] = (struct pollfd){.fd = fd, .events = POLLIN};
	}
	free(cpus);
	if (rc >= 0)
		rc = sonde__proc_launch_resume(&pl);
	if (rc < 0) {
		fprintf(stderr, "cannot sample %s: %s\n", argv[0], strerror(-rc));
		sonde__proc_launch_abort(&pl);
		return -1;
	}
	usleep(100000); /* past the dynamic loader: the mappings are final */
	sonde__modtable_load_pid(&maps->mods, pl.pid);
	maps->find = (struct rec_find_ctx){.mods = &maps->mods, .cache = maps->cache, .pid = pl.pid};
	for (bool last = false; rc >= 0;) {
		last = sonde__proc_launch_wait(&pl, WNOHANG, &status) != 0;
		poll(pfd, nr, 100);
		for (size_t i = 0; i < nr && rc >= 0; i++)
			rc = drain(&rings[i], &l, s);
		if (last)
			break;
	}
	for (size_t i = 0; i < nr; i++) {
		sonde__perf_ring_unmap(&rings[i]);
		close(pfd[i].fd);
	}
	sonde__proc_launch_free(&pl);
	return rc;
}

static uint64_t frames[UNWIND_MAX_FRAMES];

static uint64_t unwind_all(const struct samples *s, struct self_maps *m, struct unwind_stats *st)
{
	uint64_t total = 0;

	for (size_t i = 0; i < s->n; i++) {
		struct unwind_stack stack = {s->v[i].data, s->v[i].len, s->v[i].sp};
		size_t n;
		sonde__unwind_dwarf(&s->v[i].regs, &stack, sonde__record_find_module, &m->find, frames,
				    UNWIND_MAX_FRAMES, &n, st);
		total += n;
	}
	return total;
}

int main(int argc, char **argv)
{
	struct samples s = {0};
	struct self_maps maps = {.cache = sonde__unwind_cache_new()}, *m = &maps;
	struct unwind_stats st = {0}, warm = {0};
	uint64_t freq = argc > 3 ? strtoull(argv[3], NULL, 10) : 4000;

	if (argc < 3) {
		fprintf(stderr, "usage: bench-unwind PROGRAM SECONDS [FREQ]\n");
		return 2;
	}
	char *child[] = {argv[1], argv[2], NULL};
	if (!maps.cache || record(child, freq, &s, m) < 0 || !s.n) {
		fprintf(stderr, "no samples recorded\n");
		return 1;
	}
	uint64_t per_pass = unwind_all(&s, m, &warm); /* builds the tables */
	double t0 = now(), t;
	uint64_t frames_done = 0;
	int passes = 0;
	do {
		frames_done += unwind_all(&s, m, &st);
		passes++;
		t = now() - t0;
	} while (t < 2.0);
	printf("samples %zu, frames per pass %llu (%.1f per stack)\n", s.n,
	       (unsigned long long)per_pass, (double)per_pass / s.n);
	printf("ends: complete %llu, copy-window %llu, max-frames %llu, error %llu\n",
	       (unsigned long long)warm.ends[0], (unsigned long long)warm.ends[1],
	       (unsigned long long)warm.ends[2], (unsigned long long)warm.ends[3]);
	printf("steps: cfi %llu, frame-pointer %llu; fallbacks:",
	       (unsigned long long)warm.cfi_steps, (unsigned long long)warm.fp_steps);
	for (int r = 0; r < UNWIND_FB_COUNT; r++)
		if (warm.fallbacks[r])
			printf(" %s %llu", sonde__unwind_fallback_name(r),
			       (unsigned long long)warm.fallbacks[r]);
	printf("\nunwind: %d passes in %.3f s: %.2f M frames/s, %.0f ns/stack (CPU time of one core, warm tables)\n",
	       passes, t, frames_done / t / 1e6, t * 1e9 / ((double)passes * s.n));
	printf("sonde_unwind_seconds_per_pass %.6f\n", t / passes);
	for (size_t i = 0; i < s.n; i++)
		free(s.v[i].data);
	free(s.v);
	sonde__unwind_cache_free(maps.cache);
	sonde__modtable_free(&maps.mods);
	return 0;
}
