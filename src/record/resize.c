/* Per-thread stack copies, and rings that grow, by switching generations of events.
 *
 * An event's sample_stack_user cannot change once it is open, and the events a thread
 * inherits are created by the kernel with their parent's attributes, out of reach of any
 * descriptor: the only way to give a thread another copy size (or to route it into a
 * bigger ring) is to open new events on it and stop the old ones. Stopping an inherited
 * event means disabling its parent, which stops it on every thread that inherited it, so
 * a switch replaces the events of every thread of the recording at once:
 *
 *   1. drain   every ring and process, in order, every record stamped before the switch
 *              (the sizes are decided on every sample taken so far, and the older
 *              generations' records are all read)
 *   2. open    for each live thread (/proc/PID/task of every tracked process), events of
 *              its own with its size (the next generation), disabled; then enable them
 *              all, and list the threads again: one created meanwhile by a thread that had
 *              no new events yet gets its own (enabled at once), until a pass finds none
 *              (a thread created later inherited the new events of its creator)
 *   3. disable the older generation's events; the cut is the clock read right before
 *   4. swap    grown rings: the old one is drained once more and unmapped
 *   5. close   the older generation's events (those that own a ring stay, disabled)
 *
 * Between 2 and 3 both generations sample every thread; records tell their generation by
 * their event id (PERF_SAMPLE_ID, an inherited event's being its parent's), so the new
 * generation's records older than the cut are dropped: the old one covers up to the cut
 * (it is disabled only after) and the new one from it (enabled before), no sample is lost
 * or counted twice. A thread that got its own new events in a later pass of 2 may also
 * have inherited its creator's: its records from another thread's events of the
 * generation it has its own events in are dropped too.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "record/recorder.h"

enum {
	/* Smallest copy: the outermost frames of a thread (_start, clone's) sit close above
	 * where any sample can be taken, and a copy this small costs nothing measurable. */
	STACK_FLOOR = 2048,
	/* Samples of a thread under its current events before its size is judged. */
	STACK_LEARN_SAMPLES = 20,
	/* The copy of a thread whose stacks are deeper than the largest copy: none makes them
	 * whole, so it copies what perf copies by default, the frames nearest the leaf, at a
	 * fraction of the largest copy's cost (--stack-size 65528 keeps them all). */
	STACK_TOO_DEEP = 8192,
	/* Switches for a cut stack, a ring that lost records or a copy four times what a
	 * thread needs come quickly; a switch that only makes copies a little smaller waits
	 * longer (it reopens every thread's events). */
	REGEN_URGENT_NS = 20000000,
	REGEN_SHRINK_NS = 250000000,
	/* How long after the start and after each switch polls come every REGEN_URGENT_NS. */
	REGEN_SETTLE_NS = 1000000000,
	/* Passes listing the threads in step 2 before the switch is given up (retried at a
	 * later poll): a process creating threads without pause. */
	REGEN_PASSES = 8,
};

int sonde__rec_note_event_id(struct sonde_recorder *r, int fd, pid_t tid, uint32_t gen,
			     uint32_t stack_bytes)
{
	uint64_t id;

	if (ioctl(fd, PERF_EVENT_IOC_ID, &id) < 0)
		return -errno;
	if (sonde__array_grow(&r->ev.ids, &r->ev.cap_ids, r->ev.n_ids + 1, sizeof(*r->ev.ids), 64) < 0)
		return -ENOMEM;
	/* ids come from a counter: nearly always the largest yet */
	size_t i = r->ev.n_ids;
	while (i > 0 && r->ev.ids[i - 1].id > id)
		i--;
	memmove(&r->ev.ids[i + 1], &r->ev.ids[i], (r->ev.n_ids - i) * sizeof(*r->ev.ids));
	r->ev.ids[i] = (struct rec_event_id){id, tid, gen, stack_bytes, false};
	r->ev.n_ids++;
	return 0;
}

