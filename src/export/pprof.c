/* pprof's profile.proto (github.com/google/pprof/proto/profile.proto), gzip'd as pprof
 * expects. Samples are aggregated per (stack, thread, CPU), with pid/tid/thread labels and,
 * when the CPU was recorded, a numeric `cpu` label (as `perf` users filter by); inlined
 * frames are extra Line entries of one Location, innermost first.
 *
 * Every sample carries the four values of sample_types[]: on-CPU samples count in the
 * first two (and the last), off-CPU intervals in the last two, so that one file answers
 * every metric and `-sample_index` picks one; default_sample_type follows the metric. */
#include <errno.h>
#include <string.h>
#include <zlib.h>

#include <sonde/spool.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "base/u64map.h"
#include "base/out.h"
#include "export/profile.h"

/* profile.proto field numbers */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_COMMENT = 13,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,
	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	LABEL_NUM_UNIT = 4,
	MAPPING_ID = 1,
	MAPPING_MEMORY_START = 2,
	MAPPING_MEMORY_LIMIT = 3,
	MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5,
	MAPPING_BUILD_ID = 6,
	MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8,
	MAPPING_HAS_LINE_NUMBERS = 9,
	MAPPING_HAS_INLINE_FRAMES = 10,
	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_ADDRESS = 3,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	LINE_LINE = 2,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_SYSTEM_NAME = 3,
	FUNCTION_FILENAME = 4,
};

struct agg {
	uint32_t node, thread, cpu;
	uint64_t count;	     /* on-CPU samples */
	uint64_t wall_on_ns; /* their weight under the wall metric */
	uint64_t offcpu_ns;  /* off-CPU time */
};

/* The sample types, in the order of every Sample's values. */
enum { V_SAMPLES, V_CPU, V_OFF_CPU, V_WALL, N_VALUES };
static const char *const sample_types[N_VALUES][2] = {
	[V_SAMPLES] = {"samples", "count"},
	[V_CPU] = {"cpu", "nanoseconds"},
	[V_OFF_CPU] = {"off_cpu", "nanoseconds"},
	[V_WALL] = {"wall", "nanoseconds"},
};

struct pp {
	const struct sonde_profile *p;
	enum sonde_profile_metric metric;
	struct buf b;		/* the Profile message */
	struct buf msg, packed; /* scratch for one nested message and one packed field */
	uint32_t *str_map;	/* model string id -> pprof string index (0: not yet) */
	ARR(const char *) tab;	/* the pprof string table */
	ARR(struct agg) aggs;
	struct idmap agg_index;
	uint32_t k_pid, k_tid, k_thread, k_cpu; /* label keys */
	uint32_t u_cpu;				/* the cpu label's unit */
	bool failed;				/* a string table allocation failed */
};

/* The pprof index of a model string, appended to the table on first use. Allocation
 * failures set pp->failed (and yield 0) so that callers check once at the end. */
static uint32_t str_of(struct pp *pp, uint32_t id)
{
	if (!id)
		return 0;
	if (!pp->str_map[id]) {
		const char **slot = ARR_PUSH(pp->tab);
		if (!slot) {
			pp->failed = true;
			return 0;
		}
		*slot = prof_str(pp->p, id);
		pp->str_map[id] = pp->tab.n - 1;
	}
	return pp->str_map[id];
}

/* Strings that are not in the model (value type names, label keys): few, and looked up
 * while the table is still short, so a scan. */
static uint32_t str_lit(struct pp *pp, const char *s)
{
	for (uint32_t i = 1; i < pp->tab.n; i++)
		if (strcmp(pp->tab.v[i], s) == 0)
			return i;
	const char **slot = ARR_PUSH(pp->tab);
	if (!slot) {
		pp->failed = true;
		return 0;
	}
	*slot = s;
	return pp->tab.n - 1;
}

static void put_nested(struct buf *b, uint32_t field, const struct buf *m)
{
	sonde__pb_put_bytes(b, field, m->data, m->len);
}

static void value_type(struct pp *pp, uint32_t field, const char *type, const char *unit)
{
	sonde__buf_reset(&pp->msg);
	sonde__pb_put_varint(&pp->msg, VALUE_TYPE_TYPE, (uint64_t)str_lit(pp, type));
	sonde__pb_put_varint(&pp->msg, VALUE_TYPE_UNIT, (uint64_t)str_lit(pp, unit));
	put_nested(&pp->b, field, &pp->msg);
}

