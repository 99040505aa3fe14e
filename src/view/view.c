/* The readers' model (include/sonde/view.h).
 *
 * Events are not kept one by one: an event adds its weight to an entry, one per distinct
 * (stack, pid, tid, cpu, comm, process name, state), so rows cost the number of distinct
 * entries, not of events. Strings (function names, modules, comms and the process and
 * thread labels) are interned once; string 0 is "". Stacks are interned too, as runs of
 * function ids in one array.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/view.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/buf.h"
#include "base/idmap.h"
#include "base/opts.h"
#include "base/strtab.h"
#include "base/u64map.h"
#include "base/out.h"
#include "view/view.h"

struct view_stack {
	uint32_t first, n; /* function ids at stack_ids.v[first..first + n), innermost first */
};

struct view_entry {
	uint32_t stack, pid, tid, cpu, comm, process, state;
	uint32_t plabel, tlabel; /* string ids of "process-pid" and "comm-pid/tid" */
	uint64_t weight, events;
};

struct sonde_view {
	struct sonde_view_filter filt;
	/* with opts.state_frames, the function of each off-CPU state (0 for on-CPU) */
	uint32_t state_func[SONDE_VIEW_STATES];
	uint32_t *pids, *tids;
	char **comms;
	int *cpus;

	struct strtab strs;   /* names, modules, comms and labels (base/strtab.h) */
	struct functab funcs; /* by (name, module); file and kind are 0 */
	ARR(uint32_t) stack_ids;
	ARR(struct view_stack) stacks;
	struct idmap stack_index;
	ARR(struct view_entry) entries;
	struct idmap entry_index;
	uint64_t total, events;
	uint64_t short_count, short_ns; /* sonde_view__add_short's */

	/* what sonde_view__rows and __diff return */
	ARR(struct sonde_view_row) rows;
	ARR(uint64_t) stamps; /* per row: the last entry that counted it in total, + 1 */
	struct u64map row_of;
	ARR(struct sonde_view_diff_row) diff;
};

static const char *str_of(const struct sonde_view *v, uint32_t id)
{
	return strtab_str(&v->strs, id);
}

/* A string the readers print (a function, module, thread or process name) is interned
 * with its control characters (sonde__out_is_control) as '?', as ps shows them: they come
 * from the recorded programs (a thread names itself, a binary's symbol table, a file
 * name), and an escape sequence in one went to the terminal of whoever ran `sonde report`
 * or `sonde top` on a system-wide recording; a newline split a table's row. */
static int64_t intern(struct sonde_view *v, const char *s)
{
	char small[256], *tmp = small;
	size_t n = 0;
	bool plain = true;

	for (; s && s[n]; n++)
		plain &= !sonde__out_is_control(s[n]);
	if (plain)
		return sonde__strtab_intern(&v->strs, s);
	if (n >= sizeof(small) && !(tmp = sonde__malloc(n + 1)))
		return -ENOMEM;
	memcpy(tmp, s, n + 1);
	sonde__out_unctrl(tmp);
	int64_t id = sonde__strtab_intern(&v->strs, tmp);
	if (tmp != small)
		sonde__free(tmp);
	return id;
}

static uint32_t *copy_ids(const uint32_t *ids, size_t n)
{
	uint32_t *c = n ? sonde__malloc(n * sizeof(*c)) : NULL;

	if (c)
		memcpy(c, ids, n * sizeof(*c));
	return c;
}

/* Copies the caller's filter, so that its lists need not outlive the call. */
static int copy_filter(struct sonde_view *v, const struct sonde_view_filter *f)
{
	OPTS_COPY(&v->filt, f);
	v->filt.pids = v->pids = copy_ids(f->pids, f->n_pids);
	v->filt.tids = v->tids = copy_ids(f->tids, f->n_tids);
	if ((v->filt.n_pids && !v->pids) || (v->filt.n_tids && !v->tids))
		return -ENOMEM;
	if (v->filt.n_cpus) {
		v->cpus = sonde__malloc(v->filt.n_cpus * sizeof(*v->cpus));
		if (!v->cpus)
			return -ENOMEM;
		memcpy(v->cpus, f->cpus, v->filt.n_cpus * sizeof(*v->cpus));
	}
	v->filt.cpus = v->cpus;
	if (v->filt.n_comms) {
		v->comms = sonde__calloc(v->filt.n_comms, sizeof(*v->comms));
		if (!v->comms)
			return -ENOMEM;
		for (size_t i = 0; i < v->filt.n_comms; i++)
			if (!(v->comms[i] = sonde__strdup(f->comms[i] ? f->comms[i] : "")))
				return -ENOMEM;
	}
	v->filt.comms = (const char *const *)v->comms;
	return 0;
}

