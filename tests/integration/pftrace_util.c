#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/buf.h"
#include "base/pb.h"
#include "base/u64map.h"

#include "../test.h"
#include "pftrace_util.h"

/* An interned frame: the iids of its function name and mapping, and its pc. */
struct pframe {
	uint64_t fn, map, pc;
};

/* Interned state of one sequence: iid -> index into the arrays. */
struct seqstate {
	uint32_t id;
	struct u64map fn, frames, stacks, maps, paths;
	char **strs; /* function names and mapping path components */
	size_t n_strs, strs_cap;
	struct pframe *frames_v;
	size_t n_frames, frames_cap;
	uint64_t **stack_frames; /* frame iids, [0] = count */
	size_t n_stacks, stacks_cap;
	char **map_path;
	size_t n_maps, maps_cap;
};

struct dec {
	struct pft_trace *t;
	struct seqstate seqs[8];
	int nseqs;
	struct buf pn, tn, errs;
};

static void seq_reset(struct seqstate *s)
{
	sonde__u64map_free(&s->fn);
	sonde__u64map_free(&s->frames);
	sonde__u64map_free(&s->stacks);
	sonde__u64map_free(&s->maps);
	sonde__u64map_free(&s->paths);
	for (size_t i = 0; i < s->n_strs; i++)
		free(s->strs[i]);
	for (size_t i = 0; i < s->n_stacks; i++)
		free(s->stack_frames[i]);
	for (size_t i = 0; i < s->n_maps; i++)
		free(s->map_path[i]);
	sonde__free(s->strs);
	sonde__free(s->frames_v);
	sonde__free(s->stack_frames);
	sonde__free(s->map_path);
	uint32_t id = s->id;
	memset(s, 0, sizeof(*s));
	s->id = id;
}

static struct seqstate *seq_get(struct dec *d, uint32_t id)
{
	for (int i = 0; i < d->nseqs; i++)
		if (d->seqs[i].id == id)
			return &d->seqs[i];
	ASSERT_INT(d->nseqs, <, 8);
	d->seqs[d->nseqs].id = id;
	return &d->seqs[d->nseqs++];
}

/* Room for one more element after the n of arr, whose capacity is cap: the library's
 * growth, doubling (a realloc per element made decoding quadratic, and under ASan, whose
 * realloc always moves, the 25,000 switches of a system-wide trace took minutes). The
 * arrays are freed with sonde__free. */
#define GROW(arr, n, cap) ASSERT_OK(sonde__array_grow(&(arr), &(cap), (n) + 1, sizeof(*(arr)), 16))

static void intern_str(struct seqstate *s, struct u64map *m, struct pb_reader r)
{
	struct pb_field f;
	uint64_t iid = 0;
	char *str = strdup("");

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			iid = f.u;
		else if (f.num == 2) {
			free(str);
			str = ASSERT_NOT_NULL(strndup((const char *)f.ptr, f.len));
		}
	}
	GROW(s->strs, s->n_strs, s->strs_cap);
	s->strs[s->n_strs] = str;
	ASSERT_INT(sonde__u64map_put(m, iid, s->n_strs++), ==, 0);
}

static const char *str_of(struct seqstate *s, struct u64map *m, uint64_t iid, int *missing)
{
	uint64_t *v = sonde__u64map_get(m, iid);
	if (!v) {
		(*missing)++;
		return NULL;
	}
	return s->strs[*v];
}

static void intern_mapping(struct dec *d, struct seqstate *s, struct pb_reader r)
{
	struct pb_field f;
	uint64_t iid = 0;
	struct buf p = BUF_INIT;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			iid = f.u;
		if (f.num == 7) {
			const char *c = str_of(s, &s->paths, f.u, &d->t->missing_interned);
			sonde__buf_append(&p, "/", 1);
			if (c)
				sonde__buf_append(&p, c, strlen(c));
		}
	}
	sonde__buf_append(&p, "", 1);
	GROW(s->map_path, s->n_maps, s->maps_cap);
	s->map_path[s->n_maps] = (char *)p.data;
	ASSERT_INT(sonde__u64map_put(&s->maps, iid, s->n_maps++), ==, 0);
}