static bool agg_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct agg *a = &((const struct pp *)ctx)->aggs.v[id];
	const struct agg *k = key;

	return a->node == k->node && a->thread == k->thread && a->cpu == k->cpu;
}

static struct agg *agg_of(struct pp *pp, uint32_t node, uint32_t thread, uint32_t cpu)
{
	struct agg k = {node, thread, cpu, 0, 0, 0};
	uint32_t h = (uint32_t)u64_hash(((uint64_t)node << 32 | thread) ^
					(uint64_t)cpu * 0x9e3779b97f4a7c15ull);
	int64_t id = sonde__idmap_find(&pp->agg_index, h, agg_eq, pp, &k);

	if (id < 0) {
		struct agg *a = ARR_PUSH(pp->aggs);
		if (!a || sonde__idmap_insert(&pp->agg_index, h, pp->aggs.n - 1) < 0)
			return NULL;
		*a = k;
		id = pp->aggs.n - 1;
	}
	return &pp->aggs.v[id];
}

/* An interval's stack ends with its state's pseudo-frame, so it never shares an
 * aggregate with on-CPU samples: each Sample is one or the other. */
static int aggregate(struct pp *pp)
{
	const struct sonde_profile *p = pp->p;

	for (uint32_t i = 0; i < p->samples.n; i++) {
		const struct prof_sample *s = &p->samples.v[i];
		struct agg *a = agg_of(pp, s->node, s->thread, s->cpu);
		if (!a)
			return -ENOMEM;
		a->count += s->count;
		a->wall_on_ns += sonde__prof_sample_weight(p, s, SONDE_PROFILE_METRIC_WALL);
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *o = &p->offcpu.v[i];
		struct agg *a = agg_of(pp, o->node, o->thread, o->cpu);
		if (!a)
			return -ENOMEM;
		a->offcpu_ns += o->duration_ns;
	}
	return 0;
}

static void label(struct pp *pp, struct buf *m, uint32_t key, uint32_t str, int64_t num)
{
	sonde__buf_reset(&pp->packed);
	sonde__pb_put_varint(&pp->packed, LABEL_KEY, (uint64_t)key);
	if (str)
		sonde__pb_put_varint(&pp->packed, LABEL_STR, (uint64_t)str_of(pp, str));
	else
		sonde__pb_put_varint(&pp->packed, LABEL_NUM, (uint64_t)num);
	put_nested(m, SAMPLE_LABEL, &pp->packed);
}

/* pprof readers drop a numeric label whose value is 0 unless it names a unit, and CPU 0 is
 * a CPU like the others: the cpu label has one. */
static void cpu_label(struct pp *pp, struct buf *m, uint32_t cpu)
{
	sonde__buf_reset(&pp->packed);
	sonde__pb_put_varint(&pp->packed, LABEL_KEY, (uint64_t)pp->k_cpu);
	sonde__pb_put_varint(&pp->packed, LABEL_NUM, cpu);
	sonde__pb_put_varint(&pp->packed, LABEL_NUM_UNIT, (uint64_t)pp->u_cpu);
	put_nested(m, SAMPLE_LABEL, &pp->packed);
}

static void write_samples(struct pp *pp)
{
	const struct sonde_profile *p = pp->p;
	uint64_t period = p->info.sample_period_ns;

	for (uint32_t i = 0; i < pp->aggs.n; i++) {
		const struct agg *a = &pp->aggs.v[i];
		const struct prof_thread *t = &p->threads.v[a->thread];

		sonde__buf_reset(&pp->msg);
		sonde__buf_reset(&pp->packed);
		/* the leaf node holds the innermost location: walking up is leaf first */
		for (uint32_t n = a->node; n; n = p->nodes.v[n].parent)
			sonde__pb_put_varint_raw(&pp->packed, p->nodes.v[n].loc);
		put_nested(&pp->msg, SAMPLE_LOCATION_ID, &pp->packed);
		sonde__buf_reset(&pp->packed);
		sonde__pb_put_varint_raw(&pp->packed, a->count);
		sonde__pb_put_varint_raw(&pp->packed, a->count * period);
		sonde__pb_put_varint_raw(&pp->packed, a->offcpu_ns);
		sonde__pb_put_varint_raw(&pp->packed, a->wall_on_ns + a->offcpu_ns);
		put_nested(&pp->msg, SAMPLE_VALUE, &pp->packed);
		if (a->thread) {
			label(pp, &pp->msg, pp->k_pid, 0, t->pid);
			label(pp, &pp->msg, pp->k_tid, 0, t->tid);
			if (t->comm)
				label(pp, &pp->msg, pp->k_thread, t->comm, 0);
		}
		if (a->cpu != SONDE_SPOOL_CPU_NONE)
			cpu_label(pp, &pp->msg, a->cpu);
		put_nested(&pp->b, PROFILE_SAMPLE, &pp->msg);
	}
}

