/* The linux.perf data source of `sonde probes` (docs/probes.md, docs/service.md
 * "linux.perf"), one source of the probes' registry (probes.h).
 *
 * The one thing the wire protocol cannot give a producer is the consumer's identity,
 * which the authorization rule needs: the probes' core says whom each instance acts for
 * (sonde__probes_consumer): the consumer sonded names in the DataSourceConfig when the probes
 * are sonded's own, else the --targets policy.
 *
 * Authorization (perfauth.h): each target is checked through a pidfd before its events
 * are opened, again once they are (they are opened on a pid number, which may have
 * changed hands or credentials meanwhile), and at every exec the recorder sees.
 *
 * Per instance: a recorder (include/sonde/record.h) attached to every authorized target,
 * whose spool bytes go straight into the Perfetto encoder (export/perfetto.h), whose
 * packets go to the instance's trace writer.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/record.h>
#include <sonde/symbolize.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/pb.h"
#include "export/perfetto.h"
#include "perf/event.h"
#include "probes/perfds.h"
#include "probes/probes.h"
#include "proc/perfauth.h"

enum {
	MAX_INST = 64,
	RESCAN_MS = 1000,
	MAX_POLL_MS = 1000,
	LOG_PRIO_WARN = PROBES_LOG_WARN,
	LOG_PRIO_ERROR = PROBES_LOG_ERROR,
};

/* An attached process, and the pidfd every check of it goes through. */
struct target {
	pid_t pid;
	int pidfd;
};

struct perfds;

struct inst {
	struct perfds *pd;
	uint64_t id;
	struct perfds_cfg cfg;
	int cfg_err;
	char err[256];
	struct perfauth_consumer who;
	bool any;	   /* --targets any, without the service's word: no per-target check */
	char who_desc[64]; /* whom it acts for, for messages (sonde__probes_consumer) */
	char who_name[48]; /* "consumer uid N", "an unidentified consumer" */
	/* the consumer's own /proc: a refused process it could not see there is counted, not
	 * named (sonde__perfauth_may_see_process) */
	struct perfauth_proc_hide proc_hide;
	uint64_t unseen_refusals;
	int yama_scope;	   /* kernel.yama.ptrace_scope at start (0 without Yama) */
	bool kernel_ok;	   /* kernel frames may be recorded for this consumer */
	bool ever_attached;
	struct target *targets;
	size_t ntargets;
	struct sonde_trace_writer *w;
	struct sonde_recorder *rec;
	struct pf_enc *enc;
	struct buf pre; /* spool bytes written before the encoder exists */
	pid_t *seen;	/* targets already attached or refused */
	size_t nseen;
	uint64_t lost_reported;
	uint64_t next_read_ms, next_scan_ms;
	bool guardrail_hit;
};

struct perfds {
	struct probes *core;
	struct sonde_symbolizer *sym;
	struct inst *inst[MAX_INST];
	size_t ninst;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	return clock_ns(CLOCK_MONOTONIC) / 1000000;
}

/* ---- packets ---- */

static int sink(void *ctx, const uint8_t *pkt, size_t len)
{
	struct inst *in = ctx;

	/* a packet the SMB had no room for is lost; the writer counts it */
	if (in->w)
		sonde_trace_writer__write_packet(in->w, pkt, len);
	return 0;
}