const char *sonde_view_state_name(uint32_t state)
{
	static const char *const names[SONDE_VIEW_STATES] = {"",
							     "[off-cpu: R]",
							     "[off-cpu: S]",
							     "[off-cpu: D]",
							     "[off-cpu: other]",
							     "[unknown: lost records]",
							     "[on-cpu: not sampled]"};

	return state < SONDE_VIEW_STATES ? names[state] : "";
}

/* The off-CPU states' pseudo-functions, interned once so that they have ids (a diff maps
 * them like any other function). */
static int intern_state_funcs(struct sonde_view *v)
{
	for (uint32_t s = SONDE_VIEW_ON_CPU + 1; s < SONDE_VIEW_STATES; s++) {
		int64_t id = sonde_view__func(v, sonde_view_state_name(s), "[sched]");
		if (id < 0)
			return (int)id;
		v->state_func[s] = (uint32_t)id;
	}
	return 0;
}

struct sonde_view *sonde_view__new(const struct sonde_view_opts *opts)
{
	const struct sonde_view_filter *f = OPTS_GET(opts, filter, NULL);
	struct sonde_view *v;

	if (!OPTS_VALID(opts, sonde_view_opts) || !OPTS_VALID(f, sonde_view_filter)) {
		errno = EINVAL;
		return NULL;
	}
	v = sonde__calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	bool state_frames = OPTS_GET(opts, state_frames, 0);
	/* string 0 is "", function 0 and stack 0 are placeholders: id 0 means none */
	if (sonde__strtab_init(&v->strs) < 0 || sonde__functab_init(&v->funcs) < 0 ||
	    !ARR_PUSH(v->stacks) || (f && copy_filter(v, f) < 0) ||
	    (state_frames && intern_state_funcs(v) < 0)) {
		sonde_view__free(v);
		errno = ENOMEM;
		return NULL;
	}
	return v;
}

const struct sonde_view_filter *sonde_view__filter(const struct sonde_view *v)
{
	return v && v->filt.sz ? &v->filt : NULL;
}

void sonde_view__free(struct sonde_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->comms && i < v->filt.n_comms; i++)
		sonde__free(v->comms[i]);
	sonde__free(v->comms);
	sonde__free(v->pids);
	sonde__free(v->tids);
	sonde__free(v->cpus);
	sonde__strtab_free(&v->strs);
	sonde__functab_free(&v->funcs);
	ARR_FREE(v->stack_ids);
	ARR_FREE(v->stacks);
	sonde__idmap_free(&v->stack_index);
	ARR_FREE(v->entries);
	sonde__idmap_free(&v->entry_index);
	ARR_FREE(v->rows);
	ARR_FREE(v->stamps);
	sonde__u64map_free(&v->row_of);
	ARR_FREE(v->diff);
	sonde__free(v);
}

int64_t sonde_view__func(struct sonde_view *v, const char *name, const char *module)
{
	if (!v || !name)
		return -EINVAL;
	int64_t n = intern(v, name), m = intern(v, module);
	if (n < 0 || m < 0)
		return -ENOMEM;
	return sonde__functab_intern(
		&v->funcs, &(struct tab_func){.name = (uint32_t)n, .module = (uint32_t)m});
}

/* A view's function's origin byte holds this flag (the view has no other use for it). */
enum { FUNC_UNRESOLVED = 1 };

int sonde_view__func_unresolved(struct sonde_view *v, uint32_t id)
{
	if (!v || !id || id >= v->funcs.n)
		return -EINVAL;
	v->funcs.v[id].origin |= FUNC_UNRESOLVED;
	return 0;
}

