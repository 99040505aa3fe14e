/* The linux.ftrace, linux.process_stats and linux.sys_stats data sources of `sonde probes`
 * (docs/probes.md "The system data sources"): the registry's adaptors (probes.h) around the
 * modules of docs/probes-sources.md (ftrace.h, procstats.h, sysstats.h).
 *
 * Each instance owns one trace writer; the module's emit callback writes its packets
 * there, and the writer adds the trusted fields. The modules own no thread: the ftrace
 * session's per-CPU fds are polled in the probes' loop and drained when ready and every
 * drain period, procstats and sysstats ticks run from the loop's timeout.
 *
 * When linux.ftrace and linux.process_stats are in one tracing session (the service's
 * DataSourceConfig.tracing_session_id), the threads ftrace's sched events name are fed to
 * the process_stats instance (its on-demand naming) and written after each drain.
 *
 * Authorization (whom an instance acts for: sonde__probes_consumer): ftrace only for a
 * consumer the kernel would let read tracefs; process_stats only when /proc shows the
 * consumer every process; sys_stats reads world-readable files and is anyone's. A refused
 * instance records nothing but the reason, as an android_log packet. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "probes/cfg_unsupported.h"
#include "probes/ftrace.h"
#include "probes/probes.h"
#include "probes/procstats.h"
#include "probes/sysstats.h"
#include "perf/tracefs.h"
#include "proc/perfauth.h"

enum {
	MAX_INST = 64,
	MAX_CPUS = 1024,
	/* a drain call reads a bounded number of pages per CPU; a few more in a row when
	 * it stopped early, the rest at the next turn of the loop */
	MAX_DRAIN_ROUNDS = 4,
	F_DS_FTRACE_CONFIG = 100,
	F_DS_PROCESS_STATS_CONFIG = 103,
	F_DS_SYS_STATS_CONFIG = 104,
};

enum kind { FTRACE, PROCSTATS, SYSSTATS };

static const char *const kind_name[] = {"linux.ftrace", "linux.process_stats", "linux.sys_stats"};

struct sysds;

struct inst {
	struct sysds *sd;
	uint64_t id, session_id;
	struct sonde_trace_writer *w;
	char err[1024]; /* a refused config or consumer: said in the trace at start */
	bool refused;
	struct perfauth_consumer who;
	bool any;
	char who_desc[64];
	uint64_t next_ms; /* the next drain or tick (CLOCK_MONOTONIC ms) */
	/* linux.ftrace */
	struct ftrace_config fcfg;
	struct ftrace_session *fs;
	int fds[MAX_CPUS];
	size_t nfds;
	struct inst *link; /* the session's process_stats, during a drain only */
	/* linux.process_stats */
	struct procstats_config pcfg;
	struct procstats *ps;
	/* linux.sys_stats */
	struct sysstats_config scfg;
	struct sysstats *ss;
};

