/* PerfEventConfig (perfetto-wire.md §7.1) for the linux.perf data source, and the target
 * selection that follows traced_perf: pids and cmdline patterns, with exclusions. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "probes/perfds.h"

enum {
	DS_TRACING_SESSION_ID = 4,
	DS_PERF_EVENT_CONFIG = 111,
	PE_SAMPLING_FREQUENCY = 2,
	PE_RING_BUFFER_PAGES = 3,
	PE_TARGET_PID = 4,
	PE_TARGET_CMDLINE = 5,
	PE_EXCLUDE_PID = 6,
	PE_EXCLUDE_CMDLINE = 7,
	PE_READ_PERIOD_MS = 8,
	PE_KERNEL_FRAMES = 12,
	PE_MAX_DAEMON_MEMORY_KB = 13,
	PE_TIMEBASE = 15,
	PE_CALLSTACK_SAMPLING = 16,
	TB_PERIOD = 1,
	TB_FREQUENCY = 2,
	TB_TRACEPOINT = 3,
	TB_COUNTER = 4,
	TB_RAW_EVENT = 5,
	TB_POLL_PERIOD_MS = 6,
	TP_NAME = 1,
	TP_FILTER = 2,
	CS_SCOPE = 1,
	CS_KERNEL_FRAMES = 2,
	CS_USER_FRAMES = 3,
	SC_TARGET_PID = 1,
	SC_TARGET_CMDLINE = 2,
	SC_EXCLUDE_PID = 3,
	SC_EXCLUDE_CMDLINE = 4,
	MAX_TARGETS = 1024,
	DEFAULT_FREQUENCY = 10,	      /* traced_perf's default */
	DEFAULT_READ_PERIOD_MS = 100, /* traced_perf's default */
	MAX_RING_PAGES = 1 << 16,
	/* perf_event_config.proto: "at most 511 characters of cmdline are considered" */
	CMDLINE_MAX = 511,
	/* tracefs names are short (the longest group and event names are under 64 bytes);
	 * a filter is an expression over a few fields */
	TRACEPOINT_NAME_MAX = 127,
	TRACEPOINT_FILTER_MAX = 4095,
};

/* What the message holds, before the precedence rules are applied. */
struct raw {
	bool has_timebase, has_callstack, tracepoint, raw_event, poll;
	bool tp_too_long, tp_has_nul;
	char *tp_name, *tp_filter; /* owned until resolve hands them to the config */
	uint64_t tb_period, tb_frequency, legacy_frequency;
	uint32_t counter, user_frames, ring_pages, read_period_ms;
	uint64_t max_mem_kb;
	bool cs_kernel, legacy_kernel;
	/* targets: [0] legacy flat fields, [1] callstack_sampling.scope */
	struct perfds_cfg t[2];
};

static void set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static int push_pid(int32_t **v, size_t *n, uint64_t pid)
{
	if (*n >= MAX_TARGETS)
		return -SONDE_E_LIMIT;
	int32_t *nv = sonde__realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -ENOMEM;
	nv[(*n)++] = (int32_t)pid;
	*v = nv;
	return 0;
}

/* A repeated int32 field, packed or not. */
static int add_pids(int32_t **v, size_t *n, const struct pb_field *f)
{
	if (f->wire == PB_VARINT)
		return push_pid(v, n, f->u);
	if (f->wire != PB_LEN)
		return -SONDE_E_FORMAT;
	struct pb_reader r = pb_sub(f);
	uint64_t pid;
	int rc, err;
	while ((rc = sonde__pb_packed_next(&r, &pid)) > 0)
		if ((err = push_pid(v, n, pid)) < 0)
			return err;
	return rc;
}

