/* linux.ftrace sessions: tracefs setup, per-CPU ring draining, stats. See ftrace.h. */
#include "base/alloc.h"
#include "probes/ftrace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/array.h"
#include "base/pb.h"
#include "base/u64map.h"
#include "probes/ftrace_encode.h"
#include "probes/ftrace_page.h"
#include "perf/tracefs.h"

enum {
	DEFAULT_BUFFER_KB = 2048, /* per CPU, as traced_probes */
	MAX_BUFFER_KB = 256 * 1024,
	DEFAULT_DRAIN_MS = 100,
	MIN_DRAIN_MS = 1,
	MAX_DRAIN_MS = 30000,
	PAGES_PER_DRAIN = 256,	  /* per CPU per call: bounds one call's latency */
	BUNDLE_FLUSH = 64 * 1024, /* a bundle is emitted once this large */
	FTRACE_CLOCK_UNKNOWN = 1, /* FtraceClock (ftrace_event_bundle.proto) */
	FTRACE_CLOCK_GLOBAL = 2,
	FTRACE_CLOCK_LOCAL = 3,
	FTRACE_CLOCK_MONO_RAW = 4,
	/* FtraceParseStatus (ftrace_stats.proto) */
	FTRACE_STATUS_ABI_INVALID_PAGE_HEADER = 4,
	FTRACE_STATUS_ABI_END_OVERFLOW = 15,
};

/* TracePacket and FtraceStats field numbers. */
enum {
	TP_TIMESTAMP = 8,
	TP_FTRACE_STATS = 34,
	FS_PHASE = 1,
	FS_CPU_STATS = 2,
	FS_UNKNOWN_EVENTS = 6,
	FS_FAILED_EVENTS = 7,
	FS_CPU_BUFFER_SIZE_PAGES = 11,
	FB_FTRACE_TIMESTAMP = 6,
	FB_BOOT_TIMESTAMP = 7,
	FB_PREVIOUS_BUNDLE_END_TIMESTAMP = 10,
};

struct cpu_ring {
	int fd;
	int cpu;
	uint64_t last_ts; /* the last event written of this CPU, 0 before the first */
};

struct ftrace_session {
	struct tracefs_instance inst;
	struct ftrace_page_layout layout;
	uint8_t *page;
	size_t page_size;
	struct cpu_ring *cpus;
	size_t ncpus;
	struct ftrace_event_desc *events;
	size_t nevents, events_cap;
	struct u64map by_id;	    /* event id -> index into events */
	struct buf unknown, failed; /* NUL-separated names for FtraceStats */
	struct buf scratch;	    /* clock snapshots' stats text, reused */
	struct ftrace_bundle bundle;
	ftrace_emit_fn emit;
	void *ctx;
	ftrace_pid_fn on_pid;
	void *pid_ctx;
	unsigned drain_ms;
	uint32_t buffer_kb;
	int clock;				/* FtraceClock, 0 for boot */
	int64_t clock_ftrace_ns, clock_boot_ns; /* a snapshot when clock != 0 */
	bool generic, compact, stopped;
	struct ftrace_session_counters n;
	/* the bundle being filled by the page callback */
	size_t cur_cpu;
	int emit_err;
};

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Explains a failure in the caller's errbuf; returns r. */
__attribute__((format(printf, 3, 4))) static int fail(const struct ftrace_opts *o, int r,
						      const char *fmt, ...)
{
	va_list ap;

	if (!o || !o->errbuf || !o->errlen)
		return r;
	va_start(ap, fmt);
	vsnprintf(o->errbuf, o->errlen, fmt, ap);
	va_end(ap);
	return r;
}

static int emit_buf(struct ftrace_session *s, const struct buf *b)
{
	if (buf_error(b))
		return buf_error(b);
	s->n.packets++;
	return s->emit(s->ctx, b->data, b->len);
}

/* --- events --- */

