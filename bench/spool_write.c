/* What the spool writer costs a recording: the samples of a spool (their threads, CPUs and
 * stacks) and its modules, defined and retired at their times, written again into a writer
 * whose output is counted and dropped. The recording's stacks are read once, before the
 * clock starts: what is timed is the writer alone (interning the stacks, checking frames
 * against live modules, encoding), CPU time per sample over REPS runs (median, min, max),
 * after an untimed run that hashes what the writer wrote.
 *
 * A spool written by `sonde record -a` on a busy machine has the stacks of every process
 * it ran, each process's modules and their retirements: the writer's work in the recorder.
 * To compare two writers, build this file against each library and run the two
 * interleaved, e.g.:
 *
 *   cc -O2 -Iinclude bench/spool_write.c OLD/build/release/libsonde.a -o /tmp/old-bsw \
 *      -lelf -ldw -lzstd -lz -lpthread -lm
 *   for i in 1 2 3; do /tmp/old-bsw a.spool 5; build/release/bench-spool-write a.spool 5; done
 *
 * usage: bench-spool-write IN.spool [REPS]   (default 5)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sonde/error.h>
#include <sonde/spool.h>
#include <sonde/spool_reader.h>

/* What is replayed, in time order; at equal times modules are defined first and retired
 * last, so that a sample between them finds its module live. */
enum op_kind { OP_MODULE, OP_SAMPLE, OP_RETIRE };

struct op {
	uint64_t time;
	enum op_kind kind;
	uint32_t arg; /* module id, sample index, or pid */
};

struct sample {
	uint32_t thread, cpu, flags;
	size_t first, n; /* its frames in frames[first, first + n), leaf first */
};

struct replay {
	struct sonde_spool *in;
	struct sonde_spool_info info;
	struct op *ops;
	size_t n_ops;
	struct sample *samples;
	struct sonde_spool_frame *frames;
	size_t n_frames;
};

static int op_cmp(const void *a, const void *b)
{
	const struct op *x = a, *y = b;

	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	if (x->kind != y->kind)
		return (int)x->kind - (int)y->kind;
	return (x->arg > y->arg) - (x->arg < y->arg);
}

/* Reads every sample's stack into memory and lists the operations. 0 or -errno. */
static int load(struct replay *rp)
{
	static uint32_t ids[SONDE_SPOOL_MAX_DEPTH];
	uint64_t n = rp->info.samples;
	size_t cap_frames = 1 << 16;

	rp->ops = calloc(n + 2 * (size_t)rp->info.modules, sizeof(*rp->ops));
	rp->samples = calloc(n ? n : 1, sizeof(*rp->samples));
	rp->frames = malloc(cap_frames * sizeof(*rp->frames));
	if (!rp->ops || !rp->samples || !rp->frames)
		return -ENOMEM;
	for (uint32_t i = 1; i <= rp->info.modules; i++) {
		struct sonde_spool_module m;
		int err = sonde_spool__get_module(rp->in, i, &m);
		if (err)
			return err;
		rp->ops[rp->n_ops++] = (struct op){m.time_ns, OP_MODULE, i};
		if (m.retired)
			rp->ops[rp->n_ops++] = (struct op){m.retired_ns, OP_RETIRE, m.def.pid};
	}
	for (uint64_t i = 0; i < n; i++) {
		struct sonde_spool_sample s;
		int err = sonde_spool__get_sample(rp->in, i, &s);
		int depth =
			err ? err
			    : sonde_spool__get_stack(rp->in, s.stack, ids, SONDE_SPOOL_MAX_DEPTH);
		if (depth < 0)
			return depth;
		if (rp->n_frames + (size_t)depth > cap_frames) {
			cap_frames = 2 * (rp->n_frames + (size_t)depth);
			void *f = realloc(rp->frames, cap_frames * sizeof(*rp->frames));
			if (!f)
				return -ENOMEM;
			rp->frames = f;
		}
		for (int d = 0; d < depth; d++)
			if ((err = sonde_spool__get_frame(rp->in, ids[d],
							  &rp->frames[rp->n_frames + d])))
				return err;
		rp->samples[i] =
			(struct sample){s.thread, s.cpu, s.flags, rp->n_frames, (size_t)depth};
		rp->n_frames += (size_t)depth;
		rp->ops[rp->n_ops++] = (struct op){s.time_ns, OP_SAMPLE, (uint32_t)i};
	}
	qsort(rp->ops, rp->n_ops, sizeof(*rp->ops), op_cmp);
	/* one retirement per process and time: every module of the process says it */
	size_t k = 0;
	for (size_t i = 0; i < rp->n_ops; i++)
		if (!k || op_cmp(&rp->ops[i], &rp->ops[k - 1]) || rp->ops[i].kind != OP_RETIRE)
			rp->ops[k++] = rp->ops[i];
	rp->n_ops = k;
	return 0;
}

