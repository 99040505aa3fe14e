#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "base/array.h"
#include "proc/proc.h"

int sonde__proc_read_file(const char *path, struct buf *b)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	sonde__buf_reset(b);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	for (;;) {
		if (sonde__buf_reserve(b, 4096) < 0) {
			close(fd);
			return -ENOMEM;
		}
		ssize_t n = read(fd, b->data + b->len, b->cap - b->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno == ESRCH ? -ESRCH : -errno;
			close(fd);
			return err;
		}
		if (n == 0)
			break;
		b->len += (size_t)n;
	}
	close(fd);
	return 0;
}

static const char *skip_fields(const char *p, const char *end, int n)
{
	while (n-- > 0) {
		while (p < end && *p != ' ')
			p++;
		while (p < end && *p == ' ')
			p++;
	}
	return p;
}

static bool parse_u64(const char *p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = p;

	while (p < end && *p >= '0' && *p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p++ - '0');
	}
	*out = v;
	return p > s;
}

int sonde__proc_stat_parse(const char *buf, size_t len, struct proc_stat *st)
{
	const char *end = buf + len;
	const char *open_paren = memchr(buf, '(', len);
	const char *close_paren = NULL;
	uint64_t ppid, flags, threads;

	memset(st, 0, sizeof(*st));
	/* comm may itself contain ')' and spaces: the last ')' ends it. */
	for (const char *p = end; p > buf; p--)
		if (p[-1] == ')') {
			close_paren = p - 1;
			break;
		}
	if (!open_paren || !close_paren || close_paren < open_paren || end - close_paren < 3)
		return -SONDE_E_FORMAT;
	size_t n = (size_t)(close_paren - open_paren - 1);
	if (n >= sizeof(st->comm))
		n = sizeof(st->comm) - 1;
	memcpy(st->comm, open_paren + 1, n);
	st->comm[n] = 0;

	const char *p = close_paren + 2; /* field 3: state */
	st->state = *p;
	p = skip_fields(p, end, 1);
	if (!parse_u64(p, end, &ppid) || ppid > INT32_MAX)
		return -SONDE_E_FORMAT;
	st->ppid = (int)ppid;
	p = skip_fields(p, end, 9 - 4); /* field 4 (ppid) -> field 9 (flags) */
	if (!parse_u64(p, end, &flags) || flags > UINT32_MAX)
		return -SONDE_E_FORMAT;
	st->flags = (unsigned)flags;
	p = skip_fields(p, end, 20 - 9); /* -> field 20 (num_threads) */
	if (!parse_u64(p, end, &threads) || threads > UINT32_MAX)
		return -SONDE_E_FORMAT;
	st->threads = (unsigned)threads;
	p = skip_fields(p, end, 22 - 20); /* -> field 22 (starttime) */
	if (!parse_u64(p, end, &st->start_time))
		return -SONDE_E_FORMAT;
	return 0;
}

int sonde__proc_stat_read(pid_t pid, pid_t tid, struct proc_stat *st)
{
	char path[64];
	struct buf b = BUF_INIT;

	if (pid <= 0)
		return -ESRCH;
	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int err = sonde__proc_read_file(path, &b);
	if (!err)
		err = sonde__proc_stat_parse((const char *)b.data, b.len, st);
	sonde__buf_free(&b);
	return err;
}

int sonde__proc_list_tasks(pid_t pid, pid_t **tids, size_t *n)
{
	char path[64];
	size_t cap = 0, count = 0;
	pid_t *out = NULL;
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d))) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		if (*end || tid <= 0)
			continue;
		if (sonde__array_grow(&out, &cap, count + 1, sizeof(*out), 16) < 0) {
			sonde__free(out);
			closedir(d);
			return -ENOMEM;
		}
		out[count++] = (pid_t)tid;
	}
	closedir(d);
	if (count == 0) {
		sonde__free(out);
		return -ESRCH;
	}
	*tids = out;
	*n = count;
	return 0;
}

static bool task_ended(pid_t pid, pid_t tid)
{
	struct proc_stat st;

	return sonde__proc_stat_read(pid, tid, &st) < 0 || st.state == 'Z' || st.state == 'X';
}

