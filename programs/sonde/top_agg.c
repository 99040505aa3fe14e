/* sonde top's sliding-window aggregate (top.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "top.h"

enum { MAX_SYMS = 16 };

struct entry {
	uint64_t time_ns;
	uint32_t node;
};

struct func {
	char *name;
	const char *module; /* points into name's allocation */
	uint64_t self, total;
	uint64_t mark; /* last node that counted this function in total */
	uint32_t hash_next;
};

struct top_agg {
	struct sonde_tail *t;
	uint64_t window_ns;
	uint32_t pid, tid;
	uint64_t last_time;

	struct entry *q; /* ring of the window's samples, oldest at head */
	size_t head, n, cap;
	uint32_t *node_count; /* samples in the window per stack node id */
	uint32_t *node_pid;   /* process of the last sample of each node */
	size_t nodes_cap, node_pid_cap;

	uint32_t *frame_func; /* frame id -> function index + 1 (0: not named yet) */
	size_t frames_cap;
	struct func *funcs; /* funcs[0] unused */
	size_t n_funcs, funcs_cap;
	uint32_t *buckets; /* function index by name hash */
	size_t n_buckets;

	struct top_row *rows;
	size_t rows_cap;
	uint64_t stamp;
};

static int grow(void *pp, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	void *p = realloc(*(void **)pp, n * elem);
	if (!p)
		return -ENOMEM;
	memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
	*(void **)pp = p;
	*cap = n;
	return 0;
}

struct top_agg *top_agg_new(struct sonde_tail *t, uint64_t window_ns, uint32_t pid, uint32_t tid)
{
	struct top_agg *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->t = t;
	a->window_ns = window_ns;
	a->pid = pid;
	a->tid = tid;
	a->n_funcs = 1;
	a->n_buckets = 4096;
	a->buckets = calloc(a->n_buckets, sizeof(*a->buckets));
	if (grow(&a->funcs, &a->funcs_cap, 1, sizeof(*a->funcs)) < 0 || !a->buckets) {
		top_agg_free(a);
		errno = ENOMEM;
		return NULL;
	}
	return a;
}

void top_agg_free(struct top_agg *a)
{
	if (!a)
		return;
	for (size_t i = 1; i < a->n_funcs; i++)
		free(a->funcs[i].name);
	free(a->funcs);
	free(a->buckets);
	free(a->q);
	free(a->node_count);
	free(a->node_pid);
	free(a->frame_func);
	free(a->rows);
	free(a);
}

static uint32_t str_hash(const char *s, const char *m)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	for (; *m; m++)
		h = (h ^ (uint8_t)*m) * 16777619u;
	return h;
}

/* The index of function (name, module), added when new; 0 when out of memory. */
static uint32_t func_intern(struct top_agg *a, const char *name, const char *module)
{
	uint32_t *b = &a->buckets[str_hash(name, module) & (a->n_buckets - 1)];

	for (uint32_t i = *b; i; i = a->funcs[i].hash_next)
		if (strcmp(a->funcs[i].name, name) == 0 && strcmp(a->funcs[i].module, module) == 0)
			return i;
	if (grow(&a->funcs, &a->funcs_cap, a->n_funcs + 1, sizeof(*a->funcs)) < 0)
		return 0;
	size_t ln = strlen(name), lm = strlen(module);
	char *s = malloc(ln + lm + 2);
	if (!s)
		return 0;
	memcpy(s, name, ln + 1);
	memcpy(s + ln + 1, module, lm + 1);
	struct func *f = &a->funcs[a->n_funcs];
	*f = (struct func){.name = s, .module = s + ln + 1, .hash_next = *b};
	*b = (uint32_t)a->n_funcs;
	return (uint32_t)a->n_funcs++;
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path ? path : "";
}

/* The function of frame id `frame` (pid: of a sample that holds it). */
static uint32_t frame_func(struct top_agg *a, uint32_t frame, uint32_t pid)
{
	struct sonde_sym_frame sym[MAX_SYMS];

	if (grow(&a->frame_func, &a->frames_cap, (size_t)frame + 1, sizeof(*a->frame_func)) < 0)
		return 0;
	if (a->frame_func[frame])
		return a->frame_func[frame] - 1;
	int n = sonde_tail__symbolize(a->t, frame, pid, sym, MAX_SYMS);
	if (n <= 0)
		return 0;
	/* The last result is the real function; those before it were inlined into it. */
	uint32_t f = func_intern(a, sym[n - 1].name, base_name(sym[n - 1].module));
	if (f)
		a->frame_func[frame] = f + 1;
	return f;
}

/* Forgets the names of the frames of process pid. */
static void invalidate(struct top_agg *a, uint32_t pid)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	for (uint32_t id = 1; id < a->frames_cap; id++) {
		if (!a->frame_func[id] || sonde_tail__get_frame(a->t, id, &f) < 0)
			continue;
		/* Frames outside modules were named with a sample's pid: forget them all. */
		if (!f.module ||
		    (sonde_tail__get_module(a->t, f.module, &m) == 0 && m.def.pid == pid))
			a->frame_func[id] = 0;
	}
}