const struct rec_event_id *sonde__rec_event_id(const struct sonde_recorder *r, uint64_t id)
{
	size_t lo = 0, hi = r->ev.n_ids;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->ev.ids[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->ev.n_ids && r->ev.ids[lo].id == id ? &r->ev.ids[lo] : NULL;
}

/* Forgets the ids whose records were all processed: generations before the current one
 * (their events were disabled before the current one's cut, and everything stamped since
 * the cut up to the switch's drain was processed by it) and those of abandoned switches
 * (closed in an earlier switch). Called right after the drain of a switch. */
static void prune_ids(struct sonde_recorder *r)
{
	size_t k = 0;

	for (size_t i = 0; i < r->ev.n_ids; i++)
		if (!r->ev.ids[i].dead && r->ev.ids[i].gen >= r->ev.gen)
			r->ev.ids[k++] = r->ev.ids[i];
	r->ev.n_ids = k;
}

/* rec's event id (NULL: none, or unknown), and in *stale whether rec is of an abandoned
 * switch or of the generation that did not cover its time. */
static const struct rec_event_id *stale_id(const struct sonde_recorder *r,
					   const struct perf_rec *rec, bool *stale)
{
	*stale = false;
	if (!rec->has_id || r->system_wide || rec->type == PERF_RECORD_LOST ||
	    rec->type == PERF_RECORD_LOST_SAMPLES)
		return NULL;
	const struct rec_event_id *e = sonde__rec_event_id(r, rec->id);
	if (!e)
		return NULL;
	/* the overlap of two generations: the older one covers up to the cut */
	*stale = e->dead || (e->gen == r->ev.gen && rec->time < r->ev.gen_cut) ||
		 (e->gen < r->ev.gen && rec->time >= r->ev.gen_cut);
	return e;
}

bool sonde__rec_is_stale(const struct sonde_recorder *r, const struct perf_rec *rec)
{
	bool stale;

	/* before the first switch, and with no switch abandoned, nothing is */
	if (r->ev.gen < 2 && !r->ev.any_dead)
		return false;
	stale_id(r, rec, &stale);
	return stale;
}

bool sonde__rec_is_duplicate(struct sonde_recorder *r, const struct perf_rec *rec)
{
	bool stale;
	const struct rec_event_id *e = stale_id(r, rec, &stale);

	if (!e || stale)
		return stale;
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, (pid_t)rec->tid, false);
	return t && t->own_events && t->root_gen == e->gen && e->tid != t->tid;
}

/* The copy a thread needs: what its unwinds used, half again and 1 KiB more (a deeper
 * call than any seen yet), in 512-byte steps. */
static uint32_t size_for(uint32_t reach, uint32_t min)
{
	uint64_t v = (uint64_t)reach * 3 / 2 + 1024;

	v = (v + 511) & ~511ull;
	if (v < STACK_FLOOR)
		v = STACK_FLOOR;
	if (v < min)
		v = min;
	return v > PERF_STACK_MAX ? PERF_STACK_MAX : (uint32_t)v;
}

static uint32_t grown(uint32_t copy)
{
	uint64_t v = (uint64_t)copy * 2;

	return v > PERF_STACK_MAX ? PERF_STACK_MAX : (uint32_t)v;
}

uint32_t sonde__rec_thread_stack_bytes(const struct sonde_recorder *r, const struct rec_thread *t)
{
	uint32_t copy = t->copy_bytes ? t->copy_bytes : r->cfg.stack_bytes;

	if (!r->ev.adaptive)
		return r->cfg.stack_bytes;
	if (t->too_deep)
		return STACK_TOO_DEEP;
	if (t->grow)
		return grown(copy);
	if (t->window < STACK_LEARN_SAMPLES || !t->reach)
		return copy;
	return size_for(t->reach, t->min_bytes);
}

uint32_t sonde__rec_event_copy(const struct sonde_recorder *r, uint64_t id)
{
	const struct rec_event_id *e = sonde__rec_event_id(r, id);

	return e ? e->stack_bytes : r->cfg.stack_bytes;
}