int sonde__proc_live_task(pid_t pid, pid_t *tid)
{
	pid_t *tids;
	size_t n;

	if (!task_ended(pid, pid)) {
		*tid = pid;
		return 0;
	}
	int err = sonde__proc_list_tasks(pid, &tids, &n);
	if (err)
		return err;
	err = -ESRCH;
	for (size_t i = 0; i < n && err; i++)
		if (tids[i] != pid && !task_ended(pid, tids[i])) {
			*tid = tids[i];
			err = 0;
		}
	sonde__free(tids);
	return err;
}

int sonde__proc_parse_pid_list(const char *buf, size_t len, pid_t *out, size_t max)
{
	const char *p = buf, *end = buf + len;
	size_t n = 0;

	for (;;) {
		while (p < end && (*p == ' ' || *p == '\n'))
			p++;
		if (p == end)
			return (int)n;
		uint64_t v;
		if (!parse_u64(p, end, &v) || v == 0 || v > INT32_MAX)
			return -SONDE_E_FORMAT;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		if (p < end && *p != ' ' && *p != '\n')
			return -SONDE_E_FORMAT;
		if (n < max)
			out[n++] = (pid_t)v;
		else
			return (int)n;
	}
}

/* Appends the pids listed in b to *out. 0 or -errno. */
static int append_pids(const struct buf *b, pid_t **out, size_t *n, size_t *cap)
{
	size_t room = b->len / 2 + 1; /* a pid takes at least two bytes with its separator */

	if (*n + room > *cap) {
		size_t c = (*n + room) * 2;
		pid_t *np = sonde__realloc(*out, c * sizeof(*np));
		if (!np)
			return -ENOMEM;
		*out = np;
		*cap = c;
	}
	int got = sonde__proc_parse_pid_list((const char *)b->data, b->len, *out + *n, room);
	if (got < 0)
		return got;
	*n += (size_t)got;
	return 0;
}

int sonde__proc_list_children(pid_t pid, pid_t **pids, size_t *n)
{
	pid_t *tids, *out = NULL;
	size_t n_tids, count = 0, cap = 0;
	struct buf b = BUF_INIT;
	int err = sonde__proc_list_tasks(pid, &tids, &n_tids);

	if (err)
		return err;
	for (size_t i = 0; i < n_tids && !err; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)tids[i]);
		err = sonde__proc_read_file(path, &b);
		if (err == -ESRCH) {
			err = 0; /* that thread exited meanwhile */
			continue;
		}
		if (!err)
			err = append_pids(&b, &out, &count, &cap);
	}
	sonde__buf_free(&b);
	sonde__free(tids);
	if (err) {
		sonde__free(out);
		return err;
	}
	*pids = out;
	*n = count;
	return 0;
}

int sonde__proc_read_comm(pid_t pid, pid_t tid, char *out, size_t cap)
{
	char path[64];
	struct buf b = BUF_INIT;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)(tid ? tid : pid));
	int err = sonde__proc_read_file(path, &b);
	if (!err) {
		/* the kernel ends the name with one newline; a name may end with its own */
		size_t n = b.len && b.data[b.len - 1] == '\n' ? b.len - 1 : b.len;
		if (n >= cap)
			n = cap - 1;
		memcpy(out, b.data, n);
		out[n] = 0;
	}
	sonde__buf_free(&b);
	return err;
}

int sonde__proc_status_parse_uids(const char *buf, size_t len, uid_t *ruid, uid_t *euid)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if (le - p > 4 && memcmp(p, "Uid:", 4) == 0) {
			uint64_t r, e;
			const char *q = p + 4;
			while (q < le && (*q == '\t' || *q == ' '))
				q++;
			if (!parse_u64(q, le, &r))
				return -SONDE_E_FORMAT;
			while (q < le && *q >= '0' && *q <= '9')
				q++;
			while (q < le && (*q == '\t' || *q == ' '))
				q++;
			if (!parse_u64(q, le, &e) || r > UINT32_MAX || e > UINT32_MAX)
				return -SONDE_E_FORMAT;
			*ruid = (uid_t)r;
			*euid = (uid_t)e;
			return 0;
		}
		p = nl ? nl + 1 : end;
	}
	return -SONDE_E_FORMAT;
}

