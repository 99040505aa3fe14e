/* linux.process_stats. See procstats.h. */
#include "base/alloc.h"
#include "probes/procstats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/array.h"
#include "base/buf.h"
#include "base/pb.h"
#include "base/u64map.h"
#include "probes/cfg_unsupported.h"
#include "proc/proc.h"

enum {
	MIN_POLL_MS = 100,
	PACKET_FLUSH = 64 * 1024, /* a ProcessTree or ProcessStats is split past this */
	TP_TIMESTAMP = 8,
	TP_PROCESS_TREE = 2,
	TP_PROCESS_STATS = 9,
	PT_PROCESSES = 1,
	PT_THREADS = 2,
	PT_COLLECTION_END = 3,
	PS_PROCESSES = 1,
	PS_COLLECTION_END = 2,
};

/* --- config --- */

int sonde__procstats_config_parse(const void *buf, size_t len, struct procstats_config *c)
{
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	uint64_t v;
	int rc;

	memset(c, 0, sizeof(*c));
	c->on_demand = true;
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == 1 && f.wire == PB_VARINT) {
			if (f.u == 2)
				c->on_demand = false;
		} else if (f.num == 1 && f.wire == PB_LEN) {
			struct pb_reader q = pb_sub(&f);
			while ((rc = sonde__pb_packed_next(&q, &v)) > 0)
				if (v == 2)
					c->on_demand = false;
			if (rc < 0)
				return -SONDE_E_FORMAT;
		} else if (f.num == 2 && f.wire == PB_VARINT) {
			c->scan_all_processes_on_start = f.u != 0;
		} else if (f.num == 3 && f.wire == PB_VARINT) {
			c->record_thread_names = f.u != 0;
		} else if (f.num == 4 && f.wire == PB_VARINT) {
			c->proc_stats_poll_ms = f.u == 0	    ? 0
						: f.u < MIN_POLL_MS ? MIN_POLL_MS
						: f.u > UINT32_MAX  ? UINT32_MAX
								    : (uint32_t)f.u;
		} else {
			sonde__probes_unsupported_mark(sonde__procstats_unsupported, &f,
						       &c->unsupported);
		}
	}
	return rc < 0 ? rc : 0;
}

/* --- parsers --- */

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool parse_i64(const char **p, const char *end, int64_t *out)
{
	const char *q = *p;
	uint64_t v = 0;
	bool neg = false;

	while (q < end && blank(*q))
		q++;
	if (q < end && *q == '-')
		neg = true, q++;
	const char *start = q;
	while (q < end && *q >= '0' && *q <= '9') {
		if (v > (uint64_t)INT64_MAX / 10)
			return false;
		v = v * 10 + (uint64_t)(*q - '0');
		q++;
	}
	if (q == start || v > (uint64_t)INT64_MAX)
		return false;
	*p = q;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return true;
}

int sonde__procstats_parse_status(const char *buf, size_t len, struct procstats_status *st)
{
	static const struct {
		const char *key;
		size_t off;
	} kb[] = {
		{"VmSize:", offsetof(struct procstats_status, vm_size_kb)},
		{"VmRSS:", offsetof(struct procstats_status, vm_rss_kb)},
		{"RssAnon:", offsetof(struct procstats_status, rss_anon_kb)},
		{"RssFile:", offsetof(struct procstats_status, rss_file_kb)},
		{"RssShmem:", offsetof(struct procstats_status, rss_shmem_kb)},
		{"VmSwap:", offsetof(struct procstats_status, vm_swap_kb)},
		{"VmLck:", offsetof(struct procstats_status, vm_locked_kb)},
		{"VmHWM:", offsetof(struct procstats_status, vm_hwm_kb)},
	};
	const char *p = buf, *end = buf + len;
	int found = 0;
	int64_t v;

	memset(st, 0, sizeof(*st));
	st->tgid = st->ppid = -1;
	st->uid = -1;
	for (size_t i = 0; i < sizeof(kb) / sizeof(kb[0]); i++)
		*(int64_t *)((char *)st + kb[i].off) = -1;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		size_t n = (size_t)(e - p);
		const char *q;
		if (n > 5 && !memcmp(p, "Name:", 5)) {
			q = p + 5;
			while (q < e && blank(*q))
				q++;
			size_t l = (size_t)(e - q) < sizeof(st->name) - 1 ? (size_t)(e - q)
									  : sizeof(st->name) - 1;
			memcpy(st->name, q, l);
			st->name[l] = '\0';
			found++;
		} else if (n > 5 && !memcmp(p, "Tgid:", 5) && (q = p + 5, parse_i64(&q, e, &v))) {
			st->tgid = (pid_t)v;
			found++;
		} else if (n > 5 && !memcmp(p, "PPid:", 5) && (q = p + 5, parse_i64(&q, e, &v))) {
			st->ppid = (pid_t)v;
			found++;
		} else if (n > 4 && !memcmp(p, "Uid:", 4) && (q = p + 4, parse_i64(&q, e, &v))) {
			st->uid = v;
			found++;
		} else {
			for (size_t i = 0; i < sizeof(kb) / sizeof(kb[0]); i++) {
				size_t kl = strlen(kb[i].key);
				if (n > kl && !memcmp(p, kb[i].key, kl) &&
				    (q = p + kl, parse_i64(&q, e, &v))) {
					*(int64_t *)((char *)st + kb[i].off) = v;
					found++;
				}
			}
		}
		p = nl ? nl + 1 : end;
	}
	return found ? 0 : -SONDE_E_FORMAT;
}