static void note_name(struct buf *b, const char *group, const char *name)
{
	if (group) {
		sonde__buf_append(b, group, strlen(group));
		buf_put_u8(b, '/');
	}
	sonde__buf_append(b, name, strlen(name));
	buf_put_u8(b, 0);
}

/* Binds events/GROUP/NAME: reads its format, enables it. 0, 1 if already bound, or <0. */
static int add_event(struct ftrace_session *s, const char *group, const char *name)
{
	char rel[FTRACE_NAME_MAX * 2 + 32];
	struct buf text = BUF_INIT;
	struct ftrace_format fmt;
	int r;

	snprintf(rel, sizeof(rel), "events/%s/%s/format", group, name);
	r = sonde__tracefs_read(s->inst.dir, rel, &text);
	if (r == 0)
		r = sonde__ftrace_format_parse((const char *)text.data, text.len, &fmt);
	sonde__buf_free(&text);
	if (r < 0)
		return r;
	if (sonde__u64map_get(&s->by_id, fmt.id)) {
		sonde__ftrace_format_free(&fmt);
		return 1;
	}
	snprintf(fmt.group, sizeof(fmt.group), "%s", group);
	snprintf(rel, sizeof(rel), "events/%s/%s/enable", group, name);
	r = sonde__tracefs_write(s->inst.dir, rel, "1");
	if (r == 0 &&
	    sonde__array_grow(&s->events, &s->events_cap, s->nevents + 1, sizeof(*s->events), 16) < 0)
		r = -ENOMEM;
	if (r == 0 && sonde__u64map_put(&s->by_id, fmt.id, s->nevents) < 0)
		r = -ENOMEM;
	if (r < 0) {
		sonde__ftrace_format_free(&fmt);
		note_name(&s->failed, group, name);
		return r;
	}
	sonde__ftrace_desc_init(&s->events[s->nevents++], &fmt, s->compact);
	return 0;
}

static bool is_dir_entry(const struct dirent *e)
{
	return e->d_name[0] != '.' && (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN);
}

/* "group/" "*": every event of a group. */
static int add_group(struct ftrace_session *s, const char *group)
{
	char path[TRACEFS_PATH_MAX + FTRACE_EVENT_NAME_MAX + 16];
	int added = 0;

	snprintf(path, sizeof(path), "%s/events/%s", s->inst.dir, group);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	for (struct dirent *e; (e = readdir(d));)
		if (is_dir_entry(e) && strlen(e->d_name) < FTRACE_NAME_MAX &&
		    add_event(s, group, e->d_name) >= 0)
			added++;
	closedir(d);
	return added ? 0 : -ENOENT;
}

/* A bare "name": the first group holding it. */
static int add_bare(struct ftrace_session *s, const char *name)
{
	char path[TRACEFS_PATH_MAX + 16];
	int r = -ENOENT;

	snprintf(path, sizeof(path), "%s/events", s->inst.dir);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	for (struct dirent *e; r == -ENOENT && (e = readdir(d));)
		if (is_dir_entry(e) && strlen(e->d_name) < FTRACE_NAME_MAX)
			r = add_event(s, e->d_name, name);
	closedir(d);
	return r;
}

static void add_config_events(struct ftrace_session *s, const struct ftrace_config *cfg)
{
	for (size_t i = 0; i < cfg->nevents; i++) {
		char group[FTRACE_EVENT_NAME_MAX];
		const char *ev = cfg->events[i], *slash = strchr(ev, '/');
		int r;
		if (!slash) {
			r = add_bare(s, ev);
		} else {
			size_t gl = (size_t)(slash - ev);
			memcpy(group, ev, gl);
			group[gl] = '\0';
			if (strchr(slash + 1, '/') || gl >= FTRACE_NAME_MAX ||
			    strlen(slash + 1) >= FTRACE_NAME_MAX)
				r = -ENOENT;
			else if (!strcmp(slash + 1, "*"))
				r = add_group(s, group);
			else
				r = add_event(s, group, slash + 1);
		}
		if (r == -ENOENT)
			note_name(&s->unknown, NULL, ev);
	}
}