static void intern_frame(struct seqstate *s, struct pb_reader r)
{
	struct pb_field f;
	uint64_t iid = 0, fn = 0, map = 0, pc = 0;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			iid = f.u;
		else if (f.num == 2)
			fn = f.u;
		else if (f.num == 3)
			map = f.u;
		else if (f.num == 4)
			pc = f.u;
	}
	GROW(s->frames_v, s->n_frames, s->frames_cap);
	s->frames_v[s->n_frames] = (struct pframe){fn, map, pc};
	ASSERT_INT(sonde__u64map_put(&s->frames, iid, s->n_frames++), ==, 0);
}

static void intern_stack(struct seqstate *s, struct pb_reader r)
{
	struct pb_field f;
	uint64_t iid = 0, *fr = ASSERT_NOT_NULL(calloc(1, sizeof(uint64_t)));

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			iid = f.u;
		else if (f.num == 2 && f.wire == PB_VARINT) {
			fr = ASSERT_NOT_NULL(realloc(fr, (fr[0] + 2) * sizeof(uint64_t)));
			fr[++fr[0]] = f.u;
		}
	}
	GROW(s->stack_frames, s->n_stacks, s->stacks_cap);
	s->stack_frames[s->n_stacks] = fr;
	ASSERT_INT(sonde__u64map_put(&s->stacks, iid, s->n_stacks++), ==, 0);
}

static void interned(struct dec *d, struct seqstate *s, struct pb_reader r)
{
	struct pb_field f;

	/* strings first, whatever the order of the fields (Trace Processor reads the whole
	 * message before resolving references) */
	for (int pass = 0; pass < 3; pass++) {
		struct pb_reader rr = r;
		while (sonde__pb_next(&rr, &f) > 0) {
			if (pass == 0 && f.num == 5)
				intern_str(s, &s->fn, pb_sub(&f));
			else if (pass == 0 && f.num == 17)
				intern_str(s, &s->paths, pb_sub(&f));
			else if (pass == 1 && f.num == 19)
				intern_mapping(d, s, pb_sub(&f));
			else if (pass == 1 && f.num == 6)
				intern_frame(s, pb_sub(&f));
			else if (pass == 2 && f.num == 7)
				intern_stack(s, pb_sub(&f));
		}
	}
}

static void resolve_stack(struct dec *d, struct seqstate *s, uint64_t iid, struct pft_sample *out)
{
	uint64_t *v = sonde__u64map_get(&s->stacks, iid);
	struct buf b = BUF_INIT;

	if (!v) {
		d->t->missing_interned++;
		return;
	}
	uint64_t *fr = s->stack_frames[*v];
	for (uint64_t i = 1; i <= fr[0]; i++) {
		uint64_t *fi = sonde__u64map_get(&s->frames, fr[i]);
		if (!fi) {
			d->t->missing_interned++;
			continue;
		}
		const struct pframe *pf = &s->frames_v[*fi];
		const char *name =
			pf->fn ? str_of(s, &s->fn, pf->fn, &d->t->missing_interned) : NULL;
		if (b.len)
			sonde__buf_append(&b, ";", 1);
		name = name && *name ? name : "?";
		sonde__buf_append(&b, name, strlen(name));
		if (i == fr[0]) {
			uint64_t *mi = sonde__u64map_get(&s->maps, pf->map);
			if (!mi)
				d->t->missing_interned++;
			else
				out->leaf_mapping = strdup(s->map_path[*mi]);
			out->leaf_rel_pc = pf->pc;
		}
	}
	sonde__buf_append(&b, "", 1);
	out->stack = (char *)b.data;
}