int sonde__procstats_parse_stat(const char *buf, size_t len, struct procstats_stat *st)
{
	const char *end = buf + len, *q;
	int64_t v[20];

	memset(st, 0, sizeof(*st));
	/* The comm ends at the last ')': a comm may contain ") ". */
	const char *rp = NULL;
	for (const char *p = buf; p < end; p++)
		if (*p == ')')
			rp = p;
	if (!rp || end - rp < 4)
		return -SONDE_E_FORMAT;
	q = rp + 1;
	while (q < end && blank(*q))
		q++;
	if (q >= end)
		return -SONDE_E_FORMAT;
	st->state = *q++;
	/* Fields 4 (ppid) to 22 (starttime), 1-based as in proc(5). */
	for (int i = 0; i < 19; i++)
		if (!parse_i64(&q, end, &v[i]))
			return -SONDE_E_FORMAT;
	st->ppid = (pid_t)v[0];
	st->utime = (uint64_t)(v[10] < 0 ? 0 : v[10]);
	st->stime = (uint64_t)(v[11] < 0 ? 0 : v[11]);
	st->start_time = (uint64_t)(v[18] < 0 ? 0 : v[18]);
	return 0;
}

/* --- the data source --- */

struct procstats {
	struct procstats_config cfg;
	char proc[256];
	struct u64map seen_tids; /* threads already in the trace */
	struct u64map seen_pids; /* processes already in the trace */
	int *pending;
	size_t npending, pending_cap;
	struct buf out, text;
	size_t outer; /* the open ProcessTree / ProcessStats mark */
	bool open;
	int kind; /* TP_PROCESS_TREE or TP_PROCESS_STATS */
	uint64_t next_poll;
	bool polled;
	uint64_t ns_per_tick;
	procstats_emit_fn emit;
	void *ctx;
};

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct procstats *sonde__procstats_new(const struct procstats_config *c, const char *proc_root,
				procstats_emit_fn emit, void *ctx)
{
	struct procstats *s = sonde__calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->cfg = *c;
	snprintf(s->proc, sizeof(s->proc), "%s", proc_root ? proc_root : "/proc");
	long hz = sysconf(_SC_CLK_TCK);
	s->ns_per_tick = hz > 0 ? 1000000000u / (uint64_t)hz : 10000000u;
	s->emit = emit;
	s->ctx = ctx;
	return s;
}

void sonde__procstats_free(struct procstats *s)
{
	if (!s)
		return;
	sonde__u64map_free(&s->seen_tids);
	sonde__u64map_free(&s->seen_pids);
	sonde__free(s->pending);
	sonde__buf_free(&s->out);
	sonde__buf_free(&s->text);
	sonde__free(s);
}

static int read_text(struct procstats *s, const char *fmt, int a, int b)
{
	char rel[128], path[512];

	snprintf(rel, sizeof(rel), fmt, a, b);
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", s->proc, rel) >= sizeof(path))
		return -ENAMETOOLONG;
	return sonde__proc_read_file(path, &s->text);
}

/* Packets: one TracePacket{timestamp, process_tree | process_stats} at a time, emitted
 * and restarted once large. */
static void packet_open(struct procstats *s, int kind)
{
	sonde__buf_reset(&s->out);
	sonde__pb_put_varint(&s->out, TP_TIMESTAMP, boottime_ns());
	s->outer = sonde__pb_begin(&s->out, (uint32_t)kind);
	s->kind = kind;
	s->open = true;
}

static int packet_close(struct procstats *s)
{
	if (!s->open)
		return 0;
	s->open = false;
	sonde__pb_put_varint(&s->out, s->kind == TP_PROCESS_TREE ? PT_COLLECTION_END : PS_COLLECTION_END,
		      boottime_ns());
	sonde__pb_end(&s->out, s->outer);
	int r = buf_error(&s->out);
	return r ? r : s->emit(s->ctx, s->out.data, s->out.len);
}