/* A message for the trace (sonde__probes_log) and sonded's log. */
static void note(struct inst *in, int prio, pid_t pid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void note(struct inst *in, int prio, pid_t pid, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sonde_log(prio == LOG_PRIO_ERROR ? SONDE_LOG_ERROR : SONDE_LOG_WARN,
		  "linux.perf (session %llu, %s): %s", (unsigned long long)in->cfg.session_id,
		  in->who_desc, msg);
	sonde__probes_log(in->w, "linux.perf", prio, pid, msg);
}

/* ---- recording ---- */

static int rec_write(void *ctx, const void *buf, size_t len)
{
	struct inst *in = ctx;

	if (!in->enc) {
		sonde__buf_append(&in->pre, buf, len);
		return buf_error(&in->pre);
	}
	return sonde__pf_enc_feed(in->enc, buf, len);
}

static bool may_profile_all(const struct inst *in);

/* After the first attach: the effective event decides the timebase the encoder writes;
 * fallbacks are said in the trace. */
static int start_encoder(struct inst *in)
{
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	uint32_t counter = in->cfg.counter;

	sonde_recorder__summary(in->rec, &sum);
	if (in->cfg.tracepoint)
		counter = 0; /* the timebase is the tracepoint */
	else if (counter == PERFDS_COUNTER_HW_CPU_CYCLES && strcmp(sum.event, "cycles") != 0) {
		note(in, LOG_PRIO_WARN, 0,
		     "HW_CPU_CYCLES is not available here (%s): sampling SW_CPU_CLOCK instead",
		     sum.cycles_error ? sonde_strerror(sum.cycles_error) : "no CPU PMU");
		counter = PERFDS_COUNTER_SW_CPU_CLOCK;
	}
	bool want_kernel =
		in->cfg.kernel_frames || in->cfg.user_frames == PERFDS_UNWIND_KERNEL_FRAME_POINTER;
	if (want_kernel && in->kernel_ok && !sum.kernel_enabled)
		note(in, LOG_PRIO_WARN, 0, "kernel frames were denied (%s): user frames only",
		     sonde_strerror(sum.kernel_error));
	struct pf_enc_opts o = {
		.sink = sink,
		.ctx = in,
		.frequency = in->cfg.period ? 0 : in->cfg.frequency,
		.period = in->cfg.period,
		.counter = counter,
		.tracepoint = in->cfg.tracepoint,
		.tracepoint_filter = in->cfg.tracepoint_filter,
		.sym = in->pd->sym,
		.live_proc = true,
		/* KERNEL_FRAME_POINTER without the right to kernel frames: the user part, as
		 * the warning says, rather than empty stacks */
		.skip_user_frames = in->cfg.user_frames == PERFDS_UNWIND_SKIP ||
				    (in->cfg.user_frames == PERFDS_UNWIND_KERNEL_FRAME_POINTER &&
				     in->kernel_ok),
		/* the sched events on the clock the service converts the PerfSamples to */
		.sched_boot_offset_ns =
			(int64_t)(clock_ns(CLOCK_BOOTTIME) - clock_ns(CLOCK_MONOTONIC)),
		.wakers_recorded_only = !may_profile_all(in),
	};
	in->enc = sonde__pf_enc_new(&o);
	if (!in->enc)
		return -errno;
	int err = sonde__pf_enc_feed(in->enc, in->pre.data, in->pre.len);
	sonde__buf_free(&in->pre);
	return err;
}

static bool exec_check(void *ctx, pid_t pid);

/* When the kernel refuses the probes themselves: which capability they lack, so that
 * whoever runs them can grant it. */
static const char *missing_caps(int rc)
{
	if (rc != -EACCES && rc != -EPERM)
		return "";
	if (geteuid() == 0)
		return " (refused although the probes run as root: a security module or "
		       "kernel.perf_event_paranoid 3?)";
	return " (the probes do not run as root: profiling another user's process needs "
	       "CAP_PERFMON and CAP_SYS_PTRACE, and kernel frames CAP_PERFMON or "
	       "kernel.perf_event_paranoid <= 1)";
}

/* The recorder's options for this instance's config and consumer. */
static struct sonde_record_opts rec_opts(struct inst *in)
{
	bool want_kernel =
		in->cfg.kernel_frames || in->cfg.user_frames == PERFDS_UNWIND_KERNEL_FRAME_POINTER;
	struct sonde_record_opts o = {
		.sz = sizeof(o),
		/* a period goes to the kernel as it is (perf_event_attr.sample_period): as a
		 * frequency it would come back rounded to 1e9 / (1e9 / period); a tracepoint
		 * ignores the frequency and counts hits, every one without a period */
		.frequency = in->cfg.period ? 1 : in->cfg.frequency,
		/* an off-CPU profile takes every switch-out, without a period */
		.sample_period = in->cfg.off_cpu ? 0 : in->cfg.period,
		.ring_pages = in->cfg.ring_pages,
		.event = in->cfg.counter == PERFDS_COUNTER_HW_CPU_CYCLES
				 ? SONDE_RECORD_EVENT_CYCLES
				 : SONDE_RECORD_EVENT_CPU_CLOCK,
		.kernel = want_kernel && in->kernel_ok,
		/* the kernel is sampled only where the config and the consumer's rights ask
		 * for it, as traced_perf does */
		.user_only = !(want_kernel && in->kernel_ok),
		.no_buildid_cache = true,
		/* the pids the config names, each checked against the consumer's rights, and
		 * not what they fork (traced_perf's target_pid) */
		.no_follow_children = true,
		.frame_pointers_only = in->cfg.user_frames == PERFDS_UNWIND_FRAME_POINTER,
		.exec_check = exec_check,
		.exec_check_ctx = in,
		.tracepoint = in->cfg.tracepoint,
		.tracepoint_filter = in->cfg.tracepoint_filter,
		/* sched_switch with stacks: off-CPU intervals and no on-CPU samples, each
		 * switch-out a PerfSample as traced_perf gives, so none is only counted */
		.off_cpu = in->cfg.off_cpu,
		.off_cpu_min_ns = 1,
	};
	return o;
}

/* Attaches pid (the first one creates the recorder). 0, or -errno once said in the trace. */
static int attach(struct inst *in, pid_t pid)
{
	int rc;

	if (!in->rec) {
		struct sonde_record_opts o = rec_opts(in);
		in->rec =
			sonde_recorder__attach_writer(pid, rec_write, in, SONDE_ATTACH_RUNNING, &o);
		if (!in->rec) {
			rc = -errno;
			sonde__buf_free(&in->pre);
			note(in, LOG_PRIO_ERROR, pid, "cannot profile pid %d: %s%s", (int)pid,
			     sonde_strerror(rc), missing_caps(rc));
			return rc;
		}
		rc = start_encoder(in);
	} else {
		rc = sonde_recorder__attach_process(in->rec, pid, SONDE_ATTACH_RUNNING);
		if (rc == SONDE_ATTACH_EXITED)
			rc = -ESRCH;
	}
	if (rc < 0)
		note(in, LOG_PRIO_ERROR, pid, "cannot profile pid %d: %s%s", (int)pid,
		     sonde_strerror(rc), missing_caps(rc));
	return rc < 0 ? rc : 0;
}

static void comm_of(pid_t pid, char *out, size_t cap)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "re");
	out[0] = 0;
	if (f) {
		if (fgets(out, (int)cap, f))
			out[strcspn(out, "\n")] = 0;
		fclose(f);
	}
}