void sonde__rec_stack_learn(struct sonde_recorder *r, struct rec_thread *t, uint32_t copy,
			    size_t stack_len, enum unwind_end end, size_t reach)
{
	if (!t)
		return;
	t->copy_bytes = copy;
	t->window++;
	/* Cut by the end of a full copy (not by the end of the stack's mapping, which a
	 * larger copy would not pass either): the retry path. The kernel trims the largest
	 * copies so that the record stays under 64 KiB. */
	if (end == UNWIND_END_COPY_WINDOW && stack_len + 1024 >= copy) {
		t->cuts++;
		if (copy < PERF_STACK_MAX && !t->grow && !t->too_deep) {
			t->grow = true;
			r->ev.regen_grow = true;
		}
		/* half its stacks deeper than any copy: growing bought nothing */
		if (copy >= PERF_STACK_MAX && t->window >= STACK_LEARN_SAMPLES &&
		    t->cuts * 2 >= t->window)
			t->too_deep = true;
		return;
	}
	/* a window of whole stacks at the small copy: the deep phase is over */
	if (t->too_deep && copy <= STACK_TOO_DEEP && t->window >= STACK_LEARN_SAMPLES && !t->cuts) {
		t->too_deep = false;
		t->min_bytes = 0;
	}
	/* A walk cut by the top of the stack's mapping read all there was (a sample while the
	 * program starts, its stack pointer close to the top): no measure of what it needs. */
	if (reach > t->reach && end != UNWIND_END_COPY_WINDOW)
		t->reach = reach > UINT32_MAX ? UINT32_MAX : (uint32_t)reach;
}

void sonde__rec_inherit(struct sonde_recorder *r, struct rec_thread *t, pid_t ptid)
{
	struct rec_thread *parent = sonde__tasks_thread(&r->tasks, ptid, false);

	t->root_gen = 0;
	t->root_tid = 0;
	t->window = 0;
	t->cuts = 0;
	t->grow = false;
	t->too_deep = false;
	t->reach = 0;
	t->min_bytes = 0;
	t->copy_bytes = parent ? parent->copy_bytes : 0;
	if (!parent)
		return;
	t->root_tid =
		parent->own_events && parent->root_gen == r->ev.gen ? parent->tid : parent->root_tid;
	struct rec_thread *owner = sonde__tasks_thread(&r->tasks, t->root_tid, false);
	if (owner)
		owner->inheritors = true;
}

bool sonde__rec_can_close_root(struct sonde_recorder *r, struct rec_thread *t)
{
	return !t->inheritors;
}

/* ---- the switch ---- */

static int enable_from(struct sonde_recorder *r, size_t from)
{
	for (size_t i = from; i < r->ev.n_events; i++) {
		int err = sonde__perf_enable(r->ev.events[i].fd);
		if (err)
			return err;
	}
	return 0;
}

/* Whether thread t of p is given events by a switch: every thread of a process attached
 * whole; of one attached by thread (-t), those recorded (attached, or created by one that
 * is while its events are inherited), the others have none to replace. */
static bool switched(const struct sonde_recorder *r, const struct rec_process *p,
		     const struct rec_thread *t)
{
	if (!p->thread_only)
		return true;
	return t->pid == p->pid &&
	       (t->own_events || (t->announced && sonde__rec_follows_children(r)));
}

/* Gives every thread of p that has none yet events of generation gen (enabled at once when
 * enable). Count opened, or -errno; -EAGAIN when p has a child the tables do not know yet
 * (its fork record is still on its way): the switch is tried again later. */