static int push(struct top_agg *a, uint64_t time_ns, uint32_t node, uint32_t pid)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 4096;
		struct entry *q = malloc(cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		for (size_t i = 0; i < a->n; i++)
			q[i] = a->q[(a->head + i) % a->cap];
		free(a->q);
		a->q = q;
		a->cap = cap;
		a->head = 0;
	}
	if (grow(&a->node_count, &a->nodes_cap, (size_t)node + 1, sizeof(*a->node_count)) < 0 ||
	    grow(&a->node_pid, &a->node_pid_cap, (size_t)node + 1, sizeof(*a->node_pid)) < 0)
		return -ENOMEM;
	a->q[(a->head + a->n++) % a->cap] = (struct entry){time_ns, node};
	a->node_count[node]++;
	a->node_pid[node] = pid;
	return 0;
}

int top_agg_add(struct top_agg *a, const struct sonde_tail_batch *b)
{
	struct sonde_spool_thread th;

	for (size_t i = 0; i < b->n_invalidated; i++)
		invalidate(a, b->invalidated_pids[i]);
	for (size_t i = 0; i < b->n_samples; i++) {
		const struct sonde_spool_sample *s = &b->samples[i];
		if (sonde_tail__get_thread(a->t, s->thread, &th) < 0)
			continue;
		if ((a->pid && th.pid != a->pid) || (a->tid && th.tid != a->tid))
			continue;
		a->last_time = s->time_ns;
		int err = push(a, s->time_ns, s->stack, th.pid);
		if (err)
			return err;
	}
	return 0;
}

void top_agg_expire(struct top_agg *a, uint64_t now_ns)
{
	uint64_t floor = now_ns > a->window_ns ? now_ns - a->window_ns : 0;

	while (a->n && a->q[a->head].time_ns < floor) {
		a->node_count[a->q[a->head].node]--;
		a->head = (a->head + 1) % a->cap;
		a->n--;
	}
}

uint64_t top_agg_samples(const struct top_agg *a)
{
	return a->n;
}

uint64_t top_agg_last_time(const struct top_agg *a)
{
	return a->last_time;
}

/* Adds count samples of stack node `node` to the functions on it. */
static void count_node(struct top_agg *a, uint32_t node, uint64_t count)
{
	uint32_t pid = a->node_pid[node], parent, frame;
	bool leaf = true;

	a->stamp++;
	for (; node && sonde_tail__get_node(a->t, node, &parent, &frame) == 0; node = parent) {
		uint32_t f = frame_func(a, frame, pid);
		if (!f)
			continue;
		if (leaf)
			a->funcs[f].self += count;
		leaf = false;
		/* Recursion puts a function on a stack several times: count it once. */
		if (a->funcs[f].mark != a->stamp) {
			a->funcs[f].mark = a->stamp;
			a->funcs[f].total += count;
		}
	}
}

static bool sort_by_total;

static int row_cmp(const void *x, const void *y)
{
	const struct top_row *a = x, *b = y;
	uint64_t ka = sort_by_total ? a->total : a->self, kb = sort_by_total ? b->total : b->self;

	if (ka != kb)
		return ka < kb ? 1 : -1;
	if (a->total != b->total)
		return a->total < b->total ? 1 : -1;
	return strcmp(a->name, b->name);
}

int top_agg_rows(struct top_agg *a, bool by_total, const struct top_row **rows)
{
	size_t n = 0;

	for (size_t i = 1; i < a->n_funcs; i++)
		a->funcs[i].self = a->funcs[i].total = 0;
	for (size_t node = 1; node < a->nodes_cap; node++)
		if (a->node_count[node])
			count_node(a, (uint32_t)node, a->node_count[node]);
	if (grow(&a->rows, &a->rows_cap, a->n_funcs, sizeof(*a->rows)) < 0)
		return -ENOMEM;
	for (size_t i = 1; i < a->n_funcs; i++) {
		const struct func *f = &a->funcs[i];
		if (f->total)
			a->rows[n++] = (struct top_row){f->name, f->module, f->self, f->total};
	}
	sort_by_total = by_total;
	qsort(a->rows, n, sizeof(*a->rows), row_cmp);
	*rows = a->rows;
	return (int)n;
}

/* The length of the bracketed group at s (s[0] is '<' or '('), through its matching close;
 * 0 when it does not close. */
static size_t group_len(const char *s)
{
	int depth = 0;

	for (size_t i = 0; s[i]; i++) {
		if (s[i] == '<' || s[i] == '(')
			depth++;
		else if ((s[i] == '>' || s[i] == ')') && --depth == 0)
			return i + 1;
	}
	return 0;
}

const char *top_short_name(const char *name, char *out, size_t cap)
{
	char tmp[1024];
	size_t n = 0, len;

	for (const char *s = name; *s && n + 6 < sizeof(tmp);) {
		bool op = s - name >= 8 && !strncmp(s - 8, "operator", 8);
		if ((*s == '<' || *s == '(') && !op && strncmp(s, "(anonymous namespace)", 21) &&
		    (len = group_len(s)) > 2) {
			tmp[n++] = *s;
			memcpy(tmp + n, "...", 3);
			n += 3;
			tmp[n++] = s[len - 1];
			s += len;
			continue;
		}
		tmp[n++] = *s++;
		/* operator<<, operator(), operator<=: the operator's own brackets stay */
		if (op && (*s == '<' || *s == ')' || *s == '='))
			tmp[n++] = *s++;
	}
	tmp[n] = 0;
	if (cap < 4 || n < cap) {
		snprintf(out, cap, "%s", tmp);
		return out;
	}
	memcpy(out, tmp, cap - 4); /* still too long: cut, and say so */
	memcpy(out + cap - 4, "...", 4);
	return out;
}