/* The authorization rule (sonde__perfauth_may_profile) for the process pidfd refers to. 0 with
 * *why NULL when the consumer may profile it, 0 with the reason when not, -errno when it
 * cannot be read (gone: -ESRCH). Under --targets any every process passes: only the
 * kernel's checks on the probes themselves apply. */
static int authorize(struct inst *in, int pidfd, pid_t pid, struct perfauth_target *t,
		     const char **why)
{
	int rc = sonde__perfauth_target_read(pidfd, pid, in->who.pid, in->yama_scope, t);

	*why = rc < 0 || in->any ? NULL : sonde__perfauth_may_profile(&in->who, t, in->yama_scope);
	return rc;
}

/* A refusal names the process (pid, name, owner) only when the consumer could see it in
 * its own /proc; one it could not see is counted (written at stop), so that the trace
 * says no more than that /proc does. */
static void refuse(struct inst *in, pid_t pid, const struct perfauth_target *t, const char *what,
		   const char *why)
{
	char comm[32];

	if (!sonde__perfauth_may_see_process(&in->who, t, &in->proc_hide)) {
		in->unseen_refusals++;
		return;
	}
	comm_of(pid, comm, sizeof(comm));
	note(in, LOG_PRIO_ERROR, pid, "refused: %s may not profile pid %d (%s, uid %u)%s: %s",
	     in->who_name, (int)pid, comm, (unsigned)t->uid.real, what, why);
}

static struct target *target_of(struct inst *in, pid_t pid)
{
	for (size_t i = 0; i < in->ntargets; i++)
		if (in->targets[i].pid == pid)
			return &in->targets[i];
	return NULL;
}

static void target_drop(struct inst *in, struct target *tg)
{
	close(tg->pidfd);
	*tg = in->targets[--in->ntargets];
}

/* By pid: an exec check may have dropped it already. */
static void target_forget(struct inst *in, pid_t pid)
{
	struct target *tg = target_of(in, pid);

	if (tg)
		target_drop(in, tg);
}

