/* bench-unwind: DWARF unwinding speed on real samples.
 *
 * Records a -O2 -fomit-frame-pointer program (default: progs/split-nofp) with perf_event
 * (registers + user stack copies, as the recorder does), keeps the samples in memory, then
 * replays the unwinding of all of them on one thread with warm tables, each through the
 * recorder's own call (sonde__record_unwind: module lookups, CFI, frames translated to
 * module offsets), and reports frames per second, plus how the stacks ended and any
 * fallbacks. bench/unwind.sh runs it next to `perf report` on a `perf record --call-graph
 * dwarf` recording of the same program.
 *
 * With SAVE, the samples and the program's module table are also written to that file;
 * --replay FILE unwinds a saved file's samples instead of recording: two builds (an old
 * unwinder and a new one) then unwind the very same stacks, where two recordings differ
 * by more than the change measured. The files are read back through their paths (the
 * process is gone; its vDSO is not read), so the replay is for the machine that saved it.
 *
 * usage: bench-unwind PROGRAM SECONDS [FREQ [SAVE]]
 *        bench-unwind --replay FILE
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

/* The saved file: a header, the modules (each with its path's length and bytes), the
 * samples (each with its stack's bytes). Native layout: read back by the same machine. */
struct saved_header {
	char magic[8];
	uint32_t n_mods, n_samples;
	int32_t pid;
};
static const char SAVED_MAGIC[8] = "sondeuw1";
/* A module as saved: the fields of the first struct rec_module, whose layout the files
 * kept (the path's pointer as zeros), so that builds from before and after a change to the
 * recorder's struct replay each other's files. */
struct saved_module {
	uint64_t start, end, pgoff;
	uint32_t id, flags;
	uint64_t dev, inode;
	uint64_t unused; /* was the path's pointer */
};

static int save(const char *path, const struct samples *s, const struct self_maps *m)
{
	FILE *f = fopen(path, "wb");
	struct saved_header h = {.n_mods = (uint32_t)m->mods.n, .n_samples = (uint32_t)s->n,
				 .pid = m->find.pid};
	bool ok = f != NULL;

	memcpy(h.magic, SAVED_MAGIC, sizeof(h.magic));
	ok = ok && fwrite(&h, sizeof(h), 1, f) == 1;
	for (size_t i = 0; ok && i < m->mods.n; i++) {
		const struct rec_module *e = &m->mods.m[i];
		struct saved_module sm = {e->start, e->end, e->pgoff, e->id, e->flags, e->dev,
					  e->inode, 0};
		uint32_t len = e->path ? (uint32_t)strlen(e->path) : 0;
		ok = fwrite(&sm, sizeof(sm), 1, f) == 1 && fwrite(&len, sizeof(len), 1, f) == 1 &&
		     fwrite(e->path ? e->path : "", 1, len, f) == len;
	}
	for (size_t i = 0; ok && i < s->n; i++) {
		const struct sample *e = &s->v[i];
		ok = fwrite(e, sizeof(*e), 1, f) == 1 && fwrite(e->data, 1, e->len, f) == e->len;
	}
	if (f && fclose(f))
		ok = false;
	if (!ok)
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
	return ok ? 0 : -1;
}

static int load(const char *path, struct samples *s, struct self_maps *m)
{
	FILE *f = fopen(path, "rb");
	struct saved_header h;
	bool ok = f && fread(&h, sizeof(h), 1, f) == 1 &&
		  !memcmp(h.magic, SAVED_MAGIC, sizeof(h.magic));

	for (uint32_t i = 0; ok && i < h.n_mods; i++) {
		struct saved_module sm;
		uint32_t len;
		char p[4096];
		ok = fread(&sm, sizeof(sm), 1, f) == 1 && fread(&len, sizeof(len), 1, f) == 1 &&
		     len < sizeof(p) && fread(p, 1, len, f) == len;
		if (ok) {
			p[len] = 0;
			struct rec_module e = {.start = sm.start,
					       .end = sm.end,
					       .pgoff = sm.pgoff,
					       .id = sm.id,
					       .flags = sm.flags,
					       .dev = sm.dev,
					       .inode = sm.inode,
					       .path = p};
			ok = sonde__modtable_insert(&m->mods, &e) == 0;
		}
	}
	if (ok && !(s->v = calloc(h.n_samples ? h.n_samples : 1, sizeof(*s->v))))
		ok = false;
	for (uint32_t i = 0; ok && i < h.n_samples; i++) {
		struct sample *e = &s->v[i];
		ok = fread(e, sizeof(*e), 1, f) == 1 && (e->data = malloc(e->len ? e->len : 1)) &&
		     fread(e->data, 1, e->len, f) == e->len;
		if (ok)
			s->n = s->cap = i + 1;
		else if (e->data)
			free(e->data);
	}
	if (f)
		fclose(f);
	if (!ok) {
		fprintf(stderr, "cannot read %s\n", path);
		return -1;
	}
	m->find = (struct rec_find_ctx){.mods = &m->mods, .cache = m->cache, .pid = h.pid};
	return 0;
}

static struct sonde_spool_frame frames[UNWIND_MAX_FRAMES];

static uint64_t unwind_all(const struct samples *s, struct self_maps *m, struct unwind_stats *st)
{
	uint64_t total = 0;

	for (size_t i = 0; i < s->n; i++) {
		struct unwind_stack stack = {s->v[i].data, s->v[i].len, s->v[i].sp};
		enum unwind_end end;
		total += sonde__record_unwind(&s->v[i].regs, &stack, &m->mods, m->cache,
					      m->find.pid, st, frames, UNWIND_MAX_FRAMES, &end);
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
		fprintf(stderr, "usage: bench-unwind PROGRAM SECONDS [FREQ [SAVE]]\n"
				"       bench-unwind --replay FILE\n");
		return 2;
	}
	if (!strcmp(argv[1], "--replay")) {
		if (!maps.cache || load(argv[2], &s, m) < 0 || !s.n)
			return 1;
	} else {
		char *child[] = {argv[1], argv[2], NULL};
		if (!maps.cache || record(child, freq, &s, m) < 0 || !s.n) {
			fprintf(stderr, "no samples recorded\n");
			return 1;
		}
		if (argc > 4 && save(argv[4], &s, m) < 0)
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