static bool has_id(const uint32_t *ids, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static bool passes(const struct sonde_view_filter *f, const struct sonde_view_event *e)
{
	if (f->n_pids && !has_id(f->pids, f->n_pids, e->pid))
		return false;
	if (f->n_tids && !has_id(f->tids, f->n_tids, e->tid))
		return false;
	if (f->n_comms) {
		size_t i = 0;
		while (i < f->n_comms && strcmp(f->comms[i], e->comm ? e->comm : ""))
			i++;
		if (i == f->n_comms)
			return false;
	}
	if (f->n_cpus) {
		size_t i = 0;
		while (i < f->n_cpus && (uint32_t)f->cpus[i] != e->cpu)
			i++;
		if (i == f->n_cpus)
			return false;
	}
	if (f->time_range &&
	    (e->time_ns < f->time_from_ns || (f->time_to_ns && e->time_ns > f->time_to_ns)))
		return false;
	return !f->states || (f->states >> e->state & 1);
}

/* Seconds as nanoseconds, rounded up (up != 0) or down; a value within a thousandth of a
 * nanosecond of a whole one is that one, so that a time given to the nanosecond (an
 * event's own) is not lost to the double's rounding. */
static uint64_t ns_of(double s, int up)
{
	double x = s > 0 ? s * 1e9 : 0, whole = nearbyint(x);

	return (uint64_t)(fabs(x - whole) < 1e-3 ? whole : up ? ceil(x) : floor(x));
}

void sonde_view_filter__time_s(struct sonde_view_filter *f, uint64_t start_ns, double from_s,
			       double to_s)
{
	if (!f)
		return;
	f->time_range = 1;
	f->time_from_ns = start_ns + ns_of(from_s, 1);
	f->time_to_ns = to_s < 0 ? 0 : start_ns + ns_of(to_s, 0);
	if (to_s >= 0 && !f->time_to_ns)
		f->time_to_ns = 1;
}

int sonde_view_filter__match(const struct sonde_view_filter *f, const struct sonde_view_event *e)
{
	struct sonde_view_filter known = {0};

	if (!e || !OPTS_VALID(f, sonde_view_filter) || !OPTS_VALID(e, sonde_view_event) ||
	    e->state >= SONDE_VIEW_STATES)
		return -EINVAL;
	if (!f)
		return 1;
	if (opts_sz(f) == sizeof(*f))
		return passes(f, e); /* this header's struct: no copy (a reader calls it per event) */
	OPTS_COPY(&known, f);
	return passes(&known, e);
}

struct stack_key {
	const uint32_t *ids;
	uint32_t n;
};

static bool stack_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct sonde_view *v = ctx;
	const struct view_stack *s = &v->stacks.v[id];
	const struct stack_key *k = key;

	return s->n == k->n && !memcmp(&v->stack_ids.v[s->first], k->ids, k->n * sizeof(*k->ids));
}

/* The id of stack funcs[0..n) (0 for an empty one); -errno. */
static int64_t stack_intern(struct sonde_view *v, const uint32_t *funcs, size_t n)
{
	if (!n)
		return 0;
	if (n > UINT32_MAX || (uint64_t)v->stack_ids.n + n > UINT32_MAX)
		return -ENOMEM;
	struct stack_key k = {funcs, (uint32_t)n};
	uint32_t h = (uint32_t)idmap_hash_bytes(funcs, n * sizeof(*funcs));
	int64_t id = sonde__idmap_find(&v->stack_index, h, stack_eq, v, &k);
	if (id >= 0)
		return id;
	uint32_t first = v->stack_ids.n;
	if (sonde__array_grow(&v->stack_ids.v, &v->stack_ids.cap, (size_t)first + n,
			      sizeof(*v->stack_ids.v), 64) < 0)
		return -ENOMEM;
	struct view_stack *s = ARR_PUSH(v->stacks);
	if (!s)
		return -ENOMEM;
	memcpy(&v->stack_ids.v[first], funcs, n * sizeof(*funcs));
	v->stack_ids.n = first + (uint32_t)n;
	*s = (struct view_stack){first, (uint32_t)n};
	if (sonde__idmap_insert(&v->stack_index, h, v->stacks.n - 1) < 0) {
		v->stacks.n--;
		v->stack_ids.n = first;
		return -ENOMEM;
	}
	return v->stacks.n - 1;
}

/* An entry's identity: everything but the labels (which follow from it) and the sums. */
struct entry_key {
	uint32_t stack, pid, tid, cpu, comm, process, state;
};

static bool entry_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct view_entry *e = &((const struct sonde_view *)ctx)->entries.v[id];
	const struct entry_key *k = key;

	return e->stack == k->stack && e->pid == k->pid && e->tid == k->tid && e->cpu == k->cpu &&
	       e->comm == k->comm && e->process == k->process && e->state == k->state;
}

/* The labels of a new entry: "process-pid" and "comm-pid/tid". */
static int entry_labels(struct sonde_view *v, struct view_entry *e)
{
	char label[512];
	int64_t p, t;

	snprintf(label, sizeof(label), "%s-%" PRIu32, str_of(v, e->process ? e->process : e->comm),
		 e->pid);
	p = intern(v, label);
	snprintf(label, sizeof(label), "%s-%" PRIu32 "/%" PRIu32, str_of(v, e->comm), e->pid,
		 e->tid);
	t = intern(v, label);
	if (p < 0 || t < 0)
		return -ENOMEM;
	e->plabel = (uint32_t)p;
	e->tlabel = (uint32_t)t;
	return 0;
}