/* A pattern is kept as given, up to a NUL and at most CMDLINE_MAX bytes. */
static int add_cmdline(char ***v, size_t *n, const struct pb_field *f)
{
	if (f->wire != PB_LEN)
		return -SONDE_E_FORMAT;
	if (*n >= MAX_TARGETS)
		return -SONDE_E_LIMIT;
	char **nv = sonde__realloc(*v, (*n + 1) * sizeof(**v));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	if (!(nv[*n] = sonde__strndup((const char *)f->ptr,
				      f->len < CMDLINE_MAX ? f->len : CMDLINE_MAX)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* The first pattern of v with more than one '*', or NULL. */
static const char *bad_pattern(char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *star = strchr(v[i], '*');
		if (star && strchr(star + 1, '*'))
			return v[i];
	}
	return NULL;
}

static int parse_scope(struct perfds_cfg *t, struct pb_reader r)
{
	struct pb_field f;
	int rc, err = 0;

	while (!err && (rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == SC_TARGET_PID)
			err = add_pids(&t->pids, &t->n_pids, &f);
		else if (f.num == SC_EXCLUDE_PID)
			err = add_pids(&t->exclude_pids, &t->n_exclude_pids, &f);
		else if (f.num == SC_TARGET_CMDLINE)
			err = add_cmdline(&t->cmdlines, &t->n_cmdlines, &f);
		else if (f.num == SC_EXCLUDE_CMDLINE)
			err = add_cmdline(&t->exclude_cmdlines, &t->n_exclude_cmdlines, &f);
	}
	return err ? err : rc;
}

/* A string field kept whole; too long or holding a NUL is said by resolve. */
static int take_str(char **dst, const struct pb_field *f, size_t max, struct raw *w)
{
	if (f->wire != PB_LEN)
		return -SONDE_E_FORMAT;
	if (f->len > max) {
		w->tp_too_long = true;
		return 0;
	}
	if (memchr(f->ptr, 0, f->len))
		w->tp_has_nul = true;
	char *s = sonde__strndup((const char *)f->ptr, f->len);
	if (!s)
		return -ENOMEM;
	sonde__free(*dst);
	*dst = s;
	return 0;
}

static int parse_tracepoint(struct raw *w, struct pb_reader r)
{
	struct pb_field f;
	int rc, err = 0;

	w->tracepoint = true;
	w->counter = 0, w->raw_event = false;
	while (!err && (rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == TP_NAME)
			err = take_str(&w->tp_name, &f, TRACEPOINT_NAME_MAX, w);
		else if (f.num == TP_FILTER)
			err = take_str(&w->tp_filter, &f, TRACEPOINT_FILTER_MAX, w);
	}
	return err ? err : rc;
}

static int parse_timebase(struct raw *w, struct pb_reader r)
{
	struct pb_field f;
	int rc, err = 0;

	w->has_timebase = true;
	while (!err && (rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == TB_PERIOD && f.wire == PB_VARINT)
			w->tb_period = f.u, w->tb_frequency = 0, w->poll = false;
		else if (f.num == TB_FREQUENCY && f.wire == PB_VARINT)
			w->tb_frequency = f.u, w->tb_period = 0, w->poll = false;
		else if (f.num == TB_POLL_PERIOD_MS)
			w->poll = true;
		else if (f.num == TB_COUNTER && f.wire == PB_VARINT)
			w->counter = (uint32_t)f.u, w->tracepoint = w->raw_event = false;
		else if (f.num == TB_TRACEPOINT)
			err = f.wire == PB_LEN ? parse_tracepoint(w, pb_sub(&f)) : -SONDE_E_FORMAT;
		else if (f.num == TB_RAW_EVENT)
			w->raw_event = true, w->tracepoint = false, w->counter = 0;
	}
	return err ? err : rc;
}

static int parse_callstack(struct raw *w, struct pb_reader r)
{
	struct pb_field f;
	int rc, err = 0;

	w->has_callstack = true;
	while (!err && (rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == CS_SCOPE && f.wire == PB_LEN)
			err = parse_scope(&w->t[1], pb_sub(&f));
		else if (f.num == CS_KERNEL_FRAMES)
			w->cs_kernel = f.u != 0;
		else if (f.num == CS_USER_FRAMES)
			w->user_frames = (uint32_t)f.u;
	}
	return err ? err : rc;
}

static int parse_perf(struct raw *w, struct pb_reader r)
{
	struct pb_field f;
	int rc, err = 0;

	while (!err && (rc = sonde__pb_next(&r, &f)) > 0) {
		bool len = f.wire == PB_LEN;
		switch (f.num) {
		case PE_SAMPLING_FREQUENCY:
			w->legacy_frequency = f.u;
			break;
		case PE_RING_BUFFER_PAGES:
			w->ring_pages = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
			break;
		case PE_TARGET_PID:
			err = add_pids(&w->t[0].pids, &w->t[0].n_pids, &f);
			break;
		case PE_EXCLUDE_PID:
			err = add_pids(&w->t[0].exclude_pids, &w->t[0].n_exclude_pids, &f);
			break;
		case PE_TARGET_CMDLINE:
			err = add_cmdline(&w->t[0].cmdlines, &w->t[0].n_cmdlines, &f);
			break;
		case PE_EXCLUDE_CMDLINE:
			err = add_cmdline(&w->t[0].exclude_cmdlines, &w->t[0].n_exclude_cmdlines,
					  &f);
			break;
		case PE_READ_PERIOD_MS:
			w->read_period_ms = (uint32_t)f.u;
			break;
		case PE_KERNEL_FRAMES:
			w->legacy_kernel = f.u != 0;
			break;
		case PE_MAX_DAEMON_MEMORY_KB:
			w->max_mem_kb = f.u;
			break;
		case PE_TIMEBASE:
			err = len ? parse_timebase(w, pb_sub(&f)) : -SONDE_E_FORMAT;
			break;
		case PE_CALLSTACK_SAMPLING:
			err = len ? parse_callstack(w, pb_sub(&f)) : -SONDE_E_FORMAT;
			break;
		}
	}
	return err ? err : rc;
}

static void move_targets(struct perfds_cfg *c, struct perfds_cfg *t)
{
	c->pids = t->pids, c->n_pids = t->n_pids;
	c->exclude_pids = t->exclude_pids, c->n_exclude_pids = t->n_exclude_pids;
	c->cmdlines = t->cmdlines, c->n_cmdlines = t->n_cmdlines;
	c->exclude_cmdlines = t->exclude_cmdlines, c->n_exclude_cmdlines = t->n_exclude_cmdlines;
	memset(t, 0, sizeof(*t));
}

/* A tracepoint timebase: "group/name" or "group:name" (perf_events.proto), kept as
 * GROUP:NAME; a period in hits, every one without it. Its name is checked against
 * tracefs when the recording starts. */
static int resolve_tracepoint(struct raw *w, struct perfds_cfg *c, char *err, size_t err_len)
{
	const char *n = w->tp_name;
	size_t g = n ? strcspn(n, ":/") : 0;

	if (w->tp_too_long || w->tp_has_nul) {
		set_err(err, err_len, "tracepoint name or filter is too long or holds a NUL");
		return -EINVAL;
	}
	if (!n || !n[g] || g == 0 || !n[g + 1] || strpbrk(n + g + 1, ":/") || strstr(n, "..")) {
		set_err(err, err_len, "tracepoint name \"%.64s\" is not group/name or group:name",
			n ? n : "");
		return -EINVAL;
	}
	if (w->tb_frequency) {
		set_err(err, err_len,
			"a frequency on a tracepoint timebase is not supported: set period (or "
			"nothing, for every hit)");
		return -EINVAL;
	}
	c->tracepoint = w->tp_name;
	c->tracepoint[g] = ':';
	c->tracepoint_filter = w->tp_filter && w->tp_filter[0] ? w->tp_filter : NULL;
	if (!c->tracepoint_filter)
		sonde__free(w->tp_filter);
	w->tp_name = w->tp_filter = NULL;
	c->counter = 0;
	c->frequency = 0;
	c->period = w->tb_period ? w->tb_period : 1;
	return 0;
}

/* What every timebase shares: ring, unwinding, targets. */
static int resolve_rest(struct perfds_cfg *c, char *err, size_t err_len)
{
	if (c->counter && c->counter != PERFDS_COUNTER_SW_CPU_CLOCK &&
	    c->counter != PERFDS_COUNTER_HW_CPU_CYCLES) {
		set_err(err, err_len,
			"counter %u is not supported: use SW_CPU_CLOCK or HW_CPU_CYCLES",
			c->counter);
		return -EINVAL;
	}
	if (c->period && c->counter == PERFDS_COUNTER_HW_CPU_CYCLES) {
		set_err(err, err_len, "a period of HW_CPU_CYCLES is not supported: use frequency");
		return -EINVAL;
	}
	if (c->ring_pages && (c->ring_pages & (c->ring_pages - 1))) {
		set_err(err, err_len, "ring_buffer_pages %u is not a power of two", c->ring_pages);
		return -EINVAL;
	}
	if (c->ring_pages > MAX_RING_PAGES) {
		set_err(err, err_len, "ring_buffer_pages %u is above %u", c->ring_pages,
			MAX_RING_PAGES);
		return -EINVAL;
	}
	if (c->user_frames > PERFDS_UNWIND_KERNEL_FRAME_POINTER) {
		set_err(err, err_len, "unknown user_frames mode %u", c->user_frames);
		return -EINVAL;
	}
	const char *bad = bad_pattern(c->cmdlines, c->n_cmdlines);
	if (!bad)
		bad = bad_pattern(c->exclude_cmdlines, c->n_exclude_cmdlines);
	if (bad) {
		set_err(err, err_len, "cmdline pattern \"%.64s\" has more than one '*' wildcard",
			bad);
		return -EINVAL;
	}
	/* no target: every process, as traced_perf samples without a scope */
	c->system_wide = !c->n_pids && !c->n_cmdlines;
	return 0;
}

/* traced_perf's precedence: a timebase replaces the flat sampling_frequency, and a
 * callstack_sampling message replaces the flat targets and kernel_frames. */
static int resolve(struct raw *w, struct perfds_cfg *c, char *err, size_t err_len)
{
	move_targets(c, &w->t[w->has_callstack ? 1 : 0]);
	c->kernel_frames = w->has_callstack ? w->cs_kernel : w->legacy_kernel;
	c->user_frames = w->user_frames;
	c->counter = w->counter ? w->counter : PERFDS_COUNTER_SW_CPU_CLOCK;
	c->frequency = w->has_timebase ? w->tb_frequency : w->legacy_frequency;
	c->period = w->has_timebase ? w->tb_period : 0;
	if (!c->frequency && !c->period)
		c->frequency = DEFAULT_FREQUENCY;
	c->ring_pages = w->ring_pages;
	c->read_period_ms = w->read_period_ms ? w->read_period_ms : DEFAULT_READ_PERIOD_MS;
	c->max_daemon_memory_kb = w->max_mem_kb;
	if (w->raw_event || w->poll) {
		set_err(err, err_len,
			"%s timebases are not supported: use a counter or a tracepoint",
			w->raw_event ? "raw event" : "polled");
		return -EINVAL;
	}
	if (w->tracepoint) {
		int rc = resolve_tracepoint(w, c, err, err_len);
		if (rc)
			return rc;
		/* every switch-out with its stack: the intervals are built from all of them, so
		 * a filter or one hit in N stays a plain sampling of the tracepoint */
		c->off_cpu = w->has_callstack && !strcmp(c->tracepoint, "sched:sched_switch") &&
			     !c->tracepoint_filter && c->period <= 1;
	}
	return resolve_rest(c, err, err_len);
}

int sonde__perfds_cfg_parse(const uint8_t *ds_config, size_t len, struct perfds_cfg *c, char *err,
			    size_t err_len)
{
	struct pb_reader r = pb_reader_init(ds_config, len);
	struct raw w = {0};
	struct pb_field f;
	int rc;

	memset(c, 0, sizeof(*c));
	if (err_len)
		err[0] = 0;
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == DS_TRACING_SESSION_ID && f.wire == PB_VARINT)
			c->session_id = f.u;
		else if (f.num == DS_PERF_EVENT_CONFIG && f.wire == PB_LEN)
			rc = parse_perf(&w, pb_sub(&f)); /* repeated: merged, as protobuf does */
		if (rc < 0)
			break;
	}
	if (rc == 0)
		rc = resolve(&w, c, err, err_len);
	else if (err_len && !err[0])
		set_err(err, err_len, "malformed perf_event_config: %s", sonde_strerror(rc));
	for (int i = 0; i < 2; i++)
		sonde__perfds_cfg_free(&w.t[i]);
	sonde__free(w.tp_name);
	sonde__free(w.tp_filter);
	return rc;
}