/* The recorder saw pid run a new program: a set-user-ID or set-group-ID one, or one that
 * made it non-dumpable, ends its profiling here. The kernel closes perf events at such an
 * exec itself (fs/exec.c begin_new_exec), but not what the recorder does as root with
 * the process afterwards (its maps, /proc/PID/mem, map_files), nor events opened after
 * the exec on a pid checked before it: those are the re-check after attaching. */
static bool exec_check(void *ctx, pid_t pid)
{
	struct inst *in = ctx;
	struct target *tg = target_of(in, pid);
	struct perfauth_target t;
	const char *why;

	if (!tg)
		return false; /* attached without a check: cannot happen, and must not pass */
	int rc = authorize(in, tg->pidfd, pid, &t, &why);
	if (rc == 0 && !why)
		return true;
	if (why)
		refuse(in, pid, &t, " after it exec'd; no longer profiled", why);
	target_drop(in, tg);
	return false;
}

/* Authorizes, attaches, then checks again: the events were opened on a pid number, so
 * only a check through the pidfd once they are open says that they are on the process
 * that was authorized, and that it still may be profiled. */
static void attach_checked(struct inst *in, pid_t pid, int pidfd, bool listed)
{
	struct perfauth_target t;
	const char *why;
	int rc = authorize(in, pidfd, pid, &t, &why);

	if (rc < 0 || why) {
		if (why)
			refuse(in, pid, &t, "", why);
		else if (listed)
			note(in, LOG_PRIO_ERROR, pid, "cannot profile pid %d: %s", (int)pid,
			     rc == -ESRCH ? "no such process" : sonde_strerror(rc));
		close(pidfd);
		return;
	}
	struct target *n = sonde__realloc(in->targets, (in->ntargets + 1) * sizeof(*n));
	if (!n) {
		close(pidfd);
		return;
	}
	in->targets = n;
	in->targets[in->ntargets++] = (struct target){pid, pidfd};
	if (attach(in, pid) < 0) {
		target_forget(in, pid);
		return;
	}
	rc = authorize(in, pidfd, pid, &t, &why);
	if (rc < 0 || why) {
		if (why)
			refuse(in, pid, &t, " after its events were opened", why);
		sonde_recorder__detach_process(in->rec, pid);
		target_forget(in, pid);
		return;
	}
	in->ever_attached = true;
	/* its events are open and enabled: from here on it is sampled */
	sonde_info("linux.perf: recording pid %d", (int)pid);
}

static void consider(struct inst *in, pid_t pid, bool listed)
{
	if (pid == getpid()) /* the probes never profile themselves */
		return;
	for (size_t i = 0; i < in->nseen; i++)
		if (in->seen[i] == pid)
			return;
	/* A process that is no target now may become one when it execs (a shell's child
	 * before its exec): only targets are remembered, the others are looked at again. */
	if (!sonde__perfds_is_target(&in->cfg, pid))
		return;
	pid_t *n = sonde__realloc(in->seen, (in->nseen + 1) * sizeof(*n));
	if (!n)
		return;
	in->seen = n;
	in->seen[in->nseen++] = pid;
	/* From here on the process is named by the pidfd, never by its number alone. */
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		int rc = errno == EINVAL ? -ESRCH : -errno; /* EINVAL: a thread id */
		if (listed)
			note(in, LOG_PRIO_ERROR, pid, "cannot profile pid %d: %s", (int)pid,
			     rc == -ESRCH ? "no such process" : sonde_strerror(rc));
		return;
	}
	attach_checked(in, pid, pidfd, listed);
}

/* Targets that exited give back their pidfds (a pidfd polls readable once its process
 * has exited), so that a cmdline matching many short-lived processes holds no more fds
 * than live targets. */