static void perf_sample(struct dec *d, struct seqstate *s, uint64_t ts, struct pb_reader r)
{
	struct pft_sample smp = {.seq = s->id, .ts = ts, .cpu = UINT32_MAX};
	struct pb_field f;
	uint64_t stack = 0;
	bool is_sample = false;

	while (sonde__pb_next(&r, &f) > 0) {
		switch (f.num) {
		case 1:
			smp.cpu = (uint32_t)f.u;
			break;
		case 2:
			smp.pid = (uint32_t)f.u;
			is_sample = true;
			break;
		case 3:
			smp.tid = (uint32_t)f.u;
			break;
		case 4:
			stack = f.u;
			break;
		case 16:
			smp.unwind_error = (int)f.u;
			break;
		case 17:
			d->t->lost += f.u;
			break;
		case 19: {
			struct pb_reader pr = pb_sub(&f);
			struct pb_field g;
			while (sonde__pb_next(&pr, &g) > 0)
				if (g.num == 1 && g.u == 1)
					d->t->guardrail_stops++;
			break;
		}
		}
	}
	if (!is_sample)
		return;
	if (stack)
		resolve_stack(d, s, stack, &smp);
	struct pft_trace *t = d->t;
	GROW(t->samples, t->n_samples, t->samples_cap);
	t->samples[t->n_samples++] = smp;
}

static void tracepoint_name(struct pft_trace *t, struct pb_reader r)
{
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == 1 && f.wire == PB_LEN)
			snprintf(t->timebase_tracepoint, sizeof(t->timebase_tracepoint), "%.*s",
				 (int)f.len, (const char *)f.ptr);
}

static void copy_str(char *out, size_t cap, const struct pb_field *f)
{
	snprintf(out, cap, "%.*s", (int)f->len, (const char *)f->ptr);
}

static void sched_switch(struct pft_sched *ev, struct pb_reader r)
{
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		switch (f.num) {
		case 1:
			copy_str(ev->prev_comm, sizeof(ev->prev_comm), &f);
			break;
		case 2:
			ev->prev_pid = (uint32_t)f.u;
			break;
		case 4:
			ev->prev_state = (int64_t)f.u;
			break;
		case 5:
			copy_str(ev->next_comm, sizeof(ev->next_comm), &f);
			break;
		case 6:
			ev->next_pid = (uint32_t)f.u;
			break;
		case 3:
		case 7:
			ev->prio = (uint32_t)f.u;
			break;
		}
	}
}

static void sched_waking(struct pft_sched *ev, struct pb_reader r)
{
	struct pb_field f;

	ev->waking = true;
	while (sonde__pb_next(&r, &f) > 0) {
		switch (f.num) {
		case 1:
			copy_str(ev->next_comm, sizeof(ev->next_comm), &f);
			break;
		case 2:
			ev->woken_pid = (uint32_t)f.u;
			break;
		case 3:
			ev->prio = (uint32_t)f.u;
			break;
		case 4:
			ev->success = (uint32_t)f.u;
			break;
		case 5:
			ev->target_cpu = (uint32_t)f.u;
			break;
		}
	}
}

/* FtraceEventBundle {1 cpu, 2 FtraceEvent {1 timestamp, 2 pid, 4 sched_switch, 20
 * sched_waking}}: other events are left out. */
static void ftrace_bundle(struct dec *d, struct pb_reader r)
{
	struct pft_trace *t = d->t;
	struct pb_field f;
	uint32_t cpu = UINT32_MAX;
	size_t first = t->n_sched;

	t->bundles++;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			cpu = (uint32_t)f.u;
		if (f.num != 2)
			continue;
		struct pft_sched ev = {0};
		bool known = false;
		struct pb_reader er = pb_sub(&f);
		struct pb_field g;
		while (sonde__pb_next(&er, &g) > 0) {
			if (g.num == 1)
				ev.ts = g.u;
			else if (g.num == 2)
				ev.pid = (uint32_t)g.u;
			if (g.num == 4)
				sched_switch(&ev, pb_sub(&g));
			if (g.num == 20)
				sched_waking(&ev, pb_sub(&g));
			known |= g.num == 4 || g.num == 20;
		}
		if (!known)
			continue;
		GROW(t->sched, t->n_sched, t->sched_cap);
		t->sched[t->n_sched++] = ev;
	}
	/* the cpu field may follow the events */
	for (size_t i = first; i < t->n_sched; i++)
		t->sched[i].cpu = cpu;
}