static int packet_room(struct procstats *s)
{
	if (s->out.len < PACKET_FLUSH)
		return 0;
	int kind = s->kind, r = packet_close(s);
	packet_open(s, kind);
	return r;
}

static void put_cmdline(struct procstats *s, const char *comm)
{
	/* /proc/PID/cmdline: NUL-separated arguments; empty for kernel threads and
	 * zombies, which get their comm instead (cmdline_is_comm). */
	size_t n = s->text.len;
	const char *p = (const char *)s->text.data;

	if (n == 0) {
		sonde__pb_put_string(&s->out, 3, comm);
		sonde__pb_put_bool(&s->out, 9, true);
		return;
	}
	for (size_t off = 0; off < n;) {
		const char *nul = memchr(p + off, '\0', n - off);
		size_t l = nul ? (size_t)(nul - (p + off)) : n - off;
		sonde__pb_put_bytes(&s->out, 3, p + off, l);
		off += l + 1;
	}
}

/* Writes ProcessTree.Process for pid; false if it is gone. */
static bool put_process(struct procstats *s, int pid)
{
	struct procstats_status st;

	if (read_text(s, "%d/status", pid, 0) < 0 ||
	    sonde__procstats_parse_status((const char *)s->text.data, s->text.len, &st) < 0)
		return false;
	size_t m = sonde__pb_begin(&s->out, PT_PROCESSES);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)(int64_t)pid);
	sonde__pb_put_varint(&s->out, 2, (uint64_t)(int64_t)st.ppid);
	if (st.uid >= 0)
		sonde__pb_put_varint(&s->out, 5, (uint64_t)st.uid);
	/* Kernel threads: kthreadd (2) and its children, without an mm. */
	bool kthread = pid == 2 || st.ppid == 2;
	if (kthread)
		sonde__pb_put_bool(&s->out, 8, true);
	if (read_text(s, "%d/cmdline", pid, 0) < 0)
		sonde__buf_reset(&s->text);
	put_cmdline(s, st.name);
	sonde__pb_end(&s->out, m);
	sonde__u64map_put(&s->seen_pids, (uint64_t)pid, 1);
	sonde__u64map_put(&s->seen_tids, (uint64_t)pid, 1);
	return true;
}

static void put_thread(struct procstats *s, int tid, int tgid, bool named)
{
	char comm[64] = "";

	if (named && read_text(s, "%d/task/%d/comm", tgid, tid) == 0 && s->text.len) {
		size_t l = s->text.len < sizeof(comm) - 1 ? s->text.len : sizeof(comm) - 1;
		memcpy(comm, s->text.data, l);
		comm[l] = '\0';
		if (l && comm[l - 1] == '\n')
			comm[l - 1] = '\0';
	}
	size_t m = sonde__pb_begin(&s->out, PT_THREADS);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)(int64_t)tid);
	sonde__pb_put_varint(&s->out, 3, (uint64_t)(int64_t)tgid);
	if (comm[0])
		sonde__pb_put_string(&s->out, 2, comm);
	sonde__pb_end(&s->out, m);
	sonde__u64map_put(&s->seen_tids, (uint64_t)tid, 1);
}

static bool numeric(const char *name, int *out)
{
	char *end;
	long v = strtol(name, &end, 10);

	if (end == name || *end || v <= 0 || v > 0x3fffffff)
		return false;
	*out = (int)v;
	return true;
}