/* A compact sched_waking has no pid of its own: a reader takes the waker from the CPU's
 * last compact sched_switch. Without sched_switch in the session, sched_waking is written
 * as a typed event, as traced_probes does. */
static void drop_lone_compact_waking(struct ftrace_session *s)
{
	for (size_t i = 0; i < s->nevents; i++)
		if (s->events[i].compact == FTRACE_COMPACT_SWITCH)
			return;
	for (size_t i = 0; i < s->nevents; i++)
		s->events[i].compact = FTRACE_COMPACT_NONE;
}

/* --- tracefs setup --- */

static int read_layout(struct ftrace_session *s)
{
	struct buf text = BUF_INIT;
	int r;

	sonde__ftrace_page_layout_default(&s->layout);
	r = sonde__tracefs_read(s->inst.root, "events/header_page", &text);
	if (r == 0)
		r = sonde__ftrace_page_layout_parse((const char *)text.data, text.len, &s->layout);
	if (r == 0 && sonde__tracefs_read(s->inst.root, "events/header_event", &text) == 0)
		r = sonde__ftrace_header_event_check((const char *)text.data, text.len);
	/* Sub-buffers may be larger than a page (buffer_subbuf_size_kb, Linux 6.8): a read
	 * returns one whole sub-buffer, so read with that size. */
	s->page_size = s->layout.page_size;
	if (r == 0 && sonde__tracefs_read(s->inst.dir, "buffer_subbuf_size_kb", &text) == 0) {
		buf_put_u8(&text, 0);
		unsigned long kb = text.failed ? 0 : strtoul((const char *)text.data, NULL, 10);
		if (kb > 0 && kb <= 1024 && kb * 1024 > s->page_size)
			s->page_size = kb * 1024;
	}
	sonde__buf_free(&text);
	if (r < 0)
		return r;
	s->page = sonde__malloc(s->page_size);
	return s->page ? 0 : -ENOMEM;
}

/* trace_clock lists the clocks with the current one in brackets. boot is wanted, or
 * mono_raw when the config asks for it (use_monotonic_raw_clock); without either the
 * instance keeps its clock, and bundles say which. */
static int set_clock(struct ftrace_session *s, bool mono_raw)
{
	struct buf text = BUF_INIT;
	int r = sonde__tracefs_read(s->inst.dir, "trace_clock", &text);
	const char *t;

	buf_put_u8(&text, 0);
	if (r < 0 || text.failed) {
		sonde__buf_free(&text);
		return r < 0 ? r : -ENOMEM;
	}
	t = (const char *)text.data;
	if (mono_raw && strstr(t, "mono_raw") &&
	    sonde__tracefs_write(s->inst.dir, "trace_clock", "mono_raw") == 0)
		s->clock = FTRACE_CLOCK_MONO_RAW;
	else if (!mono_raw && strstr(t, "boot") &&
		 sonde__tracefs_write(s->inst.dir, "trace_clock", "boot") == 0)
		s->clock = 0;
	else if (strstr(t, "[global]"))
		s->clock = FTRACE_CLOCK_GLOBAL;
	else if (strstr(t, "[local]"))
		s->clock = FTRACE_CLOCK_LOCAL;
	else
		s->clock = FTRACE_CLOCK_UNKNOWN;
	sonde__buf_free(&text);
	return 0;
}