static void defaults(struct dec *d, struct pb_reader r)
{
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 58)
			d->t->clock_id_default = (int)f.u;
		if (f.num != 12)
			continue;
		d->t->defaults_packets++;
		struct pb_reader pr = pb_sub(&f);
		while (sonde__pb_next(&pr, &g) > 0) {
			if (g.num != 1)
				continue;
			struct pb_reader tr = pb_sub(&g);
			while (sonde__pb_next(&tr, &h) > 0) {
				if (h.num == 1)
					d->t->timebase_period = h.u;
				else if (h.num == 2)
					d->t->timebase_freq = h.u;
				else if (h.num == 4)
					d->t->timebase_counter = h.u;
				else if (h.num == 3)
					tracepoint_name(d->t, pb_sub(&h));
			}
		}
	}
}

static void process_tree(struct dec *d, struct pb_reader r)
{
	struct pb_field f, g;
	char line[512];

	while (sonde__pb_next(&r, &f) > 0) {
		struct pb_reader pr = pb_sub(&f);
		uint64_t id = 0;
		char name[256] = "";
		while (sonde__pb_next(&pr, &g) > 0) {
			if (g.num == 1)
				id = g.u;
			else if ((f.num == 1 && g.num == 3 && !name[0]) ||
				 (f.num == 2 && g.num == 2))
				snprintf(name, sizeof(name), "%.*s", (int)g.len, g.ptr);
		}
		snprintf(line, sizeof(line), "%llu=%s\n", (unsigned long long)id, name);
		sonde__buf_append(f.num == 1 ? &d->pn : &d->tn, line, strlen(line));
	}
}

/* AndroidLogPacket{1 events{6 tag, 7 prio, 8 message}}: errors (prio 6) are kept. */
static void android_log(struct dec *d, struct pb_reader r)
{
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 1)
			continue;
		struct pb_reader er = pb_sub(&f);
		uint64_t prio = 0;
		const uint8_t *msg = NULL;
		size_t len = 0;
		while (sonde__pb_next(&er, &g) > 0) {
			if (g.num == 7)
				prio = g.u;
			else if (g.num == 8)
				msg = g.ptr, len = g.len;
		}
		if (prio == 6 && msg) {
			sonde__buf_append(&d->errs, msg, len);
			sonde__buf_append(&d->errs, "\n", 1);
		}
	}
}

/* TrackDescriptor{1 uuid, 2 name, 4 thread{1 pid, 2 tid}}. */
static void track_descriptor(struct dec *d, struct pb_reader r)
{
	struct pft_track tr = {0};
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 1)
			tr.uuid = f.u;
		else if (f.num == 2)
			copy_str(tr.name, sizeof(tr.name), &f);
		else if (f.num == 4)
			for (struct pb_reader tr_r = pb_sub(&f); sonde__pb_next(&tr_r, &g) > 0;) {
				if (g.num == 1)
					tr.pid = (uint32_t)g.u;
				else if (g.num == 2)
					tr.tid = (uint32_t)g.u;
			}
	}
	struct pft_trace *t = d->t;
	GROW(t->tracks, t->n_tracks, t->tracks_cap);
	t->tracks[t->n_tracks++] = tr;
}

/* TrackEvent{9 type, 11 track_uuid, 23 name} at the packet's timestamp. */
static void track_event(struct dec *d, uint64_t ts, struct pb_reader r)
{
	struct pft_event ev = {.ts = ts};
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 9)
			ev.type = (int)f.u;
		else if (f.num == 11)
			ev.track_uuid = f.u;
		else if (f.num == 23)
			copy_str(ev.name, sizeof(ev.name), &f);
	}
	struct pft_trace *t = d->t;
	GROW(t->events, t->n_events, t->events_cap);
	t->events[t->n_events++] = ev;
}