enum { HAS_FUNCTIONS = 1, HAS_FILENAMES = 2, HAS_LINES = 4, HAS_INLINES = 8 };

/* Whether module m's file name starts with comm (the kernel's 15 bytes of it). */
static bool named_like(const struct sonde_profile *p, const struct prof_module *m,
		       const char *comm)
{
	const char *path = prof_str(p, m->path), *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return *comm && strncmp(base, comm, strlen(comm)) == 0;
}

/* The main binary, which pprof takes to be the first mapping (and `go tool pprof` names
 * as "File:"): the executable of the process with the most samples, that is its module
 * named like its command, else its lowest-mapped file (executables are mapped below the
 * shared libraries). Module ids in the profile follow the recording's order, in which a
 * machine-wide recording meets some process's [vdso] first. 0 when there is none. */
static uint32_t main_module(const struct sonde_profile *p)
{
	uint64_t *by_thread = sonde__calloc(p->threads.n ? p->threads.n : 1, sizeof(uint64_t));
	struct u64map by_pid = U64MAP_INIT;
	uint32_t pid = 0, best = 0, thread = 0;
	uint64_t most = 0;

	if (!by_thread)
		return 0;
	for (uint32_t i = 0; i < p->samples.n; i++)
		if (p->samples.v[i].thread < p->threads.n)
			by_thread[p->samples.v[i].thread] += p->samples.v[i].count;
	for (uint32_t t = 1; t < p->threads.n; t++) {
		uint64_t key = (uint64_t)p->threads.v[t].pid + 1, *n;
		if (!by_thread[t])
			continue;
		n = sonde__u64map_get(&by_pid, key);
		uint64_t sum = (n ? *n : 0) + by_thread[t];
		if (sonde__u64map_put(&by_pid, key, sum) < 0)
			break;
		if (sum > most) {
			most = sum;
			pid = p->threads.v[t].pid;
		}
	}
	sonde__u64map_free(&by_pid);
	sonde__free(by_thread);
	/* the command: its main thread's, else that of any of its threads */
	for (uint32_t t = 1; most && t < p->threads.n; t++)
		if (p->threads.v[t].pid == pid && (!thread || p->threads.v[t].tid == pid))
			thread = t;
	const char *comm = thread ? prof_str(p, p->threads.v[thread].comm) : "";
	for (uint32_t i = 1; most && i < p->modules.n; i++) {
		const struct prof_module *m = &p->modules.v[i];
		const char *path = prof_str(p, m->path);
		if (m->pid != pid || !*path || path[0] == '[')
			continue;
		if (!best || (named_like(p, m, comm) && !named_like(p, &p->modules.v[best], comm)) ||
		    (named_like(p, m, comm) == named_like(p, &p->modules.v[best], comm) &&
		     m->start < p->modules.v[best].start))
			best = i;
	}
	return best;
}

static void write_mapping(struct pp *pp, uint32_t i, const uint8_t *has);

static void write_mappings(struct pp *pp)
{
	const struct sonde_profile *p = pp->p;
	uint8_t *has = sonde__calloc(p->modules.n, 1);

	if (!has) {
		pp->b.failed = true;
		return;
	}
	for (uint32_t i = 1; i < p->locs.n; i++) {
		const struct prof_loc *l = &p->locs.v[i];
		for (uint32_t j = 0; j < l->n_lines; j++) {
			const struct prof_line *ln = &p->lines.v[l->first_line + j];
			has[l->module] |= HAS_FUNCTIONS | (ln->line ? HAS_LINES : 0) |
					  (p->funcs.v[ln->func].file ? HAS_FILENAMES : 0) |
					  (l->n_lines > 1 ? HAS_INLINES : 0);
		}
	}
	uint32_t main = main_module(p);
	if (main)
		write_mapping(pp, main, has);
	for (uint32_t i = 1; i < p->modules.n; i++)
		if (i != main)
			write_mapping(pp, i, has);
	sonde__free(has);
}