/* With a clock other than boot, pair the trace clock's "now ts" with BOOTTIME. */
static void clock_snapshot(struct ftrace_session *s)
{
	struct buf *text = &s->scratch;
	struct tracefs_cpu_stats st;
	char rel[64];

	if (s->clock == 0 || s->ncpus == 0)
		return;
	snprintf(rel, sizeof(rel), "per_cpu/cpu%d/stats", s->cpus[0].cpu);
	uint64_t before = boottime_ns();
	if (sonde__tracefs_read(s->inst.dir, rel, text) == 0 &&
	    sonde__tracefs_cpu_stats_parse((const char *)text->data, text->len, &st) == 0) {
		uint64_t after = boottime_ns();
		s->clock_ftrace_ns = (int64_t)(st.now_ts * 1e9);
		s->clock_boot_ns = (int64_t)(before + (after - before) / 2);
	}
}

static int open_cpus(struct ftrace_session *s)
{
	char path[TRACEFS_PATH_MAX + 64];
	size_t cap = 0;

	snprintf(path, sizeof(path), "%s/per_cpu", s->inst.dir);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	int r = 0;
	for (struct dirent *e; (e = readdir(d));) {
		char *end;
		if (strncmp(e->d_name, "cpu", 3) != 0)
			continue;
		long cpu = strtol(e->d_name + 3, &end, 10);
		if (end == e->d_name + 3 || *end || cpu < 0 || cpu > 65535)
			continue;
		if (sonde__array_grow(&s->cpus, &cap, s->ncpus + 1, sizeof(*s->cpus), 8) < 0) {
			r = -ENOMEM;
			break;
		}
		snprintf(path, sizeof(path), "%s/per_cpu/cpu%ld/trace_pipe_raw", s->inst.dir, cpu);
		int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			break;
		}
		s->cpus[s->ncpus++] = (struct cpu_ring){.fd = fd, .cpu = (int)cpu};
	}
	closedir(d);
	return r;
}

static int set_buffer(struct ftrace_session *s, uint32_t kb)
{
	char v[32];

	if (kb == 0)
		kb = DEFAULT_BUFFER_KB;
	if (kb > MAX_BUFFER_KB)
		kb = MAX_BUFFER_KB;
	s->buffer_kb = kb;
	snprintf(v, sizeof(v), "%u", kb);
	return sonde__tracefs_write(s->inst.dir, "buffer_size_kb", v);
}

/* --- stats --- */

static void put_names(struct buf *o, uint32_t field, const struct buf *names)
{
	for (size_t off = 0; off < names->len && !names->failed;) {
		const char *p = (const char *)names->data + off;
		sonde__pb_put_string(o, field, p);
		off += strlen(p) + 1;
	}
}

static int emit_stats(struct ftrace_session *s, int phase)
{
	struct buf o = BUF_INIT, text = BUF_INIT;
	char rel[64];

	sonde__pb_put_varint(&o, TP_TIMESTAMP, boottime_ns());
	size_t m = sonde__pb_begin(&o, TP_FTRACE_STATS);
	sonde__pb_put_varint(&o, FS_PHASE, (uint64_t)phase);
	for (size_t i = 0; i < s->ncpus; i++) {
		struct tracefs_cpu_stats st;
		snprintf(rel, sizeof(rel), "per_cpu/cpu%d/stats", s->cpus[i].cpu);
		if (sonde__tracefs_read(s->inst.dir, rel, &text) < 0 ||
		    sonde__tracefs_cpu_stats_parse((const char *)text.data, text.len, &st) < 0)
			continue;
		size_t c = sonde__pb_begin(&o, FS_CPU_STATS);
		sonde__pb_put_varint(&o, 1, (uint64_t)s->cpus[i].cpu);
		sonde__pb_put_varint(&o, 2, st.entries);
		sonde__pb_put_varint(&o, 3, st.overrun);
		sonde__pb_put_varint(&o, 4, st.commit_overrun);
		sonde__pb_put_varint(&o, 5, st.bytes);
		sonde__pb_put_double(&o, 6, st.oldest_event_ts);
		sonde__pb_put_double(&o, 7, st.now_ts);
		sonde__pb_put_varint(&o, 8, st.dropped_events);
		sonde__pb_put_varint(&o, 9, st.read_events);
		sonde__pb_end(&o, c);
	}
	put_names(&o, FS_UNKNOWN_EVENTS, &s->unknown);
	put_names(&o, FS_FAILED_EVENTS, &s->failed);
	sonde__pb_put_varint(&o, FS_CPU_BUFFER_SIZE_PAGES, (uint64_t)s->buffer_kb * 1024 / s->page_size);
	sonde__pb_end(&o, m);
	int r = emit_buf(s, &o);
	sonde__buf_free(&o);
	sonde__buf_free(&text);
	return r;
}

