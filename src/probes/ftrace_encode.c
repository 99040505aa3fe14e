/* Ftrace event records into FtraceEventBundle packets. See ftrace_encode.h. */
#include "probes/ftrace_encode.h"

#include <errno.h>
#include <string.h>

#include "base/pb.h"

/* TracePacket.ftrace_events, FtraceEventBundle and FtraceEvent field numbers. */
enum {
	TP_FTRACE_EVENTS = 1,
	FB_CPU = 1,
	FB_EVENT = 2,
	FB_LOST_EVENTS = 3,
	FB_COMPACT_SCHED = 4,
	FB_FTRACE_CLOCK = 5,
	FB_ERROR = 8,
	FE_TIMESTAMP = 1,
	FE_PID = 2,
	FE_GENERIC = 327,
	GE_EVENT_NAME = 1,
	GE_FIELD = 2,
	GF_NAME = 1,
	GF_STR = 3,
	GF_INT = 4,
	GF_UINT = 5,
};

/* CompactSched columns, in struct ftrace_bundle.col order. */
enum {
	CS_SWITCH_TS,
	CS_SWITCH_PREV_STATE,
	CS_SWITCH_NEXT_PID,
	CS_SWITCH_NEXT_PRIO,
	CS_SWITCH_NEXT_COMM,
	CS_WAKING_TS,
	CS_WAKING_PID,
	CS_WAKING_TARGET_CPU,
	CS_WAKING_PRIO,
	CS_WAKING_COMM,
	CS_WAKING_FLAGS,
	CS_NCOLS,
};
static const uint8_t cs_field[CS_NCOLS] = {1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12};
enum { CS_INTERN_TABLE = 5 };

enum { T_STR = 1, T_INT = 2, T_PID = 3 /* an int naming a thread */ };

struct known_field {
	const char *name;
	uint8_t pb, type;
};

struct ftrace_known {
	const char *group, *name;
	uint32_t pb;
	struct known_field f[FTRACE_KNOWN_MAX_FIELDS];
};

/* FtraceEvent's oneof numbers and each message's fields (ftrace_event.proto, sched.proto,
 * task.proto, power.proto, irq.proto, workqueue.proto). A kernel that lacks a field
 * leaves it out. */
static const struct ftrace_known known[] = {
	{"sched",
	 "sched_switch",
	 4,
	 {{"prev_comm", 1, T_STR},
	  {"prev_pid", 2, T_INT},
	  {"prev_prio", 3, T_INT},
	  {"prev_state", 4, T_INT},
	  {"next_comm", 5, T_STR},
	  {"next_pid", 6, T_PID},
	  {"next_prio", 7, T_INT}}},
	{"sched",
	 "sched_waking",
	 20,
	 {{"comm", 1, T_STR},
	  {"pid", 2, T_PID},
	  {"prio", 3, T_INT},
	  {"success", 4, T_INT},
	  {"target_cpu", 5, T_INT}}},
	{"sched",
	 "sched_wakeup_new",
	 114,
	 {{"comm", 1, T_STR},
	  {"pid", 2, T_PID},
	  {"prio", 3, T_INT},
	  {"success", 4, T_INT},
	  {"target_cpu", 5, T_INT}}},
	{"sched",
	 "sched_process_exec",
	 237,
	 {{"filename", 1, T_STR}, {"pid", 2, T_PID}, {"old_pid", 3, T_INT}}},
	{"sched",
	 "sched_process_exit",
	 238,
	 {{"comm", 1, T_STR}, {"pid", 2, T_INT}, {"tgid", 3, T_INT}, {"prio", 4, T_INT}}},
	{"sched",
	 "sched_process_fork",
	 239,
	 {{"parent_comm", 1, T_STR},
	  {"parent_pid", 2, T_INT},
	  {"child_comm", 3, T_STR},
	  {"child_pid", 4, T_PID}}},
	{"sched",
	 "sched_process_free",
	 240,
	 {{"comm", 1, T_STR}, {"pid", 2, T_INT}, {"prio", 3, T_INT}}},
	{"task",
	 "task_newtask",
	 235,
	 {{"pid", 1, T_PID},
	  {"comm", 2, T_STR},
	  {"clone_flags", 3, T_INT},
	  {"oom_score_adj", 4, T_INT}}},
	{"task",
	 "task_rename",
	 236,
	 {{"pid", 1, T_PID},
	  {"oldcomm", 2, T_STR},
	  {"newcomm", 3, T_STR},
	  {"oom_score_adj", 4, T_INT}}},
	{"power", "cpu_frequency", 11, {{"state", 1, T_INT}, {"cpu_id", 2, T_INT}}},
	{"power", "cpu_idle", 13, {{"state", 1, T_INT}, {"cpu_id", 2, T_INT}}},
	{"irq", "irq_handler_entry", 36, {{"irq", 1, T_INT}, {"name", 2, T_STR}}},
	{"irq", "irq_handler_exit", 37, {{"irq", 1, T_INT}, {"ret", 2, T_INT}}},
	{"irq", "softirq_entry", 24, {{"vec", 1, T_INT}}},
	{"irq", "softirq_exit", 25, {{"vec", 1, T_INT}}},
	{"workqueue", "workqueue_activate_work", 56, {{"work", 1, T_INT}}},
	{"workqueue", "workqueue_execute_end", 57, {{"work", 1, T_INT}, {"function", 2, T_INT}}},
	{"workqueue", "workqueue_execute_start", 58, {{"work", 1, T_INT}, {"function", 2, T_INT}}},
	{"workqueue",
	 "workqueue_queue_work",
	 59,
	 {{"work", 1, T_INT},
	  {"function", 2, T_INT},
	  {"workqueue", 3, T_INT},
	  {"req_cpu", 4, T_INT},
	  {"cpu", 5, T_INT}}},
};