static void write_mapping(struct pp *pp, uint32_t i, const uint8_t *has)
{
	const struct prof_module *m = &pp->p->modules.v[i];

	sonde__buf_reset(&pp->msg);
	sonde__pb_put_varint(&pp->msg, MAPPING_ID, i);
	sonde__pb_put_varint(&pp->msg, MAPPING_MEMORY_START, m->start);
	sonde__pb_put_varint(&pp->msg, MAPPING_MEMORY_LIMIT, m->end);
	sonde__pb_put_varint(&pp->msg, MAPPING_FILE_OFFSET, m->pgoff);
	sonde__pb_put_varint(&pp->msg, MAPPING_FILENAME, (uint64_t)str_of(pp, m->path));
	sonde__pb_put_varint(&pp->msg, MAPPING_BUILD_ID, (uint64_t)str_of(pp, m->build_id));
	sonde__pb_put_bool(&pp->msg, MAPPING_HAS_FUNCTIONS, has[i] & HAS_FUNCTIONS);
	sonde__pb_put_bool(&pp->msg, MAPPING_HAS_FILENAMES, has[i] & HAS_FILENAMES);
	sonde__pb_put_bool(&pp->msg, MAPPING_HAS_LINE_NUMBERS, has[i] & HAS_LINES);
	sonde__pb_put_bool(&pp->msg, MAPPING_HAS_INLINE_FRAMES, has[i] & HAS_INLINES);
	put_nested(&pp->b, PROFILE_MAPPING, &pp->msg);
}

static void write_locations(struct pp *pp, uint8_t *func_used)
{
	const struct sonde_profile *p = pp->p;

	for (uint32_t i = 1; i < p->locs.n; i++) {
		const struct prof_loc *l = &p->locs.v[i];
		sonde__buf_reset(&pp->msg);
		sonde__pb_put_varint(&pp->msg, LOCATION_ID, i);
		if (l->module)
			sonde__pb_put_varint(&pp->msg, LOCATION_MAPPING_ID, l->module);
		sonde__pb_put_varint(&pp->msg, LOCATION_ADDRESS, sonde__prof_loc_address(p, l));
		for (uint32_t j = 0; j < l->n_lines; j++) {
			const struct prof_line *ln = &p->lines.v[l->first_line + j];
			sonde__buf_reset(&pp->packed);
			sonde__pb_put_varint(&pp->packed, LINE_FUNCTION_ID, ln->func);
			if (ln->line)
				sonde__pb_put_varint(&pp->packed, LINE_LINE, ln->line);
			put_nested(&pp->msg, LOCATION_LINE, &pp->packed);
			func_used[ln->func] = 1;
		}
		put_nested(&pp->b, PROFILE_LOCATION, &pp->msg);
	}
}

static void write_functions(struct pp *pp, const uint8_t *func_used)
{
	const struct sonde_profile *p = pp->p;

	for (uint32_t i = 1; i < p->funcs.n; i++) {
		const struct tab_func *f = &p->funcs.v[i];
		if (!func_used[i])
			continue;
		sonde__buf_reset(&pp->msg);
		sonde__pb_put_varint(&pp->msg, FUNCTION_ID, i);
		sonde__pb_put_varint(&pp->msg, FUNCTION_NAME, (uint64_t)str_of(pp, f->name));
		sonde__pb_put_varint(&pp->msg, FUNCTION_SYSTEM_NAME, (uint64_t)str_of(pp, f->name));
		if (f->file)
			sonde__pb_put_varint(&pp->msg, FUNCTION_FILENAME,
					     (uint64_t)str_of(pp, f->file));
		put_nested(&pp->b, PROFILE_FUNCTION, &pp->msg);
	}
}

/* The type `-sample_index` starts on: cpu time for the CPU metric (samples when the
 * period, hence the time, is not known), off_cpu or wall for the others. */
static const char *default_type(const struct pp *pp)
{
	switch (pp->metric) {
	case SONDE_PROFILE_METRIC_OFF_CPU:
		return sample_types[V_OFF_CPU][0];
	case SONDE_PROFILE_METRIC_WALL:
		return sample_types[V_WALL][0];
	default:
		return sample_types[pp->p->info.sample_period_ns ? V_CPU : V_SAMPLES][0];
	}
}

/* From the recording's start (or the first sample) to the end of the last sample's
 * period or of the last off-CPU interval, whichever is later. */