int64_t sonde_view__stack(struct sonde_view *v, const uint32_t *funcs, size_t n)
{
	if (!v || (n && !funcs))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!funcs[i] || funcs[i] >= v->funcs.n)
			return -EINVAL;
	return stack_intern(v, funcs, n);
}

/* Adds e under stack id `stack`; e is valid and passed the filter. */
static int add_entry(struct sonde_view *v, const struct sonde_view_event *e, uint32_t stack)
{
	int64_t comm = intern(v, e->comm), process = intern(v, e->process);
	if (comm < 0 || process < 0)
		return -ENOMEM;
	struct entry_key k = {stack,   e->pid, e->tid, e->cpu, (uint32_t)comm, (uint32_t)process,
			      e->state};
	uint32_t h = (uint32_t)u64_hash(((uint64_t)k.stack << 32 | k.tid) ^
					u64_hash((uint64_t)k.cpu << 32 | k.comm) ^
					u64_hash((uint64_t)k.process << 32 | k.pid) ^ k.state);
	int64_t id = sonde__idmap_find(&v->entry_index, h, entry_eq, v, &k);
	if (id < 0) {
		struct view_entry *en = ARR_PUSH(v->entries);
		if (!en)
			return -ENOMEM;
		*en = (struct view_entry){k.stack, k.pid, k.tid, k.cpu, k.comm, k.process, k.state};
		if (entry_labels(v, en) < 0 ||
		    sonde__idmap_insert(&v->entry_index, h, v->entries.n - 1) < 0) {
			v->entries.n--;
			return -ENOMEM;
		}
		id = v->entries.n - 1;
	}
	v->entries.v[id].weight += e->weight;
	v->entries.v[id].events++;
	v->total += e->weight;
	v->events++;
	return 1;
}

int sonde_view__add_stack(struct sonde_view *v, const struct sonde_view_event *e, uint32_t stack)
{
	if (!v || !e || !OPTS_VALID(e, sonde_view_event) || e->state >= SONDE_VIEW_STATES ||
	    stack >= v->stacks.n)
		return -EINVAL;
	return passes(&v->filt, e) ? add_entry(v, e, stack) : 0;
}

int sonde_view__add(struct sonde_view *v, const struct sonde_view_event *e, const uint32_t *funcs,
		    size_t n)
{
	if (!v || !e || (n && !funcs) || !OPTS_VALID(e, sonde_view_event) ||
	    e->state >= SONDE_VIEW_STATES)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!funcs[i] || funcs[i] >= v->funcs.n)
			return -EINVAL;
	if (!passes(&v->filt, e))
		return 0;
	int64_t stack = stack_intern(v, funcs, n);
	return stack < 0 ? (int)stack : add_entry(v, e, (uint32_t)stack);
}

int sonde_view__add_short(struct sonde_view *v, const struct sonde_view_event *e,
			  uint64_t count, uint64_t total_ns)
{
	if (!v || !e || !OPTS_VALID(e, sonde_view_event))
		return -EINVAL;
	struct sonde_view_filter who = v->filt;
	struct sonde_view_event t = {
		.sz = sizeof(t), .pid = e->pid, .tid = e->tid, .comm = e->comm};

	who.n_cpus = 0;
	who.time_range = 0;
	who.states = 0;
	if (!passes(&who, &t))
		return 0;
	v->short_count += count;
	v->short_ns += total_ns;
	return 1;
}

void sonde_view__clear(struct sonde_view *v)
{
	if (!v)
		return;
	v->entries.n = 0;
	sonde__idmap_free(&v->entry_index);
	v->entry_index = (struct idmap){0};
	v->total = v->events = 0;
	v->short_count = v->short_ns = 0;
}

uint64_t sonde_view__total(const struct sonde_view *v, uint64_t *events)
{
	if (events)
		*events = v ? v->events : 0;
	return v ? v->total : 0;
}

/* The state frame of entry e (0: none): with state_frames, an off-CPU entry's innermost. */
static uint32_t state_func_of(const struct sonde_view *v, const struct view_entry *e)
{
	return v->state_func[e->state];
}

/* Function k of entry e's stack s, innermost first, its state frame (sf) included. */
static uint32_t entry_func(const struct sonde_view *v, const struct view_stack *s, uint32_t sf,
			   uint32_t k)
{
	return sf && k == 0 ? sf : v->stack_ids.v[s->first + k - (sf != 0)];
}