struct sysds {
	struct probes *core;
	enum kind kind;
	struct inst *inst[MAX_INST];
	size_t ninst;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void note(struct inst *in, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void note(struct inst *in, int prio, const char *fmt, ...)
{
	const char *tag = kind_name[in->sd->kind];
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sonde_log(prio == PROBES_LOG_ERROR ? SONDE_LOG_ERROR : SONDE_LOG_WARN,
		  "%s (session %llu, %s): %s", tag, (unsigned long long)in->session_id,
		  in->who_desc, msg);
	sonde__probes_log(in->w, tag, prio, 0, msg);
}

static int emit(void *ctx, const void *pkt, size_t len)
{
	struct inst *in = ctx;

	/* a packet the SMB had no room for is lost; the writer counts it */
	if (in->w)
		sonde_trace_writer__write_packet(in->w, pkt, len);
	return 0;
}

/* ---- authorization ---- */

static bool has_cap(const struct perfauth_consumer *c, int cap)
{
	return c->caps_known && ((c->cap_eff >> cap) & 1);
}

/* tracefs holds every process's scheduling and the kernel's own events: the kernel lets
 * root and CAP_SYS_ADMIN read it, and whoever its mount's uid, gid and mode (tracefs's
 * mount options) let open its directory and read its files. NULL, or why not (in buf). */
static const char *may_read_tracefs(const struct perfauth_consumer *c, char *buf, size_t n)
{
	char root[256];
	struct stat st;

	if (c->uid == 0 || has_cap(c, PERFAUTH_CAP_SYS_ADMIN))
		return NULL;
	if (sonde__tracefs_find(root, sizeof(root), false) < 0 || stat(root, &st) < 0)
		return "ftrace needs root or CAP_SYS_ADMIN";
	mode_t need = st.st_uid == c->uid   ? S_IRUSR | S_IXUSR
		      : st.st_gid == c->gid ? S_IRGRP | S_IXGRP
					    : S_IROTH | S_IXOTH;
	if ((st.st_mode & need) == need)
		return NULL;
	snprintf(buf, n,
		 "%s (mode 0%o, uid %u, gid %u) is not readable by it: ftrace needs root, "
		 "CAP_SYS_ADMIN, or a tracefs mounted with a uid, gid or mode for it",
		 root, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid);
	return buf;
}

/* The hidepid option of the /proc this process sees, from /proc/self/mountinfo (0: every
 * process is visible to everyone). */
static int proc_hidepid(void)
{
	char line[4096];
	int hide = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return 2;
	while (fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - proc ");
		if (!sep || !strstr(line, " /proc "))
			continue;
		char *h = strstr(sep, "hidepid=");
		if (!h)
			continue;
		h += strlen("hidepid=");
		/* numbers (1, 2, 4) or names (noaccess, invisible, ptraceable) */
		hide = *h >= '0' && *h <= '9' ? atoi(h) : strncmp(h, "off", 3) != 0;
	}
	fclose(f);
	return hide;
}

/* The process tree names every process with its cmdline, uid and memory: what /proc shows
 * anyone unless it is mounted with hidepid, when only root and CAP_SYS_PTRACE see other
 * users' processes. The module cannot leave processes out, so such a /proc refuses the
 * source to any other consumer. */
static const char *may_read_procfs(const struct perfauth_consumer *c)
{
	if (c->uid == 0 || has_cap(c, PERFAUTH_CAP_SYS_PTRACE) || proc_hidepid() == 0)
		return NULL;
	return "/proc is mounted with hidepid: the process tree would show it other users' "
	       "processes; it needs root or CAP_SYS_PTRACE";
}

/* ---- instances ---- */

static struct inst *find(struct sysds *sd, uint64_t id, size_t *idx)
{
	for (size_t i = 0; i < sd->ninst; i++) {
		if (sd->inst[i]->id == id) {
			if (idx)
				*idx = i;
			return sd->inst[i];
		}
	}
	return NULL;
}

static uint64_t session_of(const void *cfg, size_t len)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	uint64_t id = 0;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_DS_CONFIG_TRACING_SESSION_ID && f.wire == PB_VARINT)
			id = f.u;
	return id;
}

/* The module's config field of a DataSourceConfig: the last one, as protobuf merges. */
static bool sub_config(const void *cfg, size_t len, uint32_t num, const void **p, size_t *n)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	bool found = false;

	*p = NULL, *n = 0;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == num && f.wire == PB_LEN) {
			*p = f.ptr, *n = f.len;
			found = true;
		}
	}
	return found;
}