int sonde__proc_status_parse_tgid(const char *buf, size_t len, pid_t *tgid)
{
	const char *p = buf, *end = buf + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if (le - p > 5 && memcmp(p, "Tgid:", 5) == 0) {
			uint64_t v;
			const char *q = p + 5;
			while (q < le && (*q == '\t' || *q == ' '))
				q++;
			if (!parse_u64(q, le, &v) || v == 0 || v > INT32_MAX)
				return -SONDE_E_FORMAT;
			*tgid = (pid_t)v;
			return 0;
		}
		p = nl ? nl + 1 : end;
	}
	return -SONDE_E_FORMAT;
}

int sonde__proc_read_tgid(pid_t tid, pid_t *tgid)
{
	char path[64];
	struct buf b = BUF_INIT;

	/* /proc/TID is there for every thread, listed or not */
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	int err = sonde__proc_read_file(path, &b);
	if (!err)
		err = sonde__proc_status_parse_tgid((const char *)b.data, b.len, tgid);
	sonde__buf_free(&b);
	return err;
}

int sonde__proc_read_uids(pid_t pid, uid_t *ruid, uid_t *euid)
{
	char path[64];
	struct buf b = BUF_INIT;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int err = sonde__proc_read_file(path, &b);
	if (!err)
		err = sonde__proc_status_parse_uids((const char *)b.data, b.len, ruid, euid);
	sonde__buf_free(&b);
	return err;
}

int sonde__proc_is_alive(pid_t pid, uint64_t start_time)
{
	struct proc_stat st;
	int err = sonde__proc_stat_read(pid, 0, &st);

	if (err == -ESRCH)
		return 0;
	if (err)
		return err;
	if (sonde__proc_stat_ended(&st))
		return 0;
	return start_time == 0 || st.start_time == start_time;
}

/* The threads of a stopped process: sonde__proc_stop seizes each one with PTRACE_SEIZE and stops
 * it with PTRACE_INTERRUPT. A ptrace-stop is reported to the tracer only: the parent's
 * waitpid(WUNTRACED) sees nothing, a shell does not print "Stopped" and take the terminal
 * back, and no SIGCONT is needed (nor seen) afterwards. If sonde dies meanwhile, the kernel
 * detaches and the threads run on. */

static struct proc_held *held_find(struct proc_stopped *st, pid_t tid)
{
	for (size_t i = 0; i < st->n_held; i++)
		if (st->held[i].tid == tid)
			return &st->held[i];
	return NULL;
}

/* Seizes and interrupts tid. 1 when held, 0 when it is gone (exited, or a zombie that
 * cannot run anyway), -errno. */
static int hold_thread(struct proc_stopped *st, pid_t pid, pid_t tid)
{
	if (st->n_held % 64 == 0) {
		struct proc_held *n = sonde__realloc(st->held, (st->n_held + 64) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		st->held = n;
	}
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
		int err = -errno;
		struct proc_stat ts;
		if (err == -ESRCH)
			return 0;
		/* The kernel refuses to trace an exiting thread (EPERM), which never runs again. */
		if (sonde__proc_stat_read(pid, tid, &ts) == -ESRCH || ts.state == 'Z' ||
		    ts.state == 'X')
			return 0;
		return err;
	}
	st->held[st->n_held++] = (struct proc_held){.tid = tid};
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 && errno != ESRCH)
		return -errno;
	return 1;
}

/* One wait status of a held thread. */
static void held_status(struct proc_held *h, int status)
{
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		h->gone = true;
		return;
	}
	if (!WIFSTOPPED(status))
		return;
	h->stopped = true;
	/* Not our interrupt nor a group-stop (both PTRACE_EVENT_STOP): a signal-delivery-stop,
	 * whose signal must still be delivered. */
	if (status >> 16 != PTRACE_EVENT_STOP)
		h->sig = WSTOPSIG(status);
}