/* Counts key into set m when new: 1 when new, 0 when seen, -ENOMEM. */
static int count_new(struct u64map *m, uint64_t key)
{
	if (sonde__u64map_get(m, key))
		return 0;
	return sonde__u64map_put(m, key, 0) < 0 ? -ENOMEM : 1;
}

/* Whether entry e's stack holds a function the symbolizer could not name. */
static bool has_unresolved(const struct sonde_view *v, const struct view_entry *e)
{
	const struct view_stack *s = &v->stacks.v[e->stack];

	for (uint32_t j = 0; j < s->n; j++)
		if (v->funcs.v[v->stack_ids.v[s->first + j]].origin & FUNC_UNRESOLVED)
			return true;
	return false;
}

int sonde_view__stats(const struct sonde_view *v, struct sonde_view_stats *st)
{
	struct sonde_view_stats r = {.sz = sizeof(r)};
	struct u64map pids = {0}, tids = {0}, stacks = {0};
	int err = 0;

	if (!v || !st || !OPTS_OUT_VALID(st))
		return -EINVAL;
	r.total = v->total;
	r.events = v->events;
	r.short_count = v->short_count;
	r.short_ns = v->short_ns;
	r.functions = v->funcs.n - 1;
	for (uint32_t i = 0; i < v->entries.n && err >= 0; i++) {
		const struct view_entry *e = &v->entries.v[i];
		uint32_t sf = state_func_of(v, e);
		r.weight[e->state] += e->weight;
		r.state_events[e->state] += e->events;
		if (!v->stacks.v[e->stack].n && !sf)
			r.empty += e->events;
		else if (e->weight)
			/* a state frame makes another stack: a state in the key's low bits */
			err = count_new(&stacks, (uint64_t)e->stack << 3 | (sf ? e->state : 0));
		if (err >= 0)
			err = count_new(&pids, e->pid);
		if (err >= 0)
			err = count_new(&tids, (uint64_t)e->pid << 32 | e->tid);
		if (has_unresolved(v, e))
			r.unresolved += e->weight;
	}
	r.processes = (uint32_t)u64map_count(&pids);
	r.threads = (uint32_t)u64map_count(&tids);
	r.stacks = u64map_count(&stacks);
	sonde__u64map_free(&pids);
	sonde__u64map_free(&tids);
	sonde__u64map_free(&stacks);
	if (err < 0)
		return err;
	size_t sz = opts_sz(st);
	memcpy((char *)st + sizeof(sz), (char *)&r + sizeof(sz),
	       (sz < sizeof(r) ? sz : sizeof(r)) - sizeof(sz));
	return 0;
}

/* The row under key, added (with the given fields) when new; NULL when out of memory. */
static struct sonde_view_row *row_at(struct sonde_view *v, uint64_t key,
				     const struct sonde_view_row *init, uint64_t **stamp)
{
	uint64_t *at = sonde__u64map_get(&v->row_of, key);

	if (!at) {
		struct sonde_view_row *r = ARR_PUSH(v->rows);
		uint64_t *s = r ? ARR_PUSH(v->stamps) : NULL;
		if (!s || sonde__u64map_put(&v->row_of, key, v->rows.n - 1) < 0) {
			v->rows.n -= r != NULL;
			v->stamps.n -= s != NULL;
			return NULL;
		}
		*r = *init;
		*stamp = s;
		return r;
	}
	*stamp = &v->stamps.v[*at];
	return &v->rows.v[*at];
}

/* Counts entry i's weight into its function rows: self for the innermost function, total
 * once for every function on the stack. */
static int count_function_rows(struct sonde_view *v, uint32_t i, enum sonde_view_group g)
{
	const struct view_entry *e = &v->entries.v[i];
	const struct view_stack *s = &v->stacks.v[e->stack];
	uint32_t sf = state_func_of(v, e), n = s->n + (sf != 0);
	uint32_t label = g == SONDE_VIEW_BY_FUNCTION_PROCESS  ? e->plabel
			 : g == SONDE_VIEW_BY_FUNCTION_THREAD ? e->tlabel
							      : 0;

	for (uint32_t j = 0; j < n; j++) {
		uint32_t fid = entry_func(v, s, sf, j);
		const struct tab_func *f = &v->funcs.v[fid];
		struct sonde_view_row init = {
			.name = str_of(v, f->name),
			.module = str_of(v, f->module),
			.label = str_of(v, label),
			.pid = label ? e->pid : 0,
			.tid = g == SONDE_VIEW_BY_FUNCTION_THREAD ? e->tid : 0,
		};
		uint64_t *stamp;
		struct sonde_view_row *r = row_at(v, (uint64_t)fid << 32 | label, &init, &stamp);
		if (!r)
			return -ENOMEM;
		if (j == 0)
			r->self += e->weight;
		/* recursion puts a function on a stack more than once: count it once */
		if (*stamp != (uint64_t)i + 1) {
			*stamp = (uint64_t)i + 1;
			r->total += e->weight;
		}
	}
	return 0;
}