static int open_process(struct sonde_recorder *r, struct rec_process *p, uint32_t gen, bool enable)
{
	pid_t *tids;
	size_t n;
	int opened = 0, err = sonde__proc_list_tasks(p->pid, &tids, &n);
	/* a thread attached alone keeps its rule: what it creates inherits nothing */
	bool no_inherit = p->thread_only && !sonde__rec_follows_children(r);

	if (err)
		return err == -ESRCH ? 0 : err;
	for (size_t i = 0; i < n && err >= 0; i++) {
		struct rec_thread *t = sonde__tasks_thread(&r->tasks, tids[i], !p->thread_only);
		if (p->thread_only && (!t || !switched(r, p, t)))
			continue;
		if (!t) {
			err = -ENOMEM;
			break;
		}
		/* its fork record is still queued: it will keep these events */
		if (!t->pid)
			t = sonde__tasks_thread_from_proc(&r->tasks, p, tids[i], p->since, NULL);
		if (t->regen_mark == gen)
			continue;
		uint32_t bytes = sonde__rec_thread_stack_bytes(r, t);
		size_t first = r->ev.n_events;
		t->regen_mark = gen;
		err = sonde__rec_open_thread(r, tids[i], false, no_inherit, bytes, gen);
		if (err == -ESRCH) {
			err = 0; /* exited meanwhile */
			if ((t = sonde__tasks_thread(&r->tasks, tids[i], false)))
				t->regen_mark = 0;
			continue;
		}
		if (!err && enable)
			err = enable_from(r, first);
		opened += err == 0;
	}
	pid_t *kids;
	size_t nk;
	if (err >= 0 && sonde__rec_follows_children(r) &&
	    sonde__proc_list_children(p->pid, &kids, &nk) == 0) {
		for (size_t k = 0; k < nk && err >= 0; k++) {
			struct rec_process *c = sonde__tasks_process(&r->tasks, kids[k], false);
			if (!c || c->exited)
				err = -EAGAIN;
		}
		sonde__free(kids);
	}
	sonde__free(tids);
	return err < 0 ? err : opened;
}

static int open_generation(struct sonde_recorder *r, uint32_t gen, size_t first)
{
	for (int pass = 0; pass < REGEN_PASSES; pass++) {
		int added = 0;
		for (size_t i = 0; i < sonde__tasks_n_procs(&r->tasks); i++) {
			struct rec_process *p = sonde__tasks_proc_at(&r->tasks, i);
			if (p->exited)
				continue;
			int n = open_process(r, p, gen, pass > 0);
			if (n < 0)
				return n;
			added += n;
		}
		if (pass == 0) {
			int err = enable_from(r, first);
			if (err)
				return err;
		} else if (added == 0) {
			return 0;
		}
	}
	return -EAGAIN;
}

/* A switch that could not complete: its events are closed, their records dropped. */
static void abandon(struct sonde_recorder *r, uint32_t gen, size_t first)
{
	/* the ids of gen are this attempt's: the drain before it pruned any older attempt's */
	for (size_t k = 0; k < r->ev.n_ids; k++)
		if (r->ev.ids[k].gen == gen)
			r->ev.ids[k].dead = r->ev.any_dead = true;
	for (size_t c = 0; c < r->ev.n_cpus; c++) {
		struct rec_ring *ring = &r->ev.rings[c];
		if (ring->next_mapped) {
			epoll_ctl(r->ev.epfd, EPOLL_CTL_DEL, ring->next.fd, NULL);
			r->sum.ring_bytes_total -= ring->next.map_len;
			sonde__perf_ring_unmap(&ring->next);
			ring->next_mapped = false;
		}
		ring->grow_pages = 0;
	}
	for (size_t i = first; i < r->ev.n_events; i++)
		close(r->ev.events[i].fd);
	r->ev.n_events = first;
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));)
		if (t->regen_mark == gen)
			t->regen_mark = 0;
}

/* Step 4: a grown ring replaces the old one, whose last records are drained first. */
static void swap_rings(struct sonde_recorder *r)
{
	for (size_t c = 0; c < r->ev.n_cpus; c++) {
		struct rec_ring *ring = &r->ev.rings[c];
		if (!ring->next_mapped)
			continue;
		sonde__rec_error(r, sonde__rec_drain_ring_last(r, ring));
		if (!ring->hup)
			epoll_ctl(r->ev.epfd, EPOLL_CTL_DEL, ring->ring.fd, NULL);
		r->sum.ring_bytes_total -= ring->ring.map_len;
		sonde__perf_ring_unmap(&ring->ring);
		/* The new ring's records, written while the old events still wrote theirs, go
		 * to a source of their own: the two are merged by time. What the old ring's
		 * source holds is released as the limit passes it. */
		int src = ring->src;
		ring->src = ring->next_src;
		ring->next_src = src;
		ring->ring = ring->next;
		memset(&ring->next, 0, sizeof(ring->next));
		ring->next_mapped = false;
		ring->hup = false;
		ring->grow_pages = 0;
		if (ring->ring.size > r->sum.ring_bytes)
			r->sum.ring_bytes = ring->ring.size;
		r->sum.ring_grows++;
	}
}