/* Waits until every held thread is stopped or gone. 0, -ETIMEDOUT, -errno. */
static int wait_held(struct proc_stopped *st, const struct timespec *deadline)
{
	struct timespec nap = {0, 1000000}, now;

	for (;;) {
		bool all = true;
		for (size_t i = 0; i < st->n_held; i++) {
			struct proc_held *h = &st->held[i];
			int status;
			if (h->stopped || h->gone)
				continue;
			pid_t got = waitpid(h->tid, &status, __WALL | WNOHANG);
			if (got < 0 && errno == ECHILD)
				h->gone = true; /* reaped as a thread of an exec'ing process */
			else if (got < 0 && errno != EINTR)
				return -errno;
			else if (got > 0)
				held_status(h, status);
			all &= h->stopped || h->gone;
		}
		if (all)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > deadline->tv_sec ||
		    (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec))
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
}

/* Holds every thread of pid, listing its threads again until no new one appears. */
static int hold_all_threads(struct proc_stopped *st, const struct timespec *deadline)
{
	for (;;) {
		pid_t *tids;
		size_t n, added = 0;
		int err = sonde__proc_list_tasks(st->pid, &tids, &n);

		if (err)
			return err;
		for (size_t i = 0; i < n && !err; i++) {
			if (held_find(st, tids[i]))
				continue;
			err = hold_thread(st, st->pid, tids[i]);
			added += err > 0;
			err = err < 0 ? err : 0;
		}
		sonde__free(tids);
		if (!err)
			err = wait_held(st, deadline);
		if (err || added == 0)
			return err;
	}
}

static bool state_is_stopped(char s)
{
	/* Zombie and dead threads will never stop: they do not run either. */
	return s == 'T' || s == 't' || s == 'Z' || s == 'X';
}

/* 1 when every thread is stopped, 0 when some still runs, -errno. */
static int all_threads_stopped(pid_t pid)
{
	pid_t *tids;
	size_t n;
	int err = sonde__proc_list_tasks(pid, &tids, &n);

	if (err)
		return err;
	int stopped = 1;
	for (size_t i = 0; i < n && stopped; i++) {
		struct proc_stat st;
		err = sonde__proc_stat_read(pid, tids[i], &st);
		if (err == -ESRCH)
			continue; /* the thread exited meanwhile */
		if (err) {
			stopped = err;
			break;
		}
		stopped = state_is_stopped(st.state);
	}
	sonde__free(tids);
	return stopped;
}

/* A child of the calling process is stopped with SIGSTOP instead. Its only parent is the
 * caller, who asked for the stop; and a ptrace-stop of one's own child would be reported
 * to every waitpid of the caller's threads, WUNTRACED or not, where a group-stop is
 * reported only to those that ask for it. */