/* Counts entry i into its process, thread or CPU row. */
static int count_group_row(struct sonde_view *v, uint32_t i, enum sonde_view_group g,
			   char (*cpu_names)[16])
{
	const struct view_entry *e = &v->entries.v[i];
	struct sonde_view_row init = {.module = "", .pid = e->pid};
	uint64_t key, *stamp;

	if (g == SONDE_VIEW_BY_CPU) {
		/* a CPU row's name is interned, so that it outlives this call */
		snprintf(*cpu_names, sizeof(*cpu_names), "%" PRIu32, e->cpu);
		int64_t id = intern(v, e->cpu == SONDE_VIEW_CPU_NONE ? "[unknown]" : *cpu_names);
		if (id < 0)
			return -ENOMEM;
		init = (struct sonde_view_row){.module = "", .cpu = e->cpu};
		key = e->cpu;
		init.name = init.label = str_of(v, (uint32_t)id);
	} else {
		uint32_t label = g == SONDE_VIEW_BY_PROCESS ? e->plabel : e->tlabel;
		key = label;
		init.name = init.label = str_of(v, label);
		init.tid = g == SONDE_VIEW_BY_THREAD ? e->tid : 0;
	}
	struct sonde_view_row *r = row_at(v, key, &init, &stamp);
	if (!r)
		return -ENOMEM;
	r->self += e->weight;
	r->total += e->weight;
	return 0;
}

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
	return a == b ? 0 : a < b ? 1 : -1;
}

struct row_order {
	enum sonde_view_sort sort;
	bool cpus;	   /* CPU rows */
	bool ties_by_name; /* no second weight */
};

static int row_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct sonde_view_row *a = pa, *b = pb;
	const struct row_order *o = ctx;
	enum sonde_view_sort sort = o->sort;
	int c = 0;

	if (sort == SONDE_VIEW_SORT_SELF)
		c = cmp_u64_desc(a->self, b->self)
			    ?: (o->ties_by_name ? 0 : cmp_u64_desc(a->total, b->total));
	else if (sort == SONDE_VIEW_SORT_TOTAL)
		c = cmp_u64_desc(a->total, b->total)
			    ?: (o->ties_by_name ? 0 : cmp_u64_desc(a->self, b->self));
	else if (sort == SONDE_VIEW_SORT_PROCESS)
		c = strcmp(a->label, b->label) ?: cmp_u64_desc(a->self, b->self)
							     ?: cmp_u64_desc(a->total, b->total);
	else if (o->cpus) /* by name: a CPU's name is its number, none ([unknown]) last */
		c = (a->cpu > b->cpu) - (a->cpu < b->cpu);
	if (!c)
		c = strcmp(a->name, b->name) ?: strcmp(a->module, b->module);
	if (!c)
		c = strcmp(a->label, b->label);
	/* a CPU row's name is its number: order those by number, not text */
	return c ?: (a->cpu > b->cpu) - (a->cpu < b->cpu);
}

int sonde_view__rows(struct sonde_view *v, const struct sonde_view_rows_opts *opts,
		     const struct sonde_view_row **rows, size_t *n, size_t *n_all)
{
	char cpu_name[16];

	if (!v || !rows || !n || !OPTS_VALID(opts, sonde_view_rows_opts))
		return -EINVAL;
	enum sonde_view_group g = OPTS_GET(opts, group, SONDE_VIEW_BY_FUNCTION);
	enum sonde_view_sort sort = OPTS_GET(opts, sort, SONDE_VIEW_SORT_SELF);
	size_t max = OPTS_GET(opts, max, 0);
	if ((unsigned)g > SONDE_VIEW_BY_CPU || (unsigned)sort > SONDE_VIEW_SORT_PROCESS)
		return -EINVAL;
	v->rows.n = v->stamps.n = 0;
	sonde__u64map_clear(&v->row_of);
	/* CPU rows are named by strings interned here: all of them first, so that interning
	 * does not move the strings rows already point to */
	for (uint32_t i = 0; g == SONDE_VIEW_BY_CPU && i < v->entries.n; i++) {
		snprintf(cpu_name, sizeof(cpu_name), "%" PRIu32, v->entries.v[i].cpu);
		if (v->entries.v[i].cpu != SONDE_VIEW_CPU_NONE && intern(v, cpu_name) < 0)
			return -ENOMEM;
	}
	if (g == SONDE_VIEW_BY_CPU && intern(v, "[unknown]") < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < v->entries.n; i++) {
		int err = g <= SONDE_VIEW_BY_FUNCTION_THREAD ? count_function_rows(v, i, g)
							     : count_group_row(v, i, g, &cpu_name);
		if (err)
			return err;
	}
	if (v->rows.n > 1)
		qsort_r(v->rows.v, v->rows.n, sizeof(*v->rows.v), row_cmp,
			&(struct row_order){sort, g == SONDE_VIEW_BY_CPU,
					    OPTS_GET(opts, ties_by_name, 0) != 0});
	*rows = v->rows.v;
	*n = max && max < v->rows.n ? max : v->rows.n;
	if (n_all)
		*n_all = v->rows.n;
	return 0;
}

