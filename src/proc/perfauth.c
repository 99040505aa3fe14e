/* linux.perf's authorization: the kernel's rules, for the consumer's credentials
 * (perfauth.h, docs/service.md "Authorization"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "proc/perfauth.h"

enum { STATUS_MAX = 4096, ANCESTRY_MAX = 4096 };

struct status {
	pid_t tgid, ppid;
	struct perfauth_ids uid, gid;
	uint64_t cap_eff;
	bool has_tgid, has_ppid, has_uid, has_gid, has_cap;
	uid_t file_uid; /* the owner of /proc/PID/status */
	gid_t file_gid;
};

static bool ids_line(const char *buf, const char *key, struct perfauth_ids *ids)
{
	const char *l = strstr(buf, key);

	return l && sscanf(l + strlen(key), "%" SCNu32 " %" SCNu32 " %" SCNu32, &ids->real,
			   &ids->eff, &ids->saved) == 3;
}

static int status_read(pid_t pid, struct status *st)
{
	char path[64], buf[STATUS_MAX];
	struct stat sb;
	ssize_t len = 0, n;
	const char *l;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	if (fstat(fd, &sb) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	while ((size_t)len < sizeof(buf) - 1 &&
	       (n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	close(fd);
	buf[len] = 0;
	*st = (struct status){.file_uid = sb.st_uid, .file_gid = sb.st_gid};
	st->has_tgid = (l = strstr(buf, "\nTgid:")) && sscanf(l + 6, "%d", &st->tgid) == 1;
	st->has_ppid = (l = strstr(buf, "\nPPid:")) && sscanf(l + 6, "%d", &st->ppid) == 1;
	st->has_cap =
		(l = strstr(buf, "\nCapEff:")) && sscanf(l + 8, "%" SCNx64, &st->cap_eff) == 1;
	st->has_uid = ids_line(buf, "\nUid:", &st->uid);
	st->has_gid = ids_line(buf, "\nGid:", &st->gid);
	return 0;
}

/* Whether the process pidfd refers to still exists (a zombie does: its pid is not free
 * yet). Anything read of /proc/PID before this returns true was read of that process, as
 * its pid could not have been reused meanwhile. */
static bool pidfd_alive(int pidfd)
{
	/* signal 0 checks existence and permission only; EPERM still means it exists */
	return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 || errno == EPERM;
}

uint64_t sonde__perfauth_start_time(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long start;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* field 2, the comm, is in parentheses and may hold anything: skip to its last ')',
	 * then past fields 3..21 */
	const char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &start) != 1)
		return 0;
	return start;
}

void sonde__perfauth_consumer_caps(int pidfd, pid_t pid, struct perfauth_consumer *c)
{
	struct status st;

	c->caps_known = false;
	c->cap_eff = 0;
	c->pid_start = 0;
	if (pidfd < 0 || pid <= 0 || status_read(pid, &st) < 0)
		return;
	uint64_t start = sonde__perfauth_start_time(pid);
	if (!pidfd_alive(pidfd))
		return;
	c->pid_start = start;
	if (!st.has_cap || !st.has_uid || !st.has_gid || st.uid.real != c->uid ||
	    st.uid.eff != c->uid || st.gid.real != c->gid || st.gid.eff != c->gid)
		return;
	c->caps_known = true;
	c->cap_eff = st.cap_eff;
}

/* Yama scope 1 lets a process attach to its descendants: walk the target's parents. */
static bool descends_from(pid_t pid, pid_t ancestor)
{
	struct status st;

	for (int i = 0; i < ANCESTRY_MAX && pid > 1; i++) {
		if (status_read(pid, &st) < 0 || !st.has_ppid)
			return false;
		if (st.ppid == ancestor)
			return true;
		pid = st.ppid;
	}
	return false;
}

int sonde__perfauth_target_read(int pidfd, pid_t pid, pid_t consumer_pid, int yama_scope,
				struct perfauth_target *t)
{
	struct status st;
	int rc = status_read(pid, &st);

	if (rc < 0)
		return rc;
	if (!st.has_tgid || !st.has_uid || !st.has_gid)
		return -SONDE_E_FORMAT;
	if (st.tgid != pid)
		return -ESRCH; /* a thread, not a process */
	*t = (struct perfauth_target){.uid = st.uid, .gid = st.gid};
	/* Dumpability is in no /proc file, but the kernel shows it through ownership: the
	 * files of /proc/PID (not the directory) belong to the process's effective uid and
	 * gid while its mm is dumpable (SUID_DUMP_USER), to root:root otherwise
	 * (fs/proc/base.c task_dump_owner). For a process of effective ids 0:0 both read the
	 * same: unknown, which counts as not dumpable. */
	if (st.uid.eff != 0 || st.gid.eff != 0) {
		t->dumpable_known = true;
		t->dumpable = st.file_uid == st.uid.eff && st.file_gid == st.gid.eff;
	}
	if (yama_scope == 1)
		t->descendant = descends_from(pid, consumer_pid);
	return pidfd_alive(pidfd) ? 0 : -ESRCH;
}

static bool has_cap(const struct perfauth_consumer *c, int cap)
{
	return c->caps_known && (c->cap_eff >> cap & 1);
}

static bool ids_are(const struct perfauth_ids *ids, uint32_t id)
{
	return ids->real == id && ids->eff == id && ids->saved == id;
}

/* kernel/ptrace.c __ptrace_may_access(task, PTRACE_MODE_READ_REALCREDS), which
 * perf_event_open applies to a target task (kernel/events/core.c perf_check_permission):
 *
 *	caller_uid = cred->uid; caller_gid = cred->gid;          (REALCREDS)
 *	if (caller_uid == tcred->euid, ->suid, ->uid &&
 *	    caller_gid == tcred->egid, ->sgid, ->gid) goto ok;
 *	if (ptrace_has_cap(tcred->user_ns, mode)) goto ok;       (CAP_SYS_PTRACE)
 *	return -EPERM;
 * ok:	if (mm && get_dumpable(mm) != SUID_DUMP_USER && !ptrace_has_cap(...)) return -EPERM;
 *	return security_ptrace_access_check(task, mode);         (Yama, below)
 *
 * The consumer's ids are its SO_PEERCRED (effective) ids, which sonde__perfauth_consumer_caps
 * found equal to its real ones whenever its capabilities are known. Without user
 * namespaces of their own, every capability here is of the initial namespace.
 *
 * Yama (security/yama/yama_lsm.c yama_ptrace_access_check) restricts PTRACE_MODE_ATTACH
 * only, which perf_event_open does not ask; but on the consumer's behalf the recorder
 * also reads the target's memory (/proc/PID/mem, the vDSO) and mapped files
 * (/proc/PID/map_files), which are attach-mode accesses. So Yama applies as it would to
 * an attach: scope 1 allows descendants of the consumer's process (exceptions declared
 * with PR_SET_PTRACER cannot be seen from here and are not honoured) or CAP_SYS_PTRACE,
 * scope 2 CAP_SYS_PTRACE only, scope 3 nothing at all. */
const char *sonde__perfauth_may_profile(const struct perfauth_consumer *c,
					const struct perfauth_target *t, int yama_scope)
{
	bool ptrace_cap = has_cap(c, PERFAUTH_CAP_SYS_PTRACE);

	if (c->anonymous)
		return "no one vouched for who the consumer is";
	if (!ptrace_cap) {
		if (!ids_are(&t->uid, c->uid))
			return "its real, effective and saved uids are not all the consumer's";
		if (!ids_are(&t->gid, c->gid))
			return "its real, effective and saved gids are not all the consumer's";
		if (!t->dumpable_known || !t->dumpable)
			return "it is not dumpable";
	}
	switch (yama_scope) {
	case 0:
		return NULL;
	case 1:
		return t->descendant || ptrace_cap ? NULL
						   : "kernel.yama.ptrace_scope 1 allows only the "
						     "consumer's descendants";
	case 2:
		return ptrace_cap ? NULL : "kernel.yama.ptrace_scope 2 requires CAP_SYS_PTRACE";
	default:
		return "kernel.yama.ptrace_scope 3 forbids attaching to any process";
	}
}

/* kernel/events/core.c perf_allow_kernel: kernel samples need perf_event_paranoid <= 1
 * or perfmon_capable() (CAP_PERFMON, or CAP_SYS_ADMIN). */
/* An unidentified consumer is given nothing that depends on who it is, paranoid <= 1
 * included: the setting that lets every local user see the kernel does not reach a
 * consumer that may not be local at all. */
bool sonde__perfauth_may_see_kernel(const struct perfauth_consumer *c, int paranoid)
{
	if (c->anonymous)
		return false;
	return paranoid <= 1 || has_cap(c, PERFAUTH_CAP_PERFMON) ||
	       has_cap(c, PERFAUTH_CAP_SYS_ADMIN);
}

bool sonde__perfauth_may_read_raw(const struct perfauth_consumer *c, int paranoid)
{
	if (c->anonymous)
		return false;
	return paranoid <= -1 || has_cap(c, PERFAUTH_CAP_PERFMON) ||
	       has_cap(c, PERFAUTH_CAP_SYS_ADMIN);
}

/* One mountinfo line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE
 * SUPEROPTS". The mount point is the fifth field (spaces in it are escaped as \040). */
static void parse_hide_line(const char *l, size_t n, struct perfauth_proc_hide *h)
{
	const char *f = l, *end = l + n;
	size_t k = 0;

	while (k < 4 && f < end) {
		const char *sp = memchr(f, ' ', (size_t)(end - f));
		if (!sp)
			return;
		f = sp + 1;
		k++;
	}
	if ((size_t)(end - f) < 6 || memcmp(f, "/proc ", 6) != 0)
		return;
	const char *sep = NULL;
	for (const char *q = f; q + 3 <= end; q++)
		if (!memcmp(q, " - ", 3)) {
			sep = q + 3;
			break;
		}
	if (!sep || (size_t)(end - sep) < 5 || memcmp(sep, "proc ", 5) != 0)
		return;
	/* the super options: after the source, the last field */
	const char *opts = sep + 5;
	const char *sp = memchr(opts, ' ', (size_t)(end - opts));
	if (!sp)
		return;
	opts = sp + 1;
	/* a later mount over /proc hides the earlier one: the last line wins */
	*h = (struct perfauth_proc_hide){0};
	while (opts < end) {
		const char *comma = memchr(opts, ',', (size_t)(end - opts));
		size_t len = comma ? (size_t)(comma - opts) : (size_t)(end - opts);
		char v[32];
		if (len > 8 && len < sizeof(v) && !memcmp(opts, "hidepid=", 8)) {
			memcpy(v, opts + 8, len - 8);
			v[len - 8] = 0;
			if (v[0] >= '0' && v[0] <= '9')
				h->hidepid = atoi(v);
			else
				h->hidepid = strcmp(v, "off") ? 2 : 0;
		} else if (len > 4 && len < sizeof(v) && !memcmp(opts, "gid=", 4)) {
			memcpy(v, opts + 4, len - 4);
			v[len - 4] = 0;
			char *e;
			unsigned long g = strtoul(v, &e, 10);
			if (!*e && g < UINT32_MAX) {
				h->gid_set = true;
				h->gid = (uint32_t)g;
			}
		}
		if (!comma)
			break;
		opts = comma + 1;
	}
}

void sonde__perfauth_parse_proc_hide(const char *text, size_t len, struct perfauth_proc_hide *h)
{
	const char *p = text, *end = text + len;

	*h = (struct perfauth_proc_hide){0};
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		parse_hide_line(p, n, h);
		p += n + (nl != NULL);
	}
}