/* --- draining --- */

static void bundle_begin(struct ftrace_session *s, bool lost)
{
	sonde__ftrace_bundle_begin(&s->bundle, (uint32_t)s->cpus[s->cur_cpu].cpu, lost, s->clock);
	/* Where this CPU's stream stood: a reader of a ring-buffer trace, whose oldest
	 * bundles were overwritten, takes the latest of the CPUs' first values as the time
	 * from which every CPU's data is whole (traced_probes writes it since v47). */
	sonde__pb_put_varint(&s->bundle.out, FB_PREVIOUS_BUNDLE_END_TIMESTAMP,
			     s->cpus[s->cur_cpu].last_ts);
	if (s->clock) {
		sonde__pb_put_varint(&s->bundle.out, FB_FTRACE_TIMESTAMP, (uint64_t)s->clock_ftrace_ns);
		sonde__pb_put_varint(&s->bundle.out, FB_BOOT_TIMESTAMP, (uint64_t)s->clock_boot_ns);
	}
}

static int bundle_flush(struct ftrace_session *s)
{
	if (!s->bundle.open)
		return 0;
	bool worth = sonde__ftrace_bundle_worth(&s->bundle);
	int r = sonde__ftrace_bundle_finish(&s->bundle);
	if (r == 0 && worth)
		r = emit_buf(s, &s->bundle.out);
	return r;
}

static int on_event(void *ctx, uint64_t ts, const uint8_t *data, size_t len)
{
	struct ftrace_session *s = ctx;
	uint16_t id;

	s->n.events++;
	if (len < 2) {
		s->n.skipped++;
		return 0;
	}
	memcpy(&id, data, 2); /* common_type, at offset 0 of every record */
	uint64_t *idx = sonde__u64map_get(&s->by_id, id);
	if (!idx) {
		s->n.skipped++;
		return 0;
	}
	const struct ftrace_event_desc *d = &s->events[*idx];
	if (sonde__ftrace_bundle_add(&s->bundle, d, ts, data, len, s->generic) != 0)
		s->n.skipped++;
	else
		s->cpus[s->cur_cpu].last_ts = ts;
	if (s->on_pid) {
		int pid = sonde__ftrace_desc_pid(d, data, len);
		if (pid > 0)
			s->on_pid(s->pid_ctx, pid);
	}
	if (s->bundle.out.len >= BUNDLE_FLUSH) {
		int r = bundle_flush(s);
		if (r < 0) {
			s->emit_err = r;
			return 1;
		}
		bundle_begin(s, false);
	}
	return 0;
}

static int drain_page(struct ftrace_session *s, size_t len)
{
	struct ftrace_page_info info;

	s->n.pages++;
	/* A page after a loss starts a bundle of its own, so that lost_events marks the
	 * gap at the right place. */
	sonde__ftrace_page_header(&s->layout, s->page, len, &info);
	if (info.lost_events) {
		s->n.lost_pages++;
		s->n.lost_events += info.lost_count;
		int r = bundle_flush(s);
		if (r < 0)
			return r;
		bundle_begin(s, true);
	}
	s->emit_err = 0;
	int r = sonde__ftrace_page_parse(&s->layout, s->page, len, &info, on_event, s);
	if (s->emit_err)
		return s->emit_err;
	if (r < 0) {
		/* The events before the fault were kept; the rest of the page is lost. */
		s->n.bad_pages++;
		sonde__ftrace_bundle_error(&s->bundle, info.timestamp,
				    r == -SONDE_E_TRUNCATED ? FTRACE_STATUS_ABI_INVALID_PAGE_HEADER
							    : FTRACE_STATUS_ABI_END_OVERFLOW);
	}
	return 0;
}