/* Self weight per function id (an array of v->funcs.n); NULL when out of memory. */
static uint64_t *self_by_func(const struct sonde_view *v)
{
	uint64_t *self = sonde__calloc(v->funcs.n, sizeof(*self));

	for (uint32_t i = 0; self && i < v->entries.n; i++) {
		const struct view_entry *e = &v->entries.v[i];
		if (state_func_of(v, e))
			self[state_func_of(v, e)] += e->weight;
		else if (e->stack)
			self[v->stack_ids.v[v->stacks.v[e->stack].first]] += e->weight;
	}
	return self;
}

static int diff_cmp(const void *pa, const void *pb)
{
	const struct sonde_view_diff_row *a = pa, *b = pb;
	double da = a->after_pct - a->before_pct, db = b->after_pct - b->before_pct;

	da = da < 0 ? -da : da;
	db = db < 0 ? -db : db;
	if (da != db)
		return da < db ? 1 : -1;
	return strcmp(a->name, b->name) ?: strcmp(a->module, b->module);
}

int sonde_view__diff(const struct sonde_view *before, struct sonde_view *after,
		     const struct sonde_view_diff_row **rows, size_t *n)
{
	uint64_t *sb, *sa = NULL, *mapped = NULL;
	int err = -ENOMEM;

	if (!before || !after || !rows || !n || before == after)
		return -EINVAL;
	sb = self_by_func(before);
	if (!sb)
		return -ENOMEM;
	/* before's functions under after's ids (interning them there if new) */
	uint32_t *to = sonde__calloc(before->funcs.n, sizeof(*to));
	for (uint32_t f = 1; to && f < before->funcs.n; f++) {
		if (!sb[f])
			continue;
		int64_t id = sonde_view__func(after, str_of(before, before->funcs.v[f].name),
					      str_of(before, before->funcs.v[f].module));
		if (id < 0)
			goto out;
		to[f] = (uint32_t)id;
	}
	sa = self_by_func(after);
	mapped = sonde__calloc(after->funcs.n, sizeof(*mapped));
	if (!to || !sa || !mapped)
		goto out;
	for (uint32_t f = 1; f < before->funcs.n; f++)
		if (to[f])
			mapped[to[f]] += sb[f];
	double tb = before->total ? (double)before->total : 1;
	double ta = after->total ? (double)after->total : 1;
	after->diff.n = 0;
	for (uint32_t f = 1; f < after->funcs.n; f++) {
		if (!sa[f] && !mapped[f])
			continue;
		struct sonde_view_diff_row *r = ARR_PUSH(after->diff);
		if (!r)
			goto out;
		*r = (struct sonde_view_diff_row){
			.name = str_of(after, after->funcs.v[f].name),
			.module = str_of(after, after->funcs.v[f].module),
			.before = mapped[f],
			.after = sa[f],
			.before_pct = 100.0 * (double)mapped[f] / tb,
			.after_pct = 100.0 * (double)sa[f] / ta,
		};
	}
	if (after->diff.n > 1)
		qsort(after->diff.v, after->diff.n, sizeof(*after->diff.v), diff_cmp);
	*rows = after->diff.v;
	*n = after->diff.n;
	err = 0;
out:
	sonde__free(sb);
	sonde__free(sa);
	sonde__free(mapped);
	sonde__free(to);
	return err;
}

/* ---- moving stacks into another view ---- */

uint32_t sonde__view_func_ids(const struct sonde_view *v)
{
	return v->funcs.n;
}

int64_t sonde__view_copy_func(struct sonde_view *to, const struct sonde_view *from, uint32_t id,
			      uint32_t *map)
{
	if (!id || id >= from->funcs.n)
		return -EINVAL;
	if (map[id])
		return map[id];
	const struct tab_func *f = &from->funcs.v[id];
	int64_t c = sonde_view__func(to, str_of(from, f->name), str_of(from, f->module));
	if (c < 0)
		return c;
	to->funcs.v[c].origin |= f->origin & FUNC_UNRESOLVED;
	map[id] = (uint32_t)c;
	return c;
}