static int stop_by_signal(struct proc_stopped *st, int timeout_ms)
{
	struct timespec nap = {0, 1000000};

	if (kill(st->pid, SIGSTOP) < 0)
		return -errno;
	st->by_signal = true;
	for (int waited = 0;; waited++) {
		int err = all_threads_stopped(st->pid);
		if (err == 1)
			return 0;
		if (err < 0)
			return err;
		if (waited >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
}

static void deadline_in(struct timespec *d, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, d);
	d->tv_sec += ms / 1000;
	d->tv_nsec += (long)(ms % 1000) * 1000000;
	if (d->tv_nsec >= 1000000000) {
		d->tv_sec++;
		d->tv_nsec -= 1000000000;
	}
}

int sonde__proc_stop(pid_t pid, uint64_t start_time, int timeout_ms, struct proc_stopped *out)
{
	struct proc_stat st;
	struct timespec deadline;
	int err = sonde__proc_stat_read(pid, 0, &st);

	memset(out, 0, sizeof(*out));
	if (err)
		return err;
	if ((start_time && st.start_time != start_time) || sonde__proc_stat_ended(&st))
		return -ESRCH;
	out->pid = pid;
	out->start_time = st.start_time;
	if (st.state == 'T' || st.state == 't')
		return 0; /* already stopped by someone else: leave it to them */
	out->stopped_by_us = true;
	if (st.ppid == getpid()) {
		err = stop_by_signal(out, timeout_ms);
	} else {
		deadline_in(&deadline, timeout_ms);
		err = hold_all_threads(out, &deadline);
	}
	/* The pid could have been reused between the first read and the seize. */
	if (!err && (err = sonde__proc_stat_read(pid, 0, &st)) == 0 &&
	    st.start_time != out->start_time)
		err = -ESRCH;
	if (!err && !out->by_signal && out->n_held == 0)
		err = -ESRCH; /* every thread exited while it was being seized */
	if (err) {
		sonde__proc_resume(out);
		return err;
	}
	return 0;
}

static int detach_held(struct proc_stopped *st);

int sonde__proc_stop_thread(pid_t pid, pid_t tid, uint64_t start_time, int timeout_ms,
			    struct proc_stopped *st)
{
	struct proc_stat ps, ts;
	struct timespec deadline;
	int err = sonde__proc_stat_read(pid, 0, &ps);

	if (err)
		return err;
	if ((start_time && ps.start_time != start_time) || sonde__proc_stat_ended(&ps))
		return -ESRCH;
	if ((err = sonde__proc_stat_read(pid, tid, &ts)) < 0)
		return err;
	if (ts.state == 'Z' || ts.state == 'X')
		return -ESRCH;
	if (st->n_held == 0 && !st->by_signal) {
		st->pid = pid;
		st->start_time = ps.start_time;
	}
	if (st->by_signal || held_find(st, tid) || ts.state == 'T' || ts.state == 't')
		return 0; /* held already, or stopped by someone else: left to them */
	if (ps.ppid == getpid()) {
		/* the caller's own child: its whole group, with SIGSTOP (stop_by_signal) */
		st->stopped_by_us = true;
		return stop_by_signal(st, timeout_ms);
	}
	deadline_in(&deadline, timeout_ms);
	size_t first = st->n_held;
	err = hold_thread(st, pid, tid);
	if (err == 0)
		return -ESRCH; /* gone while it was being seized */
	if (err > 0)
		err = wait_held(st, &deadline);
	if (!err && st->held[first].gone)
		err = -ESRCH;
	if (err && st->n_held > first) {
		/* release this thread only, as sonde__proc_resume would */
		struct proc_stopped one = {.pid = pid, .held = st->held + first, .n_held = 1};
		detach_held(&one);
		st->n_held = first;
		return err;
	}
	st->stopped_by_us = true;
	return err;
}

int sonde__proc_resume(struct proc_stopped *st)
{
	if (!st)
		return 0;
	if (st->by_signal) {
		st->by_signal = false;
		st->stopped_by_us = false;
		int alive = sonde__proc_is_alive(st->pid, st->start_time);
		if (alive <= 0)
			return alive;
		return kill(st->pid, SIGCONT) < 0 ? -errno : 0;
	}
	int first = detach_held(st);

	sonde__free(st->held);
	st->held = NULL;
	st->n_held = 0;
	st->stopped_by_us = false;
	return first;
}

/* Detaches every thread st holds (the array itself is the caller's). 0 or the first -errno. */
static int detach_held(struct proc_stopped *st)
{
	struct timespec deadline;
	int first = 0;

	/* Only a stopped tracee can be detached: after a failed sonde__proc_stop, a thread may
	 * still be on its way to the interrupt stop. One still not there after a second (stuck in
	 * the kernel) stays traced: it stops when it leaves the kernel and runs on when this
	 * process exits, which detaches it. */
	deadline_in(&deadline, 1000);
	wait_held(st, &deadline);
	for (size_t i = 0; i < st->n_held; i++) {
		struct proc_held *h = &st->held[i];
		int status;
		if (h->gone || !h->stopped)
			continue;
		if (ptrace(PTRACE_DETACH, h->tid, NULL, (void *)(intptr_t)h->sig) == 0)
			continue;
		if (errno == ESRCH) {
			/* Killed while held: reap the exit report the tracer gets, which lets
			 * its parent reap it. */
			waitpid(h->tid, &status, __WALL | WNOHANG);
		} else if (!first) {
			first = -errno;
		}
	}
	return first;
}