static uint64_t duration(const struct sonde_profile *p)
{
	uint64_t period = p->info.sample_period_ns, from = UINT64_MAX, end = 0;

	if (p->samples.n) {
		from = p->first_time_ns;
		end = p->last_time_ns + period;
	}
	for (uint32_t i = 0; i < p->offcpu.n; i++) {
		const struct prof_offcpu *o = &p->offcpu.v[i];
		from = o->time_ns < from ? o->time_ns : from;
		end = o->time_ns + o->duration_ns > end ? o->time_ns + o->duration_ns : end;
	}
	if (from == UINT64_MAX)
		return 0;
	if (p->info.start_monotonic_ns && p->info.start_monotonic_ns <= from)
		from = p->info.start_monotonic_ns;
	return end - from;
}

static void write_header(struct pp *pp)
{
	const struct sonde_profile *p = pp->p;
	uint64_t period = p->info.sample_period_ns;

	for (int i = 0; i < N_VALUES; i++)
		value_type(pp, PROFILE_SAMPLE_TYPE, sample_types[i][0], sample_types[i][1]);
	if (period) {
		value_type(pp, PROFILE_PERIOD_TYPE, "cpu", "nanoseconds");
		sonde__pb_put_varint(&pp->b, PROFILE_PERIOD, period);
	}
	sonde__pb_put_varint(&pp->b, PROFILE_DEFAULT_SAMPLE_TYPE,
			     (uint64_t)str_lit(pp, default_type(pp)));
	if (p->info.start_time_ns)
		sonde__pb_put_varint(&pp->b, PROFILE_TIME_NANOS, p->info.start_time_ns);
	sonde__pb_put_varint(&pp->b, PROFILE_DURATION_NANOS, duration(p));
	sonde__pb_put_varint(&pp->b, PROFILE_COMMENT, (uint64_t)str_lit(pp, "recorded by sonde"));
	pp->k_pid = str_lit(pp, "pid");
	pp->k_tid = str_lit(pp, "tid");
	pp->k_thread = str_lit(pp, "thread");
	pp->k_cpu = str_lit(pp, "cpu");
	pp->u_cpu = str_lit(pp, "index");
}

/* zlib's state comes from the library's allocator too (include/sonde/alloc.h). */
static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
	return sonde__calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p)
{
	sonde__free(p);
}

static int gzip_to_fd(const struct buf *b, int fd)
{
	z_stream z = {.zalloc = z_alloc, .zfree = z_free};
	uint8_t chunk[1 << 16];
	struct out o;
	int zr;

	/* windowBits 15 + 16: a gzip wrapper rather than zlib's */
	if (b->len > UINT32_MAX)
		return -EFBIG;
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		return -ENOMEM;
	sonde__out_init(&o, fd);
	z.next_in = b->data;
	z.avail_in = (uInt)b->len;
	do {
		z.next_out = chunk;
		z.avail_out = sizeof(chunk);
		zr = deflate(&z, Z_FINISH);
		sonde__out_write(&o, chunk, sizeof(chunk) - z.avail_out);
	} while (zr == Z_OK && !o.err);
	deflateEnd(&z);
	int err = sonde__out_close(&o);
	if (!err && zr != Z_STREAM_END)
		err = -EIO;
	return err;
}

int sonde__prof_write_pprof(const struct sonde_profile *p, int fd, enum sonde_profile_metric m)
{
	struct pp pp = {.p = p, .metric = m};
	uint8_t *func_used = sonde__calloc(p->funcs.n, 1);
	int err = -ENOMEM;

	pp.str_map = sonde__calloc(strtab_count(&p->strs), sizeof(*pp.str_map));
	if (!func_used || !pp.str_map || !ARR_PUSH(pp.tab))
		goto out;
	pp.tab.v[0] = "";
	if (p->strs.chars.len > UINT32_MAX || aggregate(&pp) < 0)
		goto out;
	write_header(&pp);
	write_samples(&pp);
	write_mappings(&pp);
	write_locations(&pp, func_used);
	write_functions(&pp, func_used);
	for (uint32_t i = 0; i < pp.tab.n; i++)
		sonde__pb_put_string(&pp.b, PROFILE_STRING_TABLE, pp.tab.v[i]);
	if (buf_error(&pp.b) || buf_error(&pp.msg) || buf_error(&pp.packed) || pp.failed)
		goto out;
	err = gzip_to_fd(&pp.b, fd);
out:
	sonde__buf_free(&pp.b);
	sonde__buf_free(&pp.msg);
	sonde__buf_free(&pp.packed);
	sonde__free(pp.str_map);
	ARR_FREE(pp.tab);
	ARR_FREE(pp.aggs);
	sonde__idmap_free(&pp.agg_index);
	sonde__free(func_used);
	return err;
}