int sonde__ftrace_session_drain_cpu(struct ftrace_session *s, size_t idx)
{
	int r = 0;

	if (idx >= s->ncpus || s->cpus[idx].fd < 0)
		return -EINVAL;
	s->cur_cpu = idx;
	/* A clock other than boot is converted by trace processor from the (ftrace, boot)
	 * pair of each bundle: taken at read time, as traced_probes does. */
	clock_snapshot(s);
	bundle_begin(s, false);
	for (int i = 0;; i++) {
		if (i == PAGES_PER_DRAIN) {
			r = 1;
			break;
		}
		ssize_t n = read(s->cpus[idx].fd, s->page, s->page_size);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		r = drain_page(s, (size_t)n);
		if (r < 0)
			break;
	}
	int f = bundle_flush(s);
	return r < 0 ? r : f < 0 ? f : r;
}

int sonde__ftrace_session_drain(struct ftrace_session *s)
{
	int more = 0;

	for (size_t i = 0; i < s->ncpus; i++) {
		int r = sonde__ftrace_session_drain_cpu(s, i);
		if (r < 0)
			return r;
		more |= r;
	}
	return more;
}

/* --- lifecycle --- */

static int setup(struct ftrace_session *s, const struct ftrace_config *cfg,
		 const struct ftrace_opts *o)
{
	char root[TRACEFS_PATH_MAX];
	int r;

	if (o && o->tracefs_root)
		snprintf(root, sizeof(root), "%s", o->tracefs_root);
	else if ((r = sonde__tracefs_find(root, sizeof(root), o && o->allow_mount)) < 0)
		return fail(o, r, "linux.ftrace: tracefs is not mounted (%s)", strerror(-r));
	r = sonde__tracefs_instance_acquire(&s->inst, root, o && o->instance ? o->instance : "sonde",
				     o && o->lock_dir ? o->lock_dir : "/run/sonde");
	if (r == -EBUSY)
		return fail(o, r,
			    "linux.ftrace: another tracing session is already recording "
			    "ftrace (instance %s is in use)",
			    o && o->instance ? o->instance : "sonde");
	if (r < 0)
		return fail(o, r, "linux.ftrace: cannot create the tracefs instance under %s: %s",
			    root, strerror(-r));
	if ((r = sonde__tracefs_write(s->inst.dir, "tracing_on", "0")) < 0 || (r = read_layout(s)) < 0 ||
	    (r = set_clock(s, cfg->use_monotonic_raw_clock)) < 0 ||
	    (r = set_buffer(s, cfg->buffer_size_kb)) < 0)
		return fail(o, r, "linux.ftrace: configuring %s: %s", s->inst.dir,
			    r <= -SONDE_E_BASE ? sonde_strerror(r) : strerror(-r));
	if (cfg->drain_buffer_percent) {
		/* buffer_percent: how full a CPU's buffer is before poll() wakes its reader. */
		char v[16];
		snprintf(v, sizeof(v), "%u", cfg->drain_buffer_percent);
		if ((r = sonde__tracefs_write(s->inst.dir, "buffer_percent", v)) < 0 && r != -ENOENT)
			return fail(o, r, "linux.ftrace: setting buffer_percent: %s", strerror(-r));
	}
	add_config_events(s, cfg);
	drop_lone_compact_waking(s);
	if (s->nevents == 0)
		return fail(o, -EINVAL,
			    "linux.ftrace: none of the config's ftrace_events exists on this "
			    "kernel");
	if ((r = open_cpus(s)) < 0 || (r = sonde__tracefs_write(s->inst.dir, "tracing_on", "1")) < 0)
		return fail(o, r, "linux.ftrace: starting %s: %s", s->inst.dir, strerror(-r));
	return 0;
}