/* Step 5: the older generations' events, except those that own a ring. */
static void close_older(struct sonde_recorder *r, uint32_t gen)
{
	for (size_t i = 0; i < r->ev.n_events;) {
		struct rec_event *e = &r->ev.events[i];
		if (e->gen >= gen) {
			i++;
			continue;
		}
		if (r->ev.rings[e->ring].ring.fd == e->fd) {
			e->retired = true;
			i++;
			continue;
		}
		sonde__rec_event_remove(r, i);
	}
}

/* The threads given events: their own from now on. */
static void adopt_generation(struct sonde_recorder *r, uint32_t gen)
{
	uint32_t lo = UINT32_MAX, hi = 0;

	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));) {
		if (t->regen_mark != gen) {
			t->own_events = false; /* gone: its events were closed */
			continue;
		}
		uint32_t bytes = sonde__rec_thread_stack_bytes(r, t);
		if (t->grow) {
			t->min_bytes = bytes;
			t->grow = false;
			r->sum.stack_grows++;
		}
		t->copy_bytes = bytes;
		t->own_events = true;
		t->root_gen = gen;
		t->root_tid = t->tid;
		t->inheritors = false;
		/* what it needs from now on: the program's start (the loader, deep in
		 * relocation) or a phase that is over does not hold its size up; a deeper
		 * call than the window saw is cut, which grows the copy back at once */
		t->window = 0;
		t->cuts = 0;
		t->reach = 0;
		lo = bytes < lo ? bytes : lo;
		hi = bytes > hi ? bytes : hi;
	}
	if (hi) {
		r->sum.stack_bytes_min = lo;
		r->sum.stack_bytes_max = hi;
	}
}

/* Plans the rings to grow: those that lost records, while the bound of all rings allows. */
static bool plan_rings(struct sonde_recorder *r)
{
	uint64_t total = r->sum.ring_bytes_total, page = (uint64_t)sysconf(_SC_PAGESIZE);
	bool any = false;

	for (size_t c = 0; c < r->ev.n_cpus; c++) {
		struct rec_ring *ring = &r->ev.rings[c];
		if (!ring->mapped || !ring->lost_seen)
			continue;
		ring->lost_seen = false;
		uint64_t bigger = ring->ring.size * 2 + (ring->ring.map_len - ring->ring.size);
		if (total - ring->ring.map_len + bigger > r->sum.ring_bytes_cap)
			continue; /* at the bound: the kernel's losses are counted, nothing more */
		total = total - ring->ring.map_len + bigger;
		ring->grow_pages = (unsigned)(ring->ring.size * 2 / page);
		any = true;
	}
	return any;
}

static int regen(struct sonde_recorder *r)
{
	uint32_t gen = r->ev.gen + 1;
	int err = sonde__rec_drain(r);

	r->ev.last_regen = sonde__rec_now(r);
	r->ev.regen_grow = false;
	if (err)
		return err;
	prune_ids(r);
	plan_rings(r);
	size_t first = r->ev.n_events;
	r->ev.switching = true;
	err = open_generation(r, gen, first);
	r->ev.switching = false;
	if (err) {
		abandon(r, gen, first);
		if (err == -EAGAIN || err == -ESRCH || err == -EMFILE || err == -ENOMEM)
			return 0; /* the current events go on; tried again later */
		return sonde__rec_error(r, err);
	}
	/* The cut is read before the older generation is disabled, not after: a thread whose
	 * old events the loop below has disabled is seen by the new ones alone, and their
	 * records older than the cut are dropped (a recorder preempted in the loop lost a
	 * thread's switch-out there, and with it a whole off-CPU interval). */
	r->ev.gen_cut = sonde__rec_now(r);
	for (size_t i = 0; i < first; i++)
		if (!r->ev.events[i].retired)
			sonde__perf_disable(r->ev.events[i].fd);
	r->ev.gen = gen;
	swap_rings(r);
	close_older(r, gen);
	adopt_generation(r, gen);
	r->sum.stack_switches++;
	return 0;
}