static void free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sonde__free(v[i]);
	sonde__free(v);
}

void sonde__perfds_cfg_free(struct perfds_cfg *c)
{
	if (!c)
		return;
	sonde__free(c->pids);
	sonde__free(c->exclude_pids);
	free_strs(c->cmdlines, c->n_cmdlines);
	free_strs(c->exclude_cmdlines, c->n_exclude_cmdlines);
	sonde__free(c->tracepoint);
	sonde__free(c->tracepoint_filter);
	memset(c, 0, sizeof(*c));
}

/* One '*' at most (checked when parsed); without one, an exact comparison. */
static bool glob1(const char *pat, const char *s, size_t n)
{
	const char *star = strchr(pat, '*');

	if (!star)
		return strlen(pat) == n && memcmp(pat, s, n) == 0;
	size_t pre = (size_t)(star - pat), post = strlen(star + 1);
	return n >= pre + post && memcmp(pat, s, pre) == 0 &&
	       memcmp(star + 1, s + n - post, post) == 0;
}

bool sonde__perfds_cmdline_match(const char *pattern, const char *cmdline, size_t len)
{
	const char *nul = memchr(cmdline, 0, len);
	size_t n = nul ? (size_t)(nul - cmdline) : len; /* argv0 */

	if (n > CMDLINE_MAX)
		n = CMDLINE_MAX;
	if (pattern[0] == '/')
		return glob1(pattern, cmdline, n);
	const char *slash = memrchr(cmdline, '/', n);
	const char *name = slash ? slash + 1 : cmdline;
	return glob1(pattern, name, n - (size_t)(name - cmdline));
}