static void prune_targets(struct inst *in)
{
	for (size_t i = 0; i < in->ntargets;) {
		struct pollfd p = {.fd = in->targets[i].pidfd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			target_drop(in, &in->targets[i]);
		else
			i++;
	}
}

/* The config's tracepoint exists here: checked before anything is opened, so that the
 * trace says which name is wrong rather than what perf_event_open answered. */
static bool tracepoint_exists(struct inst *in)
{
	char group[128];
	const char *colon = strchr(in->cfg.tracepoint, ':');

	snprintf(group, sizeof(group), "%.*s", (int)(colon - in->cfg.tracepoint),
		 in->cfg.tracepoint);
	int id = sonde__perf_tracepoint_id(NULL, group, colon + 1);
	if (id >= 0)
		return true;
	if (id == -ENOENT)
		note(in, LOG_PRIO_ERROR, 0,
		     "config refused: unknown tracepoint %s (tracefs has no events/%s/%s)",
		     in->cfg.tracepoint, group, colon + 1);
	else if (id == -ENODEV)
		note(in, LOG_PRIO_ERROR, 0,
		     "config refused: tracepoint %s: tracefs is not mounted "
		     "(at /sys/kernel/tracing or /sys/kernel/debug/tracing)",
		     in->cfg.tracepoint);
	else if (id == -EACCES)
		note(in, LOG_PRIO_ERROR, 0,
		     "config refused: tracepoint %s: tracefs is not readable by the probes' user",
		     in->cfg.tracepoint);
	else
		note(in, LOG_PRIO_ERROR, 0, "config refused: tracepoint %s: %s", in->cfg.tracepoint,
		     sonde_strerror(id));
	return false;
}

/* ---- system-wide ---- */

/* The recorder's process_check in a system-wide session: the exclusions, then the
 * authorization rule for this consumer, through a pidfd as for a named target. A process
 * gone by the time its records are read cannot be checked, so it is left out. */
static bool system_check(void *ctx, pid_t pid)
{
	struct inst *in = ctx;
	struct perfauth_target t;
	const char *why;

	if (pid == getpid() || !sonde__perfds_is_target(&in->cfg, pid))
		return false;
	if (in->any)
		return true;
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return false;
	int rc = authorize(in, pidfd, pid, &t, &why);
	close(pidfd);
	return rc == 0 && !why;
}

/* Whether the rule lets the consumer profile every process (CAP_SYS_PTRACE, and Yama
 * not at 3): then a system-wide session needs no check of each process, and records
 * those that exit before their records are read too. */
static bool may_profile_all(const struct inst *in)
{
	return in->any || (in->who.caps_known && (in->who.cap_eff >> PERFAUTH_CAP_SYS_PTRACE & 1) &&
			   in->yama_scope < 3);
}

/* No target in the config: per-CPU events for every task (sonde_recorder__attach_system),
 * of which the consumer gets the processes it may profile. */
static void start_system(struct inst *in)
{
	struct sonde_record_opts o = rec_opts(in);
	bool all = may_profile_all(in) && !in->cfg.n_exclude_pids && !in->cfg.n_exclude_cmdlines;

	o.exec_check = NULL; /* system-wide: the process check is asked again at exec */
	o.process_check = all ? NULL : system_check;
	o.process_check_ctx = in;
	in->rec = sonde_recorder__attach_system_writer(rec_write, in, &o);
	if (!in->rec) {
		int rc = -errno;
		sonde__buf_free(&in->pre);
		note(in, LOG_PRIO_ERROR, 0, "cannot sample system-wide: %s%s", sonde_strerror(rc),
		     missing_caps(rc));
		return;
	}
	if (!may_profile_all(in))
		note(in, LOG_PRIO_WARN, 0,
		     "system-wide for %s: only the processes it may profile (its own uid and "
		     "gid, dumpable) are recorded",
		     in->who_name);
	in->ever_attached = true;
	if (start_encoder(in) < 0)
		note(in, LOG_PRIO_ERROR, 0, "cannot encode the samples: %s",
		     sonde_strerror(-errno));
}

static void scan(struct inst *in)
{
	prune_targets(in);
	for (size_t i = 0; i < in->cfg.n_pids; i++)
		consider(in, in->cfg.pids[i], true);
	if (!in->cfg.n_cmdlines)
		return;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		consider(in, (pid_t)pid, false);
	}
	if (d)
		closedir(d);
}

static uint64_t rss_kb(void)
{
	unsigned long size, resident;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	int n = fscanf(f, "%lu %lu", &size, &resident);
	fclose(f);
	return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024 : 0;
}