/* What a run wrote: its size and, in the untimed first run, an FNV-1a hash of its bytes,
 * which two writers of the same format give the same. */
struct sink {
	uint64_t bytes, hash;
	bool hashing;
};

static int drop(void *ctx, const void *buf, size_t len)
{
	struct sink *k = ctx;
	const uint8_t *p = buf;

	k->bytes += len;
	for (size_t i = 0; k->hashing && i < len; i++)
		k->hash = (k->hash ^ p[i]) * 0x100000001b3ULL;
	return 0;
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One replay: its CPU seconds into *cpu; the samples the writer refused into *refused. */
static int run(const struct replay *rp, double *cpu, struct sink *out, uint64_t *refused)
{
	struct sonde_spool_writer *w;

	*out = (struct sink){0, 0xcbf29ce484222325ULL, out->hashing};
	w = sonde_spool_writer__new(drop, out, &rp->info.header);
	int err = 0;

	if (!w)
		return -errno;
	*refused = 0;
	for (uint32_t i = 1; i <= rp->info.threads && !err; i++) {
		struct sonde_spool_thread t;
		uint32_t id;
		err = sonde_spool__get_thread(rp->in, i, &t);
		if (!err)
			err = sonde_spool_writer__add_thread(w, 0, t.pid, t.tid, t.comm, &id);
	}
	double start = cpu_now();
	for (size_t i = 0; i < rp->n_ops && !err; i++) {
		const struct op *o = &rp->ops[i];
		struct sonde_spool_module m;
		uint32_t id;
		switch (o->kind) {
		case OP_MODULE:
			err = sonde_spool__get_module(rp->in, o->arg, &m);
			if (!err)
				err = sonde_spool_writer__add_module(w, o->time, &m.def, &id);
			break;
		case OP_RETIRE:
			err = sonde_spool_writer__retire_process(w, o->time, o->arg);
			break;
		case OP_SAMPLE: {
			const struct sample *s = &rp->samples[o->arg];
			int r = sonde_spool_writer__add_sample_cpu(w, o->time, s->thread, s->cpu,
								   rp->frames + s->first, s->n,
								   s->flags);
			*refused += r == -EINVAL;
			err = r == -EINVAL ? 0 : r;
			break;
		}
		}
	}
	if (!err)
		err = sonde_spool_writer__finish(w);
	*cpu = cpu_now() - start;
	sonde_spool_writer__free(w);
	return err;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct replay rp = {0};
	int reps = argc > 2 ? atoi(argv[2]) : 5;
	uint64_t off = 0;

	if (argc < 2 || reps < 1 || reps > 1000) {
		fprintf(stderr, "usage: bench-spool-write IN.spool [REPS]\n");
		return 2;
	}
	rp.in = sonde_spool__open(argv[1], &off);
	if (!rp.in) {
		fprintf(stderr, "bench-spool-write: %s: %s (at byte %llu)\n", argv[1],
			sonde_strerror(-errno), (unsigned long long)off);
		return 1;
	}
	sonde_spool__get_info(rp.in, &rp.info);
	int err = load(&rp);
	double *cpu = calloc((size_t)reps, sizeof(*cpu));
	struct sink out = {.hashing = true}, timed = {0};
	uint64_t refused = 0;
	double untimed;
	if (!err)
		err = run(&rp, &untimed, &out, &refused);
	for (int i = 0; i < reps && !err && cpu; i++)
		err = run(&rp, &cpu[i], &timed, &refused);
	if (err || !cpu) {
		fprintf(stderr, "bench-spool-write: %s\n", sonde_strerror(err ? err : -ENOMEM));
		return 1;
	}
	qsort(cpu, (size_t)reps, sizeof(*cpu), dbl_cmp);
	double per = 1e9 / (double)(rp.info.samples ? rp.info.samples : 1);
	printf("%llu samples, %.1f frames each, %u modules; %llu refused (a module retired at "
	       "the sample's time); %.0f ns a sample: median of %d [%.0f-%.0f]; wrote %llu bytes, "
	       "FNV-1a %016llx\n",
	       (unsigned long long)rp.info.samples,
	       (double)rp.n_frames / (double)(rp.info.samples ? rp.info.samples : 1),
	       rp.info.modules, (unsigned long long)refused, cpu[reps / 2] * per, reps,
	       cpu[0] * per, cpu[reps - 1] * per, (unsigned long long)out.bytes,
	       (unsigned long long)out.hash);
	free(cpu);
	free(rp.ops);
	free(rp.samples);
	free(rp.frames);
	sonde_spool__close(rp.in);
	return 0;
}