static const struct ftrace_known *find_known(const char *group, const char *name)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(known[i].group, group) && !strcmp(known[i].name, name))
			return &known[i];
	return NULL;
}

bool sonde__ftrace_event_is_known(const char *group, const char *name)
{
	return find_known(group, name) != NULL;
}

void sonde__ftrace_desc_init(struct ftrace_event_desc *d, struct ftrace_format *fmt, bool compact)
{
	memset(d, 0, sizeof(*d));
	d->fmt = *fmt;
	memset(fmt, 0, sizeof(*fmt));
	d->known = find_known(d->fmt.group, d->fmt.name);
	d->common_pid = sonde__ftrace_format_field(&d->fmt, "common_pid");
	d->common_flags = sonde__ftrace_format_field(&d->fmt, "common_flags");
	if (d->known) {
		for (int i = 0; i < FTRACE_KNOWN_MAX_FIELDS && d->known->f[i].name; i++) {
			d->slot[i] = sonde__ftrace_format_field(&d->fmt, d->known->f[i].name);
			if (d->known->f[i].type == T_PID)
				d->pid_field = d->slot[i];
		}
	}
	if (compact && d->known && d->known->pb == 4)
		d->compact = FTRACE_COMPACT_SWITCH;
	else if (compact && d->known && d->known->pb == 20)
		d->compact = FTRACE_COMPACT_WAKING;
}

void sonde__ftrace_desc_free(struct ftrace_event_desc *d)
{
	if (!d)
		return;
	sonde__ftrace_format_free(&d->fmt);
	memset(d, 0, sizeof(*d));
}

int sonde__ftrace_desc_pid(const struct ftrace_event_desc *d, const uint8_t *rec, size_t len)
{
	int64_t v;

	if (!d->pid_field || !sonde__ftrace_field_int(d->pid_field, rec, len, &v))
		return -1;
	return (int)v;
}

void sonde__ftrace_bundle_begin(struct ftrace_bundle *b, uint32_t cpu, bool lost, int ftrace_clock)
{
	sonde__buf_reset(&b->out);
	for (int i = 0; i < CS_NCOLS; i++)
		sonde__buf_reset(&b->col[i]);
	sonde__buf_reset(&b->interned);
	b->ninterned = 0;
	memset(b->intern_slot, 0, sizeof(b->intern_slot));
	b->nswitch = b->nwaking = 0;
	b->last_switch_ts = b->last_waking_ts = 0;
	b->nevents = b->nerrors = 0;
	b->lost = lost;
	b->packet_mark = sonde__pb_begin(&b->out, TP_FTRACE_EVENTS);
	sonde__pb_put_varint(&b->out, FB_CPU, cpu);
	if (lost)
		sonde__pb_put_bool(&b->out, FB_LOST_EVENTS, true);
	if (ftrace_clock)
		sonde__pb_put_varint(&b->out, FB_FTRACE_CLOCK, (uint64_t)ftrace_clock);
	b->open = true;
}

static void put_str_field(struct buf *o, uint32_t num, const struct ftrace_field *fd,
			  const uint8_t *rec, size_t len)
{
	const char *s;
	size_t n;

	if (fd && sonde__ftrace_field_str(fd, rec, len, &s, &n))
		sonde__pb_put_bytes(o, num, s, n);
}