/* The threads of pid other than its main thread. */
static int put_threads(struct procstats *s, int pid, bool named)
{
	char path[512];
	int r = 0, tid;

	snprintf(path, sizeof(path), "%s/%d/task", s->proc, pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	for (struct dirent *e; r == 0 && (e = readdir(d));)
		if (numeric(e->d_name, &tid) && tid != pid) {
			put_thread(s, tid, pid, named);
			r = packet_room(s);
		}
	closedir(d);
	return r;
}

int sonde__procstats_start(struct procstats *s)
{
	char path[300];
	int r = 0, pid;

	if (!s->cfg.scan_all_processes_on_start)
		return 0;
	snprintf(path, sizeof(path), "%s", s->proc);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	packet_open(s, TP_PROCESS_TREE);
	for (struct dirent *e; r == 0 && (e = readdir(d));) {
		if (!numeric(e->d_name, &pid) || !put_process(s, pid))
			continue;
		r = put_threads(s, pid, true);
		if (r == 0)
			r = packet_room(s);
	}
	closedir(d);
	int c = packet_close(s);
	return r ? r : c;
}

void sonde__procstats_note_pid(struct procstats *s, int tid)
{
	if (!s->cfg.on_demand || tid <= 0 || sonde__u64map_get(&s->seen_tids, (uint64_t)tid))
		return;
	if (sonde__array_grow(&s->pending, &s->pending_cap, s->npending + 1, sizeof(int), 64) < 0)
		return; /* out of memory: the thread stays unnamed, and is tried again */
	s->pending[s->npending++] = tid;
	/* Seen from now on, so that one thread is queued once however many events name it;
	 * a thread gone by the flush is not retried. */
	sonde__u64map_put(&s->seen_tids, (uint64_t)tid, 1);
}

void sonde__procstats_on_pid(void *ctx, int tid)
{
	sonde__procstats_note_pid(ctx, tid);
}

int sonde__procstats_flush(struct procstats *s)
{
	struct procstats_status st;
	int r = 0;

	if (s->npending == 0)
		return 0;
	packet_open(s, TP_PROCESS_TREE);
	for (size_t i = 0; i < s->npending && r == 0; i++) {
		int tid = s->pending[i];
		/* /proc/TID works for any thread, listed or not: its status names the tgid. */
		if (read_text(s, "%d/status", tid, 0) < 0 ||
		    sonde__procstats_parse_status((const char *)s->text.data, s->text.len, &st) < 0 ||
		    st.tgid <= 0)
			continue;
		if (!sonde__u64map_get(&s->seen_pids, (uint64_t)st.tgid))
			put_process(s, st.tgid);
		if (tid != st.tgid)
			put_thread(s, tid, st.tgid, s->cfg.record_thread_names);
		r = packet_room(s);
	}
	s->npending = 0;
	int c = packet_close(s);
	return r ? r : c;
}

static void put_stats(struct procstats *s, int pid)
{
	struct procstats_status st;
	struct procstats_stat ps;
	int64_t oom;

	if (read_text(s, "%d/status", pid, 0) < 0 ||
	    sonde__procstats_parse_status((const char *)s->text.data, s->text.len, &st) < 0 ||
	    st.vm_size_kb < 0)
		return; /* gone, or a kernel thread: no memory of its own */
	size_t m = sonde__pb_begin(&s->out, PS_PROCESSES);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)(int64_t)pid);
	const int64_t v[] = {st.vm_size_kb,   st.vm_rss_kb,  st.rss_anon_kb,  st.rss_file_kb,
			     st.rss_shmem_kb, st.vm_swap_kb, st.vm_locked_kb, st.vm_hwm_kb};
	for (int i = 0; i < 8; i++)
		if (v[i] >= 0)
			sonde__pb_put_varint(&s->out, (uint32_t)(2 + i), (uint64_t)v[i]);
	if (read_text(s, "%d/oom_score_adj", pid, 0) == 0) {
		const char *p = (const char *)s->text.data;
		if (s->text.len && parse_i64(&p, p + s->text.len, &oom))
			sonde__pb_put_varint(&s->out, 10, (uint64_t)oom);
	}
	if (read_text(s, "%d/stat", pid, 0) == 0 &&
	    sonde__procstats_parse_stat((const char *)s->text.data, s->text.len, &ps) == 0) {
		sonde__pb_put_varint(&s->out, 21, ps.utime * s->ns_per_tick);
		sonde__pb_put_varint(&s->out, 22, ps.stime * s->ns_per_tick);
	}
	sonde__pb_end(&s->out, m);
}

int64_t sonde__procstats_tick(struct procstats *s, uint64_t now_ms)
{
	int r = 0, pid;

	if (!s->cfg.proc_stats_poll_ms)
		return -EINVAL;
	if (s->polled && now_ms < s->next_poll)
		return (int64_t)(s->next_poll - now_ms);
	s->next_poll = s->polled ? s->next_poll + s->cfg.proc_stats_poll_ms
				 : now_ms + s->cfg.proc_stats_poll_ms;
	if (s->next_poll <= now_ms)
		s->next_poll = now_ms + s->cfg.proc_stats_poll_ms;
	s->polled = true;
	DIR *d = opendir(s->proc);
	if (!d)
		return -errno;
	packet_open(s, TP_PROCESS_STATS);
	for (struct dirent *e; r == 0 && (e = readdir(d));)
		if (numeric(e->d_name, &pid)) {
			put_stats(s, pid);
			r = packet_room(s);
		}
	closedir(d);
	int c = packet_close(s);
	if (r < 0 || c < 0)
		return r < 0 ? r : c;
	return (int64_t)(s->next_poll - now_ms);
}