/* Drains the rings into the trace; with `finish` the recording ends (stop, guardrail). */
static void drain(struct inst *in, bool finish)
{
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	int rc;

	if (!in->rec)
		return;
	if (finish) {
		rc = sonde_recorder__finish(in->rec, &sum);
	} else {
		struct sonde_record_poll po = {.sz = sizeof(po)};
		rc = sonde_recorder__poll(in->rec, 0, &po);
		if (rc >= 0)
			rc = sonde_recorder__flush(in->rec);
		sonde_recorder__summary(in->rec, &sum);
	}
	if (rc < 0)
		sonde_warn("linux.perf: recording failed: %s", sonde_strerror(rc));
	if (in->enc && sum.lost_events > in->lost_reported) {
		sonde__pf_enc_lost(in->enc, clock_ns(CLOCK_MONOTONIC),
				   sum.lost_events - in->lost_reported);
		in->lost_reported = sum.lost_events;
	}
	if (finish && in->cfg.system_wide && sum.processes_refused)
		note(in, LOG_PRIO_WARN, 0,
		     "system-wide: %u processes left out (excluded, or not the consumer's to "
		     "profile)",
		     sum.processes_refused);
	if (finish) {
		sonde_recorder__free(in->rec);
		in->rec = NULL;
	}
}

/* max_daemon_memory_kb: the daemon's resident size (the probes' process). Over it, the
 * instance stops itself as traced_perf does. */
static void check_guardrail(struct inst *in)
{
	uint64_t kb;

	if (!in->cfg.max_daemon_memory_kb || in->guardrail_hit || !in->rec)
		return;
	kb = rss_kb();
	if (kb <= in->cfg.max_daemon_memory_kb)
		return;
	in->guardrail_hit = true;
	drain(in, true);
	if (in->enc)
		sonde__pf_enc_stop_event(in->enc, clock_ns(CLOCK_MONOTONIC),
					 PF_STOP_REASON_GUARDRAIL);
	note(in, LOG_PRIO_WARN, 0,
	     "stopped: sonde probes uses %llu KiB, above max_daemon_memory_kb %llu (guardrail)",
	     (unsigned long long)kb, (unsigned long long)in->cfg.max_daemon_memory_kb);
	if (in->w)
		sonde_trace_writer__flush(in->w);
}

/* ---- instances ---- */

static struct inst *find(struct perfds *pd, uint64_t id, size_t *idx)
{
	for (size_t i = 0; i < pd->ninst; i++) {
		if (pd->inst[i]->id == id) {
			if (idx)
				*idx = i;
			return pd->inst[i];
		}
	}
	return NULL;
}

static struct inst *inst_new(struct perfds *pd, uint64_t id, const void *cfg, size_t len)
{
	struct inst *in = pd->ninst < MAX_INST ? sonde__calloc(1, sizeof(*in)) : NULL;

	if (!in) {
		sonde_error("linux.perf: no room for instance %llu", (unsigned long long)id);
		return NULL;
	}
	in->pd = pd;
	in->id = id;
	in->cfg_err = sonde__perfds_cfg_parse(cfg, len, &in->cfg, in->err, sizeof(in->err));
	int rc = sonde__probes_consumer(pd->core, cfg, len, &in->who, &in->any, in->who_desc,
					sizeof(in->who_desc));
	if (!in->cfg_err && rc < 0) {
		in->cfg_err = rc;
		snprintf(in->err, sizeof(in->err), "%s", in->who_desc);
	}
	sonde__perfauth_consumer_name(&in->who, in->who_name, sizeof(in->who_name));
	pd->inst[pd->ninst++] = in;
	return in;
}

static void inst_free(struct perfds *pd, struct inst *in)
{
	size_t i;

	if (find(pd, in->id, &i))
		pd->inst[i] = pd->inst[--pd->ninst];
	if (in->rec)
		drain(in, true);
	while (in->ntargets) /* after the drain: its exec checks use them */
		target_drop(in, &in->targets[0]);
	sonde__free(in->targets);
	sonde__pf_enc_free(in->enc);
	sonde_trace_writer__free(in->w);
	sonde__perfds_cfg_free(&in->cfg);
	sonde__buf_free(&in->pre);
	sonde__free(in->seen);
	sonde__free(in);
}

/* Kernel frames only for a consumer the kernel would give them (sonde__perfauth_may_see_kernel):
 * as root, sonded's own perf_event_open always gets them. */