static void put_int_field(struct buf *o, uint32_t num, const struct ftrace_field *fd,
			  const uint8_t *rec, size_t len)
{
	int64_t v;

	if (fd && sonde__ftrace_field_int(fd, rec, len, &v))
		sonde__pb_put_varint(o, num, (uint64_t)v);
}

static void put_typed(struct buf *o, const struct ftrace_event_desc *d, const uint8_t *rec,
		      size_t len)
{
	size_t m = sonde__pb_begin(o, d->known->pb);

	for (int i = 0; i < FTRACE_KNOWN_MAX_FIELDS && d->known->f[i].name; i++) {
		const struct known_field *k = &d->known->f[i];
		if (k->type == T_STR)
			put_str_field(o, k->pb, d->slot[i], rec, len);
		else
			put_int_field(o, k->pb, d->slot[i], rec, len);
	}
	sonde__pb_end(o, m);
}

static void put_generic(struct buf *o, const struct ftrace_event_desc *d, const uint8_t *rec,
			size_t len)
{
	size_t m = sonde__pb_begin(o, FE_GENERIC);

	sonde__pb_put_string(o, GE_EVENT_NAME, d->fmt.name);
	for (size_t i = 0; i < d->fmt.nfields; i++) {
		const struct ftrace_field *fd = &d->fmt.fields[i];
		const char *s;
		size_t n;
		int64_t v;
		if (fd->common)
			continue;
		/* Arrays and other blobs have no place in GenericFtraceEvent.Field's value
		 * (string, int64, uint64): they are named with no value. */
		size_t fm = sonde__pb_begin(o, GE_FIELD);
		sonde__pb_put_string(o, GF_NAME, fd->name);
		if (sonde__ftrace_field_int(fd, rec, len, &v)) {
			if (fd->is_signed)
				sonde__pb_put_varint(o, GF_INT, (uint64_t)v);
			else
				sonde__pb_put_varint(o, GF_UINT, (uint64_t)v);
		} else if (sonde__ftrace_field_str(fd, rec, len, &s, &n)) {
			sonde__pb_put_bytes(o, GF_STR, s, n);
		}
		sonde__pb_end(o, fm);
	}
	sonde__pb_end(o, m);
}

static uint32_t intern(struct ftrace_bundle *b, const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	/* Linear probing over 256 slots; a full table (more than 255 distinct comms in one
	 * bundle) appends duplicates, which is valid, only larger. */
	for (unsigned probe = 0; probe < 256; probe++) {
		unsigned i = (h + probe) & 255;
		if (b->intern_slot[i] == 0) {
			if (b->ninterned < 65535) {
				b->intern_slot[i] = (uint16_t)(b->ninterned + 1);
				b->intern_off[i] = (uint32_t)b->interned.len;
			}
			break;
		}
		const char *p = (const char *)b->interned.data + b->intern_off[i];
		if (!b->interned.failed && strlen(p) == n && !memcmp(p, s, n))
			return b->intern_slot[i] - 1u;
	}
	sonde__buf_append(&b->interned, s, n);
	buf_put_u8(&b->interned, 0);
	return b->ninterned++;
}

static void col_put(struct ftrace_bundle *b, int col, uint64_t v)
{
	sonde__pb_put_varint_raw(&b->col[col], v);
}

