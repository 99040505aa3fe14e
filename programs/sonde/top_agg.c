/* sonde top's sliding window (top.h): the samples of the window the view's filter keeps,
 * in time order, handed to the library's view (include/sonde/view.h) at each refresh by
 * their stack's view id, which aggregates, sorts and cuts them. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/u64map.h"
#include "top.h"

enum { MAX_SYMS = 16 };

struct entry {
	uint64_t time_ns;
	uint32_t node, thread; /* the tail's stack node and thread ids */
};

struct top_agg {
	struct sonde_tail *t;
	struct sonde_view *v;
	uint64_t window_ns;
	uint32_t pid, tid; /* the filter's lists */
	struct sonde_view_filter filter;
	uint64_t last_time;

	struct entry *q; /* ring of the window's samples, oldest at head */
	size_t head, n, cap;
	struct u64map main_thread; /* pid -> the tail's id of its main thread, once seen */
	uint32_t *node_stack; /* stack node -> the view's stack id + 1 (0: not resolved yet) */
	size_t nodes_cap;

	uint32_t *frame_func; /* frame id -> the view's function id (0: not named yet) */
	size_t frames_cap;
	uint32_t *stack; /* the stack being expanded, function ids innermost first */
	size_t stack_cap;
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
	a->filter = (struct sonde_view_filter){.sz = sizeof(a->filter),
					       .pids = &a->pid,
					       .n_pids = pid != 0,
					       .tids = &a->tid,
					       .n_tids = tid != 0};
	struct sonde_view_opts vo = {.sz = sizeof(vo), .filter = &a->filter};
	a->v = sonde_view__new(&vo);
	if (!a->v) {
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
	sonde_view__free(a->v);
	free(a->q);
	sonde__u64map_free(&a->main_thread);
	free(a->node_stack);
	free(a->frame_func);
	free(a->stack);
	free(a);
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path ? path : "";
}

/* The view's function of frame id `frame` (pid: of a sample that holds it); 0 when it has
 * no name. */
static uint32_t frame_func(struct top_agg *a, uint32_t frame, uint32_t pid)
{
	struct sonde_sym_frame sym[MAX_SYMS];

	if (grow(&a->frame_func, &a->frames_cap, (size_t)frame + 1, sizeof(*a->frame_func)) < 0)
		return 0;
	if (a->frame_func[frame])
		return a->frame_func[frame];
	int n = sonde_tail__symbolize(a->t, frame, pid, sym, MAX_SYMS);
	if (n <= 0)
		return 0;
	/* The last result is the real function; those before it were inlined into it. */
	int64_t f = sonde_view__func(a->v, sym[n - 1].name, base_name(sym[n - 1].module));
	if (f <= 0)
		return 0;
	a->frame_func[frame] = (uint32_t)f;
	return (uint32_t)f;
}

/* Forgets the names of the frames of process pid, and every stack resolved. */
static void invalidate(struct top_agg *a, uint32_t pid)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	if (a->node_stack)
		memset(a->node_stack, 0, a->nodes_cap * sizeof(*a->node_stack));

	for (uint32_t id = 1; id < a->frames_cap; id++) {
		if (!a->frame_func[id] || sonde_tail__get_frame(a->t, id, &f) < 0)
			continue;
		/* Frames outside modules were named with a sample's pid: forget them all. */
		if (!f.module ||
		    (sonde_tail__get_module(a->t, f.module, &m) == 0 && m.def.pid == pid))
			a->frame_func[id] = 0;
	}
}

static int push(struct top_agg *a, uint64_t time_ns, uint32_t node, uint32_t thread)
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
	a->q[(a->head + a->n++) % a->cap] = (struct entry){time_ns, node, thread};
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
		struct sonde_view_event e = {
			.sz = sizeof(e), .pid = th.pid, .tid = th.tid, .comm = th.comm};
		if (sonde_view_filter__match(&a->filter, &e) != 1)
			continue;
		if (th.tid == th.pid && sonde__u64map_put(&a->main_thread, th.pid, s->thread) < 0)
			return -ENOMEM;
		a->last_time = s->time_ns;
		int err = push(a, s->time_ns, s->stack, s->thread);
		if (err)
			return err;
	}
	return 0;
}

void top_agg_expire(struct top_agg *a, uint64_t now_ns)
{
	uint64_t floor = now_ns > a->window_ns ? now_ns - a->window_ns : 0;

	while (a->n && a->q[a->head].time_ns < floor) {
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

/* The view's stack of stack node `node` of process pid: its named frames, innermost
 * first (a frame with no name is left out, so self goes to the innermost function that
 * has one), resolved once. */
static int64_t node_stack(struct top_agg *a, uint32_t node, uint32_t pid)
{
	uint32_t parent, frame;
	size_t n = 0;

	if (grow(&a->node_stack, &a->nodes_cap, (size_t)node + 1, sizeof(*a->node_stack)) < 0)
		return -ENOMEM;
	if (a->node_stack[node])
		return a->node_stack[node] - 1;
	for (uint32_t k = node; k && sonde_tail__get_node(a->t, k, &parent, &frame) == 0;
	     k = parent) {
		uint32_t f = frame_func(a, frame, pid);
		if (!f)
			continue;
		if (grow(&a->stack, &a->stack_cap, n + 1, sizeof(*a->stack)) < 0)
			return -ENOMEM;
		a->stack[n++] = f;
	}
	int64_t id = sonde_view__stack(a->v, a->stack, n);
	if (id >= 0)
		a->node_stack[node] = (uint32_t)id + 1;
	return id;
}

/* Adds one sample of the window to the view. */
static int add_sample(struct top_agg *a, const struct entry *q)
{
	struct sonde_spool_thread th, main_th;

	if (sonde_tail__get_thread(a->t, q->thread, &th) < 0)
		return 0;
	const uint64_t *m = sonde__u64map_get(&a->main_thread, th.pid);
	struct sonde_view_event e = {
		.sz = sizeof(e),
		.pid = th.pid,
		.tid = th.tid,
		.comm = th.comm,
		.process = m && sonde_tail__get_thread(a->t, (uint32_t)*m, &main_th) == 0
				   ? main_th.comm
				   : NULL,
		.cpu = SONDE_VIEW_CPU_NONE,
		.weight = 1,
	};
	int64_t stack = node_stack(a, q->node, th.pid);
	int err = stack < 0 ? (int)stack : sonde_view__add_stack(a->v, &e, (uint32_t)stack);
	return err < 0 ? err : 0;
}

int top_agg_rows(struct top_agg *a, enum sonde_view_sort sort, bool by_process, size_t max,
		 const struct sonde_view_row **rows, size_t *n, size_t *n_all)
{
	struct sonde_view_rows_opts o = {
		.sz = sizeof(o),
		.group = by_process ? SONDE_VIEW_BY_FUNCTION_PROCESS : SONDE_VIEW_BY_FUNCTION,
		.sort = sort,
		.max = max,
	};
	sonde_view__clear(a->v);
	for (size_t i = 0; i < a->n; i++) {
		int err = add_sample(a, &a->q[(a->head + i) % a->cap]);
		if (err)
			return err;
	}
	return sonde_view__rows(a->v, &o, rows, n, n_all);
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