int sonde__perfauth_proc_hide(pid_t pid, struct perfauth_proc_hide *h)
{
	char path[64];
	size_t cap = 1 << 16, len = 0;

	*h = (struct perfauth_proc_hide){0};
	if (pid > 0)
		snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/mountinfo");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char *buf = sonde__malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		if (len == cap) {
			/* a namespace with a huge mount table: read it all, to 16 MiB */
			char *b = cap < (16u << 20) ? sonde__realloc(buf, cap * 2) : NULL;
			if (!b) {
				sonde__free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = b;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = -errno;
			sonde__free(buf);
			close(fd);
			return err;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	sonde__perfauth_parse_proc_hide(buf, len, h);
	sonde__free(buf);
	return 0;
}

bool sonde__perfauth_may_see_process(const struct perfauth_consumer *c,
				     const struct perfauth_target *t,
				     const struct perfauth_proc_hide *h)
{
	if (c->anonymous)
		return false;
	if (h->hidepid == 0 || (h->gid_set && c->gid == h->gid))
		return true;
	/* yama scope 0: the read rule alone */
	return sonde__perfauth_may_profile(c, t, 0) == NULL;
}

void sonde__perfauth_consumer_name(const struct perfauth_consumer *c, char *out, size_t n)
{
	if (c->anonymous)
		snprintf(out, n, "an unidentified consumer");
	else
		snprintf(out, n, "consumer uid %u", (unsigned)c->uid);
}

int sonde__perfauth_sysctl(const char *path, int def)
{
	char p[128], buf[32];
	int v = def;

	snprintf(p, sizeof(p), "/proc/sys/%s", path);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return def;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return def;
	buf[n] = 0;
	return sscanf(buf, "%d", &v) == 1 ? v : def;
}