static void packet(struct dec *d, struct pb_reader r)
{
	struct pb_field f;
	uint64_t ts = 0, flags = 0;
	uint32_t seq = 0;
	bool has_interned = false, has_sample = false;

	for (struct pb_reader rr = r; sonde__pb_next(&rr, &f) > 0;) {
		if (f.num == 10)
			seq = (uint32_t)f.u;
		else if (f.num == 8)
			ts = f.u;
		else if (f.num == 13)
			flags = f.u;
		else if (f.num == 12)
			has_interned = true;
		else if (f.num == 66)
			has_sample = true;
	}
	struct seqstate *s = seq_get(d, seq);
	if (flags & 1)
		seq_reset(s);
	if (has_interned || has_sample) {
		bool known = false;
		for (int i = 0; i < d->t->n_seq_ids; i++)
			known |= d->t->seq_ids[i] == seq;
		if (!known && d->t->n_seq_ids < 8)
			d->t->seq_ids[d->t->n_seq_ids++] = seq;
	}
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == 12)
			interned(d, s, pb_sub(&f));
		else if (f.num == 59)
			defaults(d, pb_sub(&f));
		else if (f.num == 66)
			perf_sample(d, s, ts, pb_sub(&f));
		else if (f.num == 2)
			process_tree(d, pb_sub(&f));
		else if (f.num == 39)
			android_log(d, pb_sub(&f));
		else if (f.num == 1)
			ftrace_bundle(d, pb_sub(&f));
		else if (f.num == 60)
			track_descriptor(d, pb_sub(&f));
		else if (f.num == 11)
			track_event(d, ts, pb_sub(&f));
	}
}

void pft_decode(const uint8_t *buf, size_t len, struct pft_trace *t)
{
	struct dec d = {.t = t};
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	int rc;

	memset(t, 0, sizeof(*t));
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		ASSERT_INT(f.num, ==, 1);
		ASSERT_INT(f.wire, ==, PB_LEN);
		packet(&d, pb_sub(&f));
	}
	ASSERT_INT(rc, ==, 0);
	for (int i = 0; i < d.nseqs; i++)
		seq_reset(&d.seqs[i]);
	sonde__buf_append(&d.pn, "", 1);
	sonde__buf_append(&d.tn, "", 1);
	sonde__buf_append(&d.errs, "", 1);
	t->process_names = (char *)d.pn.data;
	t->thread_names = (char *)d.tn.data;
	t->errors = (char *)d.errs.data;
}

void pft_free(struct pft_trace *t)
{
	for (size_t i = 0; i < t->n_samples; i++) {
		free(t->samples[i].stack);
		free(t->samples[i].leaf_mapping);
	}
	sonde__free(t->samples);
	sonde__free(t->sched);
	sonde__free(t->tracks);
	sonde__free(t->events);
	free(t->process_names);
	free(t->thread_names);
	free(t->errors);
	memset(t, 0, sizeof(*t));
}

void pft_split(const struct pft_trace *t, uint32_t pid, struct split_counts *c)
{
	for (size_t i = 0; i < t->n_samples; i++) {
		const struct pft_sample *s = &t->samples[i];
		if (pid && s->pid != pid)
			continue;
		c->all++;
		if (!s->stack)
			continue;
		for (int k = 0; k < 3; k++) {
			char leaf[32], path[96];
			snprintf(leaf, sizeof(leaf), ";compute_%s", split_kinds[k]);
			snprintf(path, sizeof(path), "main;run;path_%s;compute_%s", split_kinds[k],
				 split_kinds[k]);
			/* compute_X is the leaf, or the function code inlined into it (the
			 * spin loop) was inlined from */
			const char *at = strstr(s->stack, leaf);
			if (!at || (at[strlen(leaf)] != 0 && at[strlen(leaf)] != ';'))
				continue;
			const char *p = strstr(s->stack, path);
			if (!p || (p != s->stack && p[-1] != ';') ||
			    p + strlen(path) != at + strlen(leaf))
				FAIL("a sample in compute_%s does not come through %s: %s",
				     split_kinds[k], path, s->stack);
			c->n[k]++;
		}
	}
}

size_t pft_samples_of(const struct pft_trace *t, uint32_t pid)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n_samples; i++)
		n += t->samples[i].pid == pid;
	return n;
}