/* Whether a switch is due: a cut stack, a thread whose copy is larger than it needs, a
 * ring that lost records and may grow. */
static bool regen_due(struct sonde_recorder *r, uint64_t since_last)
{
	bool rings = false, shrink = false;
	uint64_t total = r->sum.ring_bytes_total;

	for (size_t c = 0; c < r->ev.n_cpus; c++) {
		struct rec_ring *ring = &r->ev.rings[c];
		uint64_t bigger = ring->ring.size * 2 + (ring->ring.map_len - ring->ring.size);
		if (!ring->mapped || !ring->lost_seen)
			continue;
		if (total - ring->ring.map_len + bigger <= r->sum.ring_bytes_cap)
			rings = true;
		else
			ring->lost_seen = false; /* at the bound: the losses are counted, no more */
	}
	if ((rings || r->ev.regen_grow) && since_last >= REGEN_URGENT_NS)
		return true;
	if (!r->ev.adaptive || since_last < REGEN_URGENT_NS)
		return false;
	for (struct rec_thread *t = NULL; !shrink && (t = sonde__tasks_next_thread(&r->tasks, t));) {
		if (t->window < STACK_LEARN_SAMPLES || !t->copy_bytes)
			continue;
		uint64_t want = sonde__rec_thread_stack_bytes(r, t);
		/* by a quarter at least: a thread whose needs vary a little is not
		 * switched back and forth; to a quarter or less (the starting 32 KiB of a
		 * shallow thread, the largest copy of one deeper than any): as soon as a cut
		 * stack would be, every sample meanwhile paying for the larger copy */
		shrink = want * 4 <= (uint64_t)t->copy_bytes ||
			 (since_last >= REGEN_SHRINK_NS && want * 4 <= (uint64_t)t->copy_bytes * 3);
	}
	return shrink;
}

int sonde__rec_regen_wait_ms(struct sonde_recorder *r, int timeout_ms)
{
	int soon = (int)(REGEN_URGENT_NS / 1000000);
	uint64_t from = r->ev.last_regen > r->start_mono ? r->ev.last_regen : r->start_mono;

	if (r->system_wide || !r->ev.adaptive || r->finished ||
	    (timeout_ms >= 0 && timeout_ms <= soon))
		return timeout_ms;
	if (r->ev.regen_grow)
		return soon; /* a stack cut by its copy */
	if (sonde__rec_now(r) - from >= REGEN_SETTLE_NS)
		return timeout_ms;
	/* Sizes are judged after 20 samples under new events: a thread copying more than
	 * STACK_TOO_DEEP (the starting 32 KiB, often several times what it needs; a grown
	 * copy, which either makes its stacks whole or is deeper than any) is acted on at the
	 * first poll 20 ms after the last switch; a poll that waits for a ring's watermark
	 * would leave every sample meanwhile paying for the larger copy. Smaller copies wait
	 * as they did: more wakeups would cost more than what is left to save. */
	for (struct rec_thread *t = NULL; (t = sonde__tasks_next_thread(&r->tasks, t));)
		if ((t->copy_bytes ? t->copy_bytes : r->cfg.stack_bytes) > STACK_TOO_DEEP)
			return soon;
	return timeout_ms;
}

int sonde__rec_maybe_regen(struct sonde_recorder *r)
{
	if (r->system_wide || !r->enabled || r->finished)
		return 0;
	for (size_t i = 0; i < r->ev.n_events; i++)
		if (r->ev.events[i].armed_on_exec)
			return 0; /* not sampling yet */
	return regen_due(r, sonde__rec_now(r) - r->ev.last_regen) ? regen(r) : 0;
}