static void authorize_kernel(struct inst *in)
{
	/* unreadable: the kernel's strictest default */
	int paranoid = sonde__perfauth_sysctl("kernel/perf_event_paranoid", 2);
	bool want =
		in->cfg.kernel_frames || in->cfg.user_frames == PERFDS_UNWIND_KERNEL_FRAME_POINTER;

	in->kernel_ok = in->any || sonde__perfauth_may_see_kernel(&in->who, paranoid);
	if (want && !in->kernel_ok)
		note(in, LOG_PRIO_WARN, 0,
		     "kernel frames are not permitted for %s (it needs CAP_PERFMON or "
		     "CAP_SYS_ADMIN, or kernel.perf_event_paranoid <= 1, which is %d): user "
		     "frames only",
		     in->who_name, paranoid);
}

static void on_setup(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct perfds *pd = ctx;
	struct inst *old = find(pd, id, NULL);

	if (old)
		inst_free(pd, old);
	inst_new(pd, id, cfg, len);
}

static void on_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct perfds *pd = ctx;
	struct inst *in = find(pd, id, NULL);

	if (!in && !(in = inst_new(pd, id, cfg, len)))
		return;
	if (in->w)
		return;
	in->w = sonde__probes_new_writer(pd->core, id);
	if (!in->w)
		sonde_error("linux.perf: no trace writer for instance %llu: %s",
			    (unsigned long long)id, sonde_strerror(-errno));
	if (in->cfg_err) {
		note(in, LOG_PRIO_ERROR, 0, "config refused: %s", in->err);
		return;
	}
	if (!pd->sym && !(pd->sym = sonde_symbolizer__new(NULL)))
		sonde_warn("linux.perf: no symbolizer: %s", sonde_strerror(-errno));
	authorize_kernel(in);
	/* Yama restricts attaching; without it (no such file) nothing is restricted. */
	in->yama_scope = sonde__perfauth_sysctl("kernel/yama/ptrace_scope", 0);
	if (in->who.anonymous && !in->any) {
		note(in, LOG_PRIO_ERROR, 0,
		     "refused: an unidentified consumer may profile no process (the probes "
		     "were not told who the consumer is): nothing is recorded");
		in->cfg_err = -EPERM;
		return;
	}
	/* The /proc the consumer sees (its mount namespace's; ours when its process is not
	 * known): unreadable, it is taken to hide everything. */
	if (!in->any && sonde__perfauth_proc_hide(in->who.pid, &in->proc_hide) < 0)
		in->proc_hide = (struct perfauth_proc_hide){.hidepid = 2};
	if (in->cfg.tracepoint && !in->kernel_ok) {
		/* perf_event_open asks perf_allow_kernel of any event that samples in the
		 * kernel, as a tracepoint does: the consumer could not open it itself */
		note(in, LOG_PRIO_ERROR, 0,
		     "config refused: a tracepoint timebase is not permitted for %s (it needs "
		     "CAP_PERFMON or CAP_SYS_ADMIN, or kernel.perf_event_paranoid <= 1)",
		     in->who_name);
		in->cfg_err = -EPERM;
		return;
	}
	if (in->cfg.off_cpu && !in->any &&
	    !sonde__perfauth_may_read_raw(
		    &in->who, sonde__perfauth_sysctl("kernel/perf_event_paranoid", 2))) {
		/* the intervals come from the sched tracepoints' raw data, which the kernel
		 * gives only to these consumers */
		note(in, LOG_PRIO_ERROR, 0,
		     "config refused: an off-CPU profile (sched_switch with callstacks) is not "
		     "permitted for %s (it needs CAP_PERFMON or CAP_SYS_ADMIN, or "
		     "kernel.perf_event_paranoid -1)",
		     in->who_name);
		in->cfg_err = -EPERM;
		return;
	}
	if (in->cfg.tracepoint && !tracepoint_exists(in)) {
		in->cfg_err = -ENOENT;
		return;
	}
	if (in->cfg.system_wide)
		start_system(in);
	else
		scan(in);
	uint64_t now = now_ms();
	in->next_read_ms = now + in->cfg.read_period_ms;
	in->next_scan_ms = now + RESCAN_MS;
	/* Listed pids are all there is; a process chosen by cmdline may start later, and
	 * only the end of the session says whether none did (on_stop). */
	if (!in->ever_attached && !in->cfg.n_cmdlines && !in->cfg.system_wide)
		note(in, LOG_PRIO_ERROR, 0, "no process to profile: nothing is recorded");
	check_guardrail(in);
}