int64_t sonde__view_copy_stack(struct sonde_view *to, const struct sonde_view *from,
			       uint32_t stack, uint32_t *map)
{
	if (stack >= from->stacks.n)
		return -EINVAL;
	const struct view_stack *s = &from->stacks.v[stack];
	uint32_t ids[256], *v = s->n <= 256 ? ids : sonde__malloc(s->n * sizeof(*v));
	int64_t r = 0;

	if (!v)
		return -ENOMEM;
	for (uint32_t j = 0; j < s->n && r >= 0; j++) {
		r = sonde__view_copy_func(to, from, from->stack_ids.v[s->first + j], map);
		v[j] = (uint32_t)r;
	}
	if (r >= 0)
		r = stack_intern(to, v, s->n);
	if (v != ids)
		sonde__free(v);
	return r;
}

/* ---- folded stacks ---- */

struct folded_line {
	uint32_t off; /* of its text in the text buffer */
	uint64_t weight;
};

/* ';' separates frames and '\n' lines, so neither may appear inside a name. */
static void put_name(struct buf *b, const char *s)
{
	for (; *s; s++)
		buf_put_u8(b, *s == ';' ? ':' : *s == '\n' || *s == '\r' ? ' ' : *s);
}

static int line_cmp(const void *pa, const void *pb, void *ctx)
{
	const char *text = ctx;

	return strcmp(text + ((const struct folded_line *)pa)->off,
		      text + ((const struct folded_line *)pb)->off);
}

int sonde_view__write_folded(const struct sonde_view *v, int fd,
			     const struct sonde_view_folded_opts *opts)
{
	struct buf text = BUF_INIT;
	struct folded_line *lines;
	size_t n = 0;
	struct out o;

	if (!v || !OPTS_VALID(opts, sonde_view_folded_opts))
		return -EINVAL;
	enum sonde_view_roots roots = OPTS_GET(opts, roots, SONDE_VIEW_ROOTS_NONE);
	uint64_t unit = OPTS_GET(opts, unit, 1);
	unit = unit ? unit : 1;
	lines = sonde__calloc(v->entries.n + 1, sizeof(*lines));
	if (!lines)
		return -ENOMEM;
	for (uint32_t i = 0; i < v->entries.n; i++) {
		const struct view_entry *e = &v->entries.v[i];
		const struct view_stack *s = &v->stacks.v[e->stack];
		uint32_t sf = state_func_of(v, e), depth = s->n + (sf != 0);
		if (!e->weight || (!depth && roots == SONDE_VIEW_ROOTS_NONE))
			continue;
		lines[n] = (struct folded_line){(uint32_t)text.len, e->weight};
		if (roots != SONDE_VIEW_ROOTS_NONE) {
			put_name(&text,
				 str_of(v, roots == SONDE_VIEW_ROOTS_PROCESS ? e->plabel : e->tlabel));
			if (depth)
				buf_put_u8(&text, ';');
		}
		for (uint32_t j = depth; j-- > 0;) {
			put_name(&text, str_of(v, v->funcs.v[entry_func(v, s, sf, j)].name));
			if (j)
				buf_put_u8(&text, ';');
		}
		buf_put_u8(&text, 0);
		if (text.len > UINT32_MAX)
			text.failed = true;
		n++;
	}
	int err = buf_error(&text);
	if (err) {
		sonde__free(lines);
		sonde__buf_free(&text);
		return err;
	}
	if (n > 1)
		qsort_r(lines, n, sizeof(*lines), line_cmp, text.data);
	sonde__out_init(&o, fd);
	for (size_t i = 0; i < n && !o.err;) {
		const char *t = (const char *)text.data + lines[i].off;
		uint64_t w = 0;
		size_t j = i;
		for (; j < n && !strcmp((const char *)text.data + lines[j].off, t); j++)
			w += lines[j].weight;
		/* summed first, then rounded: many small stacks of one name still add up */
		w = w / unit + (w % unit >= (unit + 1) / 2 && unit > 1);
		if (w) {
			sonde__out_puts(&o, t);
			sonde__out_putc(&o, ' ');
			sonde__out_u64(&o, w);
			sonde__out_putc(&o, '\n');
		}
		i = j;
	}
	err = sonde__out_close(&o);
	sonde__free(lines);
	sonde__buf_free(&text);
	return err;
}