static bool has_pid(const int32_t *v, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == pid)
			return true;
	return false;
}

static bool matches_any(char *const *v, size_t n, const char *cmdline, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (sonde__perfds_cmdline_match(v[i], cmdline, len))
			return true;
	return false;
}

static ssize_t read_proc(pid_t pid, const char *what, char *buf, size_t cap)
{
	char path[64];
	ssize_t len = 0, n;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((size_t)len < cap - 1 && (n = read(fd, buf + len, cap - 1 - (size_t)len)) > 0)
		len += n;
	close(fd);
	buf[len] = 0;
	return len;
}

bool sonde__perfds_is_target(const struct perfds_cfg *c, pid_t pid)
{
	char raw[CMDLINE_MAX + 1];
	ssize_t len;

	if (has_pid(c->exclude_pids, c->n_exclude_pids, pid))
		return false;
	bool by_pid = c->system_wide || has_pid(c->pids, c->n_pids, pid);
	if (!c->n_cmdlines && !c->n_exclude_cmdlines)
		return by_pid;
	len = read_proc(pid, "cmdline", raw, sizeof(raw));
	if (len <= 0) /* kernel threads have none; gone processes neither */
		return by_pid;
	if (matches_any(c->exclude_cmdlines, c->n_exclude_cmdlines, raw, (size_t)len))
		return false;
	return by_pid || matches_any(c->cmdlines, c->n_cmdlines, raw, (size_t)len);
}