static void on_stop(void *ctx, uint64_t id)
{
	struct perfds *pd = ctx;
	struct inst *in = find(pd, id, NULL);

	if (!in)
		return;
	if (in->w && in->unseen_refusals)
		note(in, LOG_PRIO_ERROR, 0,
		     "refused: %llu process%s that %s cannot see in its /proc (hidepid) %s not "
		     "profiled",
		     (unsigned long long)in->unseen_refusals, in->unseen_refusals == 1 ? "" : "es",
		     in->who_name, in->unseen_refusals == 1 ? "was" : "were");
	if (in->w && !in->cfg_err && !in->ever_attached && in->cfg.n_cmdlines)
		note(in, LOG_PRIO_ERROR, 0,
		     "no process matching target_cmdline ran during the session: nothing was "
		     "recorded");
	inst_free(pd, in); /* drains everything, then commits the writer */
}

static void on_flush(void *ctx, uint64_t id)
{
	struct inst *in = find(ctx, id, NULL);

	if (!in)
		return;
	drain(in, false);
	/* an off-CPU profile's sched events are held to be written in time order: what is
	 * held so far goes with the flush, so the consumer reading now has it */
	int rc = in->enc ? sonde__pf_enc_flush(in->enc) : 0;
	if (rc < 0)
		sonde_warn("linux.perf: cannot write the sched events: %s", sonde_strerror(rc));
	if (in->w)
		sonde_trace_writer__flush(in->w);
}

static void on_clear(void *ctx, uint64_t id)
{
	struct inst *in = find(ctx, id, NULL);

	if (in)
		sonde__pf_enc_clear_incremental(in->enc);
}

/* ---- the source (probes.h) ---- */

static void on_disconnected(void *ctx)
{
	struct perfds *pd = ctx;

	while (pd->ninst)
		inst_free(pd, pd->inst[0]);
}

static size_t on_pollfds(void *ctx, struct pollfd *fds, size_t cap)
{
	struct perfds *pd = ctx;
	size_t n = 0;

	for (size_t i = 0; i < pd->ninst && n < cap; i++)
		if (pd->inst[i]->rec)
			fds[n++] = (struct pollfd){.fd = sonde_recorder__epoll_fd(pd->inst[i]->rec),
						   .events = POLLIN};
	return n;
}

static void on_process(void *ctx, const struct pollfd *fds, size_t nfds)
{
	struct perfds *pd = ctx;
	uint64_t now = now_ms();

	for (size_t i = 0; i < pd->ninst; i++) {
		struct inst *in = pd->inst[i];
		bool ready = false;
		for (size_t k = 0; in->rec && k < nfds; k++)
			ready |= fds[k].fd == sonde_recorder__epoll_fd(in->rec) && fds[k].revents;
		if (in->rec && (ready || now >= in->next_read_ms)) {
			drain(in, false);
			in->next_read_ms = now + in->cfg.read_period_ms;
		}
		if (in->w && !in->cfg_err && in->cfg.n_cmdlines && !in->guardrail_hit &&
		    now >= in->next_scan_ms) {
			scan(in);
			in->next_scan_ms = now + RESCAN_MS;
		}
		check_guardrail(in);
	}
}

static int on_timeout(void *ctx)
{
	struct perfds *pd = ctx;
	uint64_t now = now_ms(), t = now + MAX_POLL_MS;

	for (size_t i = 0; i < pd->ninst; i++)
		if (pd->inst[i]->rec && pd->inst[i]->next_read_ms < t)
			t = pd->inst[i]->next_read_ms;
	return t > now ? (int)(t - now) : 0;
}

static void *on_new(struct probes *core)
{
	struct perfds *pd = sonde__calloc(1, sizeof(*pd));

	if (pd)
		pd->core = core;
	return pd;
}

static void on_free(void *ctx)
{
	struct perfds *pd = ctx;

	on_disconnected(pd);
	sonde_symbolizer__free(pd->sym);
	sonde__free(pd);
}

const struct probe_source_ops sonde__perfds_source = {
	.name = "linux.perf",
	.handles_incremental_state_clear = true,
	.create = on_new,
	.destroy = on_free,
	.setup = on_setup,
	.start = on_start,
	.stop = on_stop,
	.flush = on_flush,
	.clear_incremental_state = on_clear,
	.disconnected = on_disconnected,
	.pollfds = on_pollfds,
	.process = on_process,
	.timeout_ms = on_timeout,
};