/* Ring idx's event and ring, replaced by a new event on the same CPU with a ring of `pages`.
 * The old event is disabled before the new one is enabled (a gap of two system calls, not
 * a sample counted twice), then its ring is drained and unmapped. */
static int grow_ring(struct sonde_recorder *r, size_t idx, unsigned pages)
{
	struct rec_ring *ring = &r->ev.rings[idx];
	struct rec_event *ev = NULL;
	struct perf_event_attr a;
	struct perf_event_cfg cfg = r->cfg;
	struct perf_ring bigger;

	for (size_t i = 0; i < r->ev.n_events && !ev; i++)
		if (r->ev.events[i].ring == (int)idx && r->ev.events[i].fd == ring->ring.fd)
			ev = &r->ev.events[i];
	if (!ev)
		return -ENOENT;
	cfg.disabled = true;
	sonde__perf_attr_fill(&a, &cfg);
	int fd = sonde__rec_perf_open(r, &a, -1, r->ev.cpus[idx]);
	if (fd < 0)
		return fd;
	int err = sonde__perf_ring_map(&bigger, fd, r->ev.cpus[idx], pages, pages);
	if (err) {
		close(fd);
		return err;
	}
	if ((err = sonde__rec_watch_ring(r, fd, idx)) < 0) {
		sonde__perf_ring_unmap(&bigger);
		close(fd);
		return err;
	}
	/* the CPU's other events (off-CPU) write into the new ring from now on */
	for (size_t i = 0; i < r->ev.n_events; i++) {
		struct rec_event *o = &r->ev.events[i];
		if (o->ring == (int)idx && o != ev && (err = sonde__perf_set_output(o->fd, fd))) {
			sonde__perf_ring_unmap(&bigger);
			close(fd);
			return err;
		}
	}
	sonde__perf_disable(ev->fd);
	if (r->enabled)
		sonde__perf_enable(fd);
	/* what the old ring got before it was disabled */
	sonde__rec_error(r, sonde__rec_drain_ring_last(r, ring));
	uint64_t lost;
	if (r->cfg.read_lost && sonde__perf_read_lost(ev->fd, &lost) == 0)
		r->ev.closed_lost += lost;
	if (!ring->hup)
		epoll_ctl(r->ev.epfd, EPOLL_CTL_DEL, ev->fd, NULL);
	r->sum.ring_bytes_total -= ring->ring.map_len;
	sonde__perf_ring_unmap(&ring->ring);
	close(ev->fd);
	ring->ring = bigger;
	ring->hup = false;
	ev->fd = fd;
	r->sum.ring_bytes_total += bigger.map_len;
	if (bigger.size > r->sum.ring_bytes)
		r->sum.ring_bytes = bigger.size;
	r->sum.ring_grows++;
	return 0;
}

void sonde__rec_grow_rings(struct sonde_recorder *r)
{
	for (size_t i = 0; i < r->ev.n_cpus; i++) {
		struct rec_ring *ring = &r->ev.rings[i];
		if (!ring->lost_seen || !ring->mapped)
			continue;
		ring->lost_seen = false;
		uint64_t bigger = ring->ring.size * 2 + (ring->ring.map_len - ring->ring.size);
		if (r->sum.ring_bytes_total - ring->ring.map_len + bigger > r->sum.ring_bytes_cap)
			continue; /* at the bound: the kernel's losses are counted, nothing more */
		int err = grow_ring(
			r, i, (unsigned)(ring->ring.size * 2 / (uint64_t)sysconf(_SC_PAGESIZE)));
		if (err)
			sonde_info("cannot grow the ring of CPU %d: %s", r->ev.cpus[i],
				   sonde_strerror(err));
	}
}

bool sonde__rec_adaptive(const struct sonde_recorder *r)
{
	return r->ev.adaptive;
}

void sonde__rec_fixed_copy(struct sonde_recorder *r)
{
	r->ev.adaptive = false;
}

bool sonde__rec_before_cut(const struct sonde_recorder *r, uint64_t time)
{
	return r->ev.gen >= 2 && time < r->ev.gen_cut;
}