struct ftrace_session *sonde__ftrace_session_new(const struct ftrace_config *cfg,
					  const struct ftrace_opts *opts, ftrace_emit_fn emit,
					  void *ctx)
{
	struct ftrace_session *s = sonde__calloc(1, sizeof(*s));
	int r;

	if (!s)
		return NULL;
	s->inst.lock_fd = -1;
	s->emit = emit;
	s->ctx = ctx;
	if (opts && opts->sz >= offsetof(struct ftrace_opts, pid_ctx) + sizeof(void *)) {
		s->on_pid = opts->on_pid;
		s->pid_ctx = opts->pid_ctx;
	}
	s->generic = !cfg->disable_generic_events;
	s->compact = cfg->compact_sched;
	s->drain_ms = cfg->drain_period_ms ? cfg->drain_period_ms : DEFAULT_DRAIN_MS;
	if (s->drain_ms < MIN_DRAIN_MS)
		s->drain_ms = MIN_DRAIN_MS;
	if (s->drain_ms > MAX_DRAIN_MS)
		s->drain_ms = MAX_DRAIN_MS;
	r = setup(s, cfg, opts);
	if (r == 0)
		r = emit_stats(s, 1);
	if (r < 0) {
		s->stopped = true; /* nothing to drain: free only undoes */
		sonde__ftrace_session_free(s);
		errno = r <= -SONDE_E_BASE ? EINVAL : -r;
		return NULL;
	}
	return s;
}

size_t sonde__ftrace_session_fds(const struct ftrace_session *s, int *fds, int *cpus, size_t max)
{
	for (size_t i = 0; i < s->ncpus && i < max; i++) {
		if (fds)
			fds[i] = s->cpus[i].fd;
		if (cpus)
			cpus[i] = s->cpus[i].cpu;
	}
	return s->ncpus;
}

unsigned sonde__ftrace_session_drain_period_ms(const struct ftrace_session *s)
{
	return s->drain_ms;
}

void sonde__ftrace_session_counters(const struct ftrace_session *s, struct ftrace_session_counters *c)
{
	*c = s->n;
}

int sonde__ftrace_session_stop(struct ftrace_session *s)
{
	int r = 0;

	if (s->stopped)
		return 0;
	s->stopped = true;
	sonde__tracefs_write(s->inst.dir, "tracing_on", "0");
	/* Drain until empty: a bounded number of rounds, the writer has stopped. */
	for (int round = 0; round < 1024; round++) {
		r = sonde__ftrace_session_drain(s);
		if (r <= 0)
			break;
	}
	int st = emit_stats(s, 2);
	for (size_t i = 0; i < s->ncpus; i++) {
		close(s->cpus[i].fd);
		s->cpus[i].fd = -1;
	}
	int rel = sonde__tracefs_instance_release(&s->inst);
	return r < 0 ? r : st < 0 ? st : rel;
}

void sonde__ftrace_session_free(struct ftrace_session *s)
{
	if (!s)
		return;
	sonde__ftrace_session_stop(s);
	for (size_t i = 0; i < s->ncpus; i++)
		if (s->cpus[i].fd >= 0)
			close(s->cpus[i].fd);
	sonde__tracefs_instance_release(&s->inst);
	for (size_t i = 0; i < s->nevents; i++)
		sonde__ftrace_desc_free(&s->events[i]);
	sonde__free(s->events);
	sonde__free(s->cpus);
	sonde__free(s->page);
	sonde__u64map_free(&s->by_id);
	sonde__buf_free(&s->unknown);
	sonde__buf_free(&s->failed);
	sonde__buf_free(&s->scratch);
	sonde__ftrace_bundle_free(&s->bundle);
	sonde__free(s);
}
