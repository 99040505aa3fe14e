/* What linux.perf may do on a consumer's behalf: never more than the kernel would let
 * the consumer do itself (docs/service.md, "Authorization"). Internal to the library:
 * the service reads a consumer's credentials with it (sonde__perfauth_consumer_caps) and the
 * probes (src/probes/perfds.c) apply the rule to them.
 *
 * The probes run as root, so the kernel's own checks on perf_event_open pass for everything
 * they open; these functions restate them for the consumer's credentials:
 *   sonde__perfauth_may_profile  kernel/ptrace.c __ptrace_may_access (PTRACE_MODE_READ_REALCREDS)
 *                         and security/yama/yama_lsm.c
 *   sonde__perfauth_may_see_kernel  kernel/events/core.c perf_allow_kernel
 *   sonde__perfauth_may_read_raw  kernel/trace/trace_event_perf.c perf_trace_event_perm
 * Credentials are read through a pidfd so that a check always names one process, never
 * whatever holds a pid number at the time. */
#ifndef SONDE_PROC_PERFAUTH_H
#define SONDE_PROC_PERFAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Capability numbers (linux/capability.h). */
enum {
	PERFAUTH_CAP_SYS_PTRACE = 19,
	PERFAUTH_CAP_SYS_ADMIN = 21,
	PERFAUTH_CAP_PERFMON = 38,
};

/* Real, effective and saved ids, as /proc/PID/status lists them. */
struct perfauth_ids {
	uint32_t real, eff, saved;
};

/* The consumer: its connection's SO_PEERCRED ids (the effective ids at connect) and, when
 * they could be read for that same process, its effective capabilities. Unknown
 * capabilities count as none. */
struct perfauth_consumer {
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool caps_known;
	uint64_t cap_eff;
	/* pid's start time (sonde__perfauth_start_time), read with the capabilities; 0 unknown */
	uint64_t pid_start;
	/* nobody in particular: no one vouched for who the consumer is. It may profile no
	 * process, see no kernel frame and read no raw tracepoint data */
	bool anonymous;
};

/* "consumer uid N", or "an unidentified consumer", for messages. */
void sonde__perfauth_consumer_name(const struct perfauth_consumer *c, char *out, size_t n);

/* A process the consumer asks for. */
struct perfauth_target {
	struct perfauth_ids uid, gid;
	bool dumpable_known, dumpable;
	bool descendant; /* of the consumer's process (read only for Yama scope 1) */
};

/* How a /proc mount hides processes: hidepid (0 shows every process to everyone; 1, 2
 * and 4, or noaccess, invisible and ptraceable, show a process's details only to those
 * that may ptrace-read it) and its gid= exemption. */
struct perfauth_proc_hide {
	int hidepid;
	bool gid_set;
	uint32_t gid;
};

/* Parses mountinfo text (/proc/PID/mountinfo) for the procfs mounted at /proc: its
 * options into *h (all zero when there is none, or it hides nothing). Bytes of any kind
 * are accepted. */
void sonde__perfauth_parse_proc_hide(const char *text, size_t len, struct perfauth_proc_hide *h);

/* The /proc of process pid's mount namespace (pid <= 0: this process's), read through
 * /proc/PID/mountinfo: 0, or -errno when it cannot be read. */
int sonde__perfauth_proc_hide(pid_t pid, struct perfauth_proc_hide *h);

/* Whether that /proc shows the consumer target t: not hidden, the consumer is of the
 * exempt gid, or it may ptrace-read t (the kernel's has_pid_permissions, which asks
 * PTRACE_MODE_READ: ids and dumpability, or CAP_SYS_PTRACE; Yama has no say). */
bool sonde__perfauth_may_see_process(const struct perfauth_consumer *c,
				     const struct perfauth_target *t,
				     const struct perfauth_proc_hide *h);

/* The capabilities of the process behind a consumer connection: pidfd refers to it
 * (SO_PEERPIDFD, or pidfd_open of its SO_PEERCRED pid), uid and gid are its SO_PEERCRED
 * ids. Reads /proc/PID/status and keeps CapEff only if the process is still the pidfd's
 * afterwards and its real and effective ids are still the ones it connected with (a
 * process that exec'd a set-user-ID program since is not credited with its privileges).
 * Otherwise caps_known stays false. pid_start is read in the same window. */
void sonde__perfauth_consumer_caps(int pidfd, pid_t pid, struct perfauth_consumer *c);

/* The start time of process pid, in clock ticks after boot (/proc/PID/stat field 22),
 * which with the pid names one process over the life of the system; 0 if unreadable. */
uint64_t sonde__perfauth_start_time(pid_t pid);

/* Reads target pid's credentials and dumpability through pidfd (pidfd_open(pid)): 0, or
 * -ESRCH when the process is gone or pid is not a process (a thread id), -errno or
 * -SONDE_E_FORMAT when /proc cannot be read. With yama_scope 1 also whether the target
 * descends from consumer_pid. */
int sonde__perfauth_target_read(int pidfd, pid_t pid, pid_t consumer_pid, int yama_scope,
				struct perfauth_target *t);

/* The rule. NULL when the consumer may profile the target, else why not (a phrase for a
 * message: "its gids differ from the consumer's"...). yama_scope: the value of
 * /proc/sys/kernel/yama/ptrace_scope, 0 without Yama. */
const char *sonde__perfauth_may_profile(const struct perfauth_consumer *c,
					const struct perfauth_target *t, int yama_scope);

/* Whether kernel frames (addresses become names, kernel modules) may be recorded for the
 * consumer: kernel.perf_event_paranoid <= 1, or CAP_PERFMON or CAP_SYS_ADMIN. */
bool sonde__perfauth_may_see_kernel(const struct perfauth_consumer *c, int paranoid);

/* Whether tracepoints' raw data may be recorded for the consumer (off-CPU profiles read
 * sched_switch's and sched_waking's): kernel.perf_event_paranoid <= -1, or CAP_PERFMON or
 * CAP_SYS_ADMIN (kernel/trace/trace_event_perf.c perf_trace_event_perm). */
bool sonde__perfauth_may_read_raw(const struct perfauth_consumer *c, int paranoid);

/* An integer sysctl under /proc/sys (path relative to it), or def when it is absent. */
int sonde__perfauth_sysctl(const char *path, int def);

#endif