static void refuse(struct inst *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(struct inst *in, const char *fmt, ...)
{
	va_list ap;

	if (in->refused)
		return;
	va_start(ap, fmt);
	vsnprintf(in->err, sizeof(in->err), fmt, ap);
	va_end(ap);
	in->refused = true;
}

static void parse(struct inst *in, const void *cfg, size_t len)
{
	static const uint32_t field[] = {F_DS_FTRACE_CONFIG, F_DS_PROCESS_STATS_CONFIG,
					 F_DS_SYS_STATS_CONFIG};
	enum kind k = in->sd->kind;
	const void *sub;
	size_t n;
	int rc;

	sub_config(cfg, len, field[k], &sub, &n);
	if (k == FTRACE)
		rc = sonde__ftrace_config_parse(sub, n, &in->fcfg);
	else if (k == PROCSTATS)
		rc = sonde__procstats_config_parse(sub, n, &in->pcfg);
	else
		rc = sonde__sysstats_config_parse(sub, n, &in->scfg);
	if (rc < 0)
		refuse(in, "config refused: %s", sonde_strerror(rc));
	rc = sonde__probes_consumer(in->sd->core, cfg, len, &in->who, &in->any, in->who_desc,
				    sizeof(in->who_desc));
	if (rc < 0) {
		refuse(in, "refused: %s", in->who_desc);
		return;
	}
	if (in->any)
		return;
	char buf[768], name[48];
	const char *why = k == SYSSTATS	      ? NULL
			  : in->who.anonymous ? "no one vouched for who the consumer is"
			  : k == FTRACE	      ? may_read_tracefs(&in->who, buf, sizeof(buf))
					      : may_read_procfs(&in->who);
	sonde__perfauth_consumer_name(&in->who, name, sizeof(name));
	if (why)
		refuse(in, "refused for %s: %s", name, why);
}

static struct inst *inst_new(struct sysds *sd, uint64_t id, const void *cfg, size_t len)
{
	struct inst *in = sd->ninst < MAX_INST ? sonde__calloc(1, sizeof(*in)) : NULL;

	if (!in) {
		sonde_error("%s: no room for instance %llu", kind_name[sd->kind],
			    (unsigned long long)id);
		return NULL;
	}
	in->sd = sd;
	in->id = id;
	in->session_id = session_of(cfg, len);
	parse(in, cfg, len);
	sd->inst[sd->ninst++] = in;
	return in;
}

/* The process_stats instance of the same tracing session, if it records. */
static struct inst *procstats_of(struct inst *ft)
{
	struct sysds *psd = sonde__probes_source_state(ft->sd->core, &sonde__procstats_source);

	for (size_t i = 0; psd && ft->session_id && i < psd->ninst; i++) {
		struct inst *ps = psd->inst[i];
		if (ps->session_id == ft->session_id && ps->ps && ps->pcfg.on_demand)
			return ps;
	}
	return NULL;
}

static void ft_on_pid(void *ctx, int pid)
{
	struct inst *in = ctx;

	if (in->link)
		sonde__procstats_note_pid(in->link->ps, pid);
}

/* Reads what the rings hold (all CPUs, or the one at index cpu), then writes the threads
 * it named into the session's process tree. */
static void ft_drain(struct inst *in, long cpu)
{
	int rc = 1;

	in->link = procstats_of(in);
	for (int round = 0; rc == 1 && round < MAX_DRAIN_ROUNDS; round++)
		rc = cpu < 0 ? sonde__ftrace_session_drain(in->fs)
			     : sonde__ftrace_session_drain_cpu(in->fs, (size_t)cpu);
	if (rc < 0)
		sonde_warn("linux.ftrace: reading the rings failed: %s", sonde_strerror(rc));
	if (in->link)
		sonde__procstats_flush(in->link->ps);
	in->link = NULL;
}

static void ft_end(struct inst *in)
{
	int rc;

	if (!in->fs)
		return;
	in->link = procstats_of(in);
	rc = sonde__ftrace_session_stop(in->fs);
	if (rc == -EBUSY)
		note(in, PROBES_LOG_WARN,
		     "the tracefs instance is still held by a forked child; "
		     "the next session removes it");
	if (in->link)
		sonde__procstats_flush(in->link->ps);
	in->link = NULL;
	sonde__ftrace_session_free(in->fs);
	in->fs = NULL;
	in->nfds = 0;
}

static void inst_free(struct sysds *sd, struct inst *in)
{
	size_t i;

	if (find(sd, in->id, &i))
		sd->inst[i] = sd->inst[--sd->ninst];
	ft_end(in);
	sonde__procstats_free(in->ps);
	sonde__sysstats_free(in->ss);
	sonde__ftrace_config_free(&in->fcfg);
	sonde_trace_writer__free(in->w);
	sonde__free(in);
}

/* One notice per field the config set that this source does not act on: the session
 * records without it, and the consumer is told rather than left to find it missing. */
static void note_unsupported(struct inst *in)
{
	static const struct probes_unsupported *const table[] = {sonde__ftrace_unsupported,
								 sonde__procstats_unsupported,
								 sonde__sysstats_unsupported};
	enum kind k = in->sd->kind;
	uint64_t m = k == FTRACE      ? in->fcfg.unsupported
		     : k == PROCSTATS ? in->pcfg.unsupported
				      : in->scfg.unsupported;
	const struct probes_unsupported *u;

	for (uint32_t n = 1; n < 64; n++)
		if ((m & (1ull << n)) && (u = sonde__probes_unsupported_find(table[k], n)))
			note(in, PROBES_LOG_WARN, "%s is not supported and was ignored: %s",
			     u->name, u->why);
}

static void start_ftrace(struct inst *in)
{
	char err[256] = "";
	struct ftrace_opts o = {
		.sz = sizeof(o),
		.allow_mount = true,
		.on_pid = ft_on_pid,
		.pid_ctx = in,
		.errbuf = err,
		.errlen = sizeof(err),
	};
	int cpus[MAX_CPUS];

	in->fs = sonde__ftrace_session_new(&in->fcfg, &o, emit, in);
	if (!in->fs) {
		int rc = -errno;
		note(in, PROBES_LOG_ERROR, "cannot record ftrace: %s",
		     err[0] ? err : sonde_strerror(rc));
		return;
	}
	in->nfds = sonde__ftrace_session_fds(in->fs, in->fds, cpus, MAX_CPUS);
	in->next_ms = now_ms() + sonde__ftrace_session_drain_period_ms(in->fs);
}

static void start_procstats(struct inst *in)
{
	in->ps = sonde__procstats_new(&in->pcfg, NULL, emit, in);
	if (!in->ps) {
		note(in, PROBES_LOG_ERROR, "cannot record process stats: %s",
		     sonde_strerror(-errno));
		return;
	}
	int rc = sonde__procstats_start(in->ps);
	if (rc < 0)
		note(in, PROBES_LOG_ERROR, "the process tree: %s", sonde_strerror(rc));
	in->next_ms = in->pcfg.proc_stats_poll_ms ? now_ms() : UINT64_MAX;
}

static void start_sysstats(struct inst *in)
{
	in->ss = sonde__sysstats_new(&in->scfg, NULL, NULL, emit, in);
	if (!in->ss) {
		/* EINVAL: every period is 0, nothing to sample */
		if (errno != EINVAL)
			note(in, PROBES_LOG_ERROR, "cannot record system stats: %s",
			     sonde_strerror(-errno));
		return;
	}
	in->next_ms = now_ms();
}

/* ---- the service's commands ---- */

static void on_setup(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct sysds *sd = ctx;
	struct inst *old = find(sd, id, NULL);

	if (old)
		inst_free(sd, old);
	inst_new(sd, id, cfg, len);
}

static void on_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct sysds *sd = ctx;
	struct inst *in = find(sd, id, NULL);

	if (!in && !(in = inst_new(sd, id, cfg, len)))
		return;
	if (in->w)
		return;
	in->w = sonde__probes_new_writer(sd->core, id);
	if (!in->w)
		sonde_error("%s: no trace writer for instance %llu: %s", kind_name[sd->kind],
			    (unsigned long long)id, sonde_strerror(-errno));
	in->next_ms = UINT64_MAX;
	if (in->refused) {
		note(in, PROBES_LOG_ERROR, "%s", in->err);
		return;
	}
	note_unsupported(in);
	if (sd->kind == FTRACE)
		start_ftrace(in);
	else if (sd->kind == PROCSTATS)
		start_procstats(in);
	else
		start_sysstats(in);
	if (in->w)
		sonde_trace_writer__flush(in->w);
}