static void add_compact(struct ftrace_bundle *b, const struct ftrace_event_desc *d, uint64_t ts,
			const uint8_t *rec, size_t len)
{
	const char *s = "";
	size_t n = 0;
	int64_t v;

	/* slot[] follows the known table's order: switch 0 prev_comm .. 6 next_prio; waking
	 * 0 comm, 1 pid, 2 prio, 3 success, 4 target_cpu. */
	if (d->compact == FTRACE_COMPACT_SWITCH) {
		col_put(b, CS_SWITCH_TS, ts - (b->nswitch ? b->last_switch_ts : 0));
		b->last_switch_ts = ts;
		b->nswitch++;
		col_put(b, CS_SWITCH_PREV_STATE,
			d->slot[3] && sonde__ftrace_field_int(d->slot[3], rec, len, &v) ? (uint64_t)v : 0);
		col_put(b, CS_SWITCH_NEXT_PID,
			d->slot[5] && sonde__ftrace_field_int(d->slot[5], rec, len, &v) ? (uint64_t)v : 0);
		col_put(b, CS_SWITCH_NEXT_PRIO,
			d->slot[6] && sonde__ftrace_field_int(d->slot[6], rec, len, &v) ? (uint64_t)v : 0);
		if (d->slot[4])
			sonde__ftrace_field_str(d->slot[4], rec, len, &s, &n);
		col_put(b, CS_SWITCH_NEXT_COMM, intern(b, s, n));
		return;
	}
	col_put(b, CS_WAKING_TS, ts - (b->nwaking ? b->last_waking_ts : 0));
	b->last_waking_ts = ts;
	b->nwaking++;
	col_put(b, CS_WAKING_PID,
		d->slot[1] && sonde__ftrace_field_int(d->slot[1], rec, len, &v) ? (uint64_t)v : 0);
	col_put(b, CS_WAKING_TARGET_CPU,
		d->slot[4] && sonde__ftrace_field_int(d->slot[4], rec, len, &v) ? (uint64_t)v : 0);
	col_put(b, CS_WAKING_PRIO,
		d->slot[2] && sonde__ftrace_field_int(d->slot[2], rec, len, &v) ? (uint64_t)v : 0);
	if (d->slot[0])
		sonde__ftrace_field_str(d->slot[0], rec, len, &s, &n);
	col_put(b, CS_WAKING_COMM, intern(b, s, n));
	col_put(b, CS_WAKING_FLAGS,
		d->common_flags && sonde__ftrace_field_int(d->common_flags, rec, len, &v) ? (uint64_t)v
										   : 0);
}

int sonde__ftrace_bundle_add(struct ftrace_bundle *b, const struct ftrace_event_desc *d, uint64_t ts,
		      const uint8_t *rec, size_t len, bool generic)
{
	int64_t pid;

	if (len < d->fmt.record_size)
		return 1; /* the kernel wrote less than its format says: not this event */
	if (d->compact) {
		add_compact(b, d, ts, rec, len);
		b->nevents++;
		return 0;
	}
	if (!d->known && !generic)
		return 1;
	size_t m = sonde__pb_begin(&b->out, FB_EVENT);
	sonde__pb_put_varint(&b->out, FE_TIMESTAMP, ts);
	if (d->common_pid && sonde__ftrace_field_int(d->common_pid, rec, len, &pid))
		sonde__pb_put_varint(&b->out, FE_PID, (uint64_t)pid);
	if (d->known)
		put_typed(&b->out, d, rec, len);
	else
		put_generic(&b->out, d, rec, len);
	sonde__pb_end(&b->out, m);
	b->nevents++;
	return 0;
}

void sonde__ftrace_bundle_error(struct ftrace_bundle *b, uint64_t ts, int status)
{
	size_t m = sonde__pb_begin(&b->out, FB_ERROR);
	sonde__pb_put_varint(&b->out, 1, ts);
	sonde__pb_put_varint(&b->out, 2, (uint64_t)status);
	sonde__pb_end(&b->out, m);
	b->nerrors++;
}

bool sonde__ftrace_bundle_worth(const struct ftrace_bundle *b)
{
	return b->nevents || b->nerrors || b->lost;
}

int sonde__ftrace_bundle_finish(struct ftrace_bundle *b)
{
	if (!b->open)
		return 0;
	if (b->nswitch || b->nwaking) {
		size_t m = sonde__pb_begin(&b->out, FB_COMPACT_SCHED);
		const char *p = (const char *)b->interned.data;
		for (uint32_t i = 0; i < b->ninterned; i++) {
			sonde__pb_put_string(&b->out, CS_INTERN_TABLE, p);
			p += strlen(p) + 1;
		}
		for (int i = 0; i < CS_NCOLS; i++)
			if (b->col[i].len)
				sonde__pb_put_bytes(&b->out, cs_field[i], b->col[i].data, b->col[i].len);
		sonde__pb_end(&b->out, m);
	}
	sonde__pb_end(&b->out, b->packet_mark);
	b->open = false;
	int r = buf_error(&b->out) ? buf_error(&b->out) : buf_error(&b->interned);
	for (int i = 0; i < CS_NCOLS && !r; i++)
		r = buf_error(&b->col[i]);
	return r;
}

void sonde__ftrace_bundle_free(struct ftrace_bundle *b)
{
	if (!b)
		return;
	sonde__buf_free(&b->out);
	sonde__buf_free(&b->interned);
	for (int i = 0; i < CS_NCOLS; i++)
		sonde__buf_free(&b->col[i]);
	memset(b, 0, sizeof(*b));
}