static void on_stop(void *ctx, uint64_t id)
{
	struct sysds *sd = ctx;
	struct inst *in = find(sd, id, NULL);

	if (in)
		inst_free(sd, in); /* the last drain, then the writer is committed */
}

static void on_flush(void *ctx, uint64_t id)
{
	struct inst *in = find(ctx, id, NULL);

	if (!in)
		return;
	if (in->fs)
		ft_drain(in, -1);
	if (in->ps)
		sonde__procstats_flush(in->ps);
	if (in->w)
		sonde_trace_writer__flush(in->w);
}

/* ---- the loop ---- */

static void on_disconnected(void *ctx)
{
	struct sysds *sd = ctx;

	while (sd->ninst)
		inst_free(sd, sd->inst[0]);
}

static size_t on_pollfds(void *ctx, struct pollfd *fds, size_t cap)
{
	struct sysds *sd = ctx;
	size_t n = 0;

	for (size_t i = 0; i < sd->ninst; i++)
		for (size_t k = 0; k < sd->inst[i]->nfds && n < cap; k++)
			fds[n++] = (struct pollfd){.fd = sd->inst[i]->fds[k], .events = POLLIN};
	return n;
}

static void ft_process(struct inst *in, const struct pollfd *fds, size_t nfds, uint64_t now)
{
	if (now >= in->next_ms) {
		ft_drain(in, -1);
		in->next_ms = now + sonde__ftrace_session_drain_period_ms(in->fs);
		return;
	}
	for (size_t k = 0; k < nfds; k++) {
		if (!(fds[k].revents & POLLIN))
			continue;
		for (size_t c = 0; c < in->nfds; c++)
			if (fds[k].fd == in->fds[c])
				ft_drain(in, (long)c);
	}
}

static void on_process(void *ctx, const struct pollfd *fds, size_t nfds)
{
	struct sysds *sd = ctx;
	uint64_t now = now_ms();

	for (size_t i = 0; i < sd->ninst; i++) {
		struct inst *in = sd->inst[i];
		int64_t delay = -1;
		if (in->fs) {
			ft_process(in, fds, nfds, now);
			continue;
		}
		if (now < in->next_ms)
			continue;
		if (in->ps)
			delay = sonde__procstats_tick(in->ps, now);
		else if (in->ss)
			delay = sonde__sysstats_tick(in->ss, now);
		in->next_ms = delay >= 0 ? now + (uint64_t)delay : UINT64_MAX;
	}
}

static int on_timeout(void *ctx)
{
	struct sysds *sd = ctx;
	uint64_t now = now_ms(), t = UINT64_MAX;

	for (size_t i = 0; i < sd->ninst; i++)
		if (sd->inst[i]->next_ms < t)
			t = sd->inst[i]->next_ms;
	if (t == UINT64_MAX)
		return -1;
	return t > now ? (int)(t - now > INT32_MAX ? INT32_MAX : t - now) : 0;
}

static void *create(struct probes *core, enum kind kind)
{
	struct sysds *sd = sonde__calloc(1, sizeof(*sd));

	if (sd)
		*sd = (struct sysds){.core = core, .kind = kind};
	return sd;
}

static void *on_new_ftrace(struct probes *core)
{
	return create(core, FTRACE);
}

static void *on_new_procstats(struct probes *core)
{
	return create(core, PROCSTATS);
}

static void *on_new_sysstats(struct probes *core)
{
	return create(core, SYSSTATS);
}

static void on_free(void *ctx)
{
	on_disconnected(ctx);
	sonde__free(ctx);
}

#define SYSDS_OPS(source_name, new_fn)                                                             \
	{                                                                                          \
		.name = source_name, .create = new_fn, .destroy = on_free, .setup = on_setup,      \
		.start = on_start, .stop = on_stop, .flush = on_flush,                             \
		.disconnected = on_disconnected, .pollfds = on_pollfds, .process = on_process,     \
		.timeout_ms = on_timeout,                                                          \
	}

const struct probe_source_ops sonde__ftrace_source = SYSDS_OPS("linux.ftrace", on_new_ftrace);
const struct probe_source_ops sonde__procstats_source =
	SYSDS_OPS("linux.process_stats", on_new_procstats);
const struct probe_source_ops sonde__sysstats_source =
	SYSDS_OPS("linux.sys_stats", on_new_sysstats);
