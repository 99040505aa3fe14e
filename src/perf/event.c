#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "perf/event.h"

#define SAMPLE_TYPE                                                                                \
	(PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_CPU |  \
	 PERF_SAMPLE_PERIOD | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)

const char *sonde__perf_kind_name(enum perf_kind k)
{
	return k == PERF_KIND_CYCLES	   ? "cycles"
	       : k == PERF_KIND_TRACEPOINT ? "tracepoint"
					   : "cpu-clock";
}

/* A tracepoint sampled at every hit. It fires in the kernel, so exclude_kernel would
 * filter out every hit (perf_tp_event_match); kernel frames stay out of the callchain
 * unless asked for. One side band per recording: the recording's own event carries it. */
static void tracepoint_attr(struct perf_event_attr *a, const struct perf_event_cfg *c)
{
	a->type = PERF_TYPE_TRACEPOINT;
	a->config = c->side_tracepoint;
	a->freq = 0;
	a->sample_period = 1;
	a->exclude_kernel = 0;
	a->mmap = a->mmap2 = a->comm = a->comm_exec = a->task = 0;
	a->context_switch = c->context_switch;
	if (c->no_kernel_callchain)
		a->exclude_callchain_kernel = 1; /* an empty callchain: the layout keeps it */
}

void sonde__perf_attr_fill(struct perf_event_attr *a, const struct perf_event_cfg *c)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	if (c->kind == PERF_KIND_CYCLES) {
		a->type = PERF_TYPE_HARDWARE;
		a->config = PERF_COUNT_HW_CPU_CYCLES;
	} else if (c->kind == PERF_KIND_TRACEPOINT) {
		a->type = PERF_TYPE_TRACEPOINT;
		a->config = c->tracepoint;
	} else {
		a->type = PERF_TYPE_SOFTWARE;
		a->config = PERF_COUNT_SW_CPU_CLOCK;
	}
	if (c->dummy) {
		/* mappings, comms and tasks for the side events' samples, no samples of its
		 * own: the period only keeps the attribute valid */
		a->type = PERF_TYPE_SOFTWARE;
		a->config = PERF_COUNT_SW_DUMMY;
		a->sample_period = 1;
	} else if (c->kind == PERF_KIND_TRACEPOINT) {
		/* Hits, not time: every one by default, as perf record -e does. */
		a->sample_period = c->period ? c->period : 1;
	} else if (c->period) {
		a->sample_period = c->period;
	} else {
		a->freq = 1;
		a->sample_freq = c->freq;
	}
	a->sample_type = SAMPLE_TYPE;
	/* A software event sampling its period writes a sample at every hit, whatever the
	 * period (perf_swevent_event): without it, -c N takes one hit in N. */
	if (c->kind == PERF_KIND_TRACEPOINT)
		a->sample_type &= ~(uint64_t)PERF_SAMPLE_PERIOD;
	if (c->kernel) {
		/* The kernel part of the callchain only: user frames come from sonde's own
		 * unwinding of the copied registers and stack. */
		a->sample_type |= PERF_SAMPLE_CALLCHAIN;
		a->exclude_callchain_user = 1;
	}
	if (c->raw)
		a->sample_type |= PERF_SAMPLE_RAW;
	a->sample_regs_user = PERF_DECODE_REGS_MASK;
	a->sample_stack_user = c->stack_bytes;
	/* A tracepoint fires in the kernel: excluding the kernel would drop every hit. The
	 * kernel callchain still follows c->kernel; the user registers and stack are the
	 * task's own either way. */
	a->exclude_kernel = !c->kernel && !c->kernel_time && c->kind != PERF_KIND_TRACEPOINT;
	a->exclude_hv = 1;
	a->exclude_callchain_kernel = !c->kernel;
	a->disabled = c->disabled || c->enable_on_exec;
	a->enable_on_exec = c->enable_on_exec;
	/* Threads and processes the target creates later inherit the events (and write into the
	 * same per-CPU rings), so nothing started after attaching goes unsampled. */
	a->inherit = !c->cpu_wide && !c->no_inherit;
	a->inherit_thread = c->no_children && a->inherit;
	/* Side band: executable mappings, comm changes (exec), fork and exit. */
	a->mmap = 1;
	a->mmap2 = 1;
	a->comm = 1;
	a->comm_exec = 1;
	a->task = 1;
	a->sample_id_all = 1;
	if (c->read_lost)
		a->read_format = PERF_FORMAT_LOST;
	if (c->side_tracepoint)
		tracepoint_attr(a, c);
	/* The spool header's start time is on CLOCK_MONOTONIC: samples must use that clock. */
	a->use_clockid = 1;
	a->clockid = CLOCK_MONOTONIC;
	a->watermark = 1;
	a->wakeup_watermark = c->wakeup_bytes ? c->wakeup_bytes : 1;
}

void sonde__perf_event_layout(struct perf_layout *l)
{
	l->sample_type = SAMPLE_TYPE;
	l->regs_mask = PERF_DECODE_REGS_MASK;
	l->sample_id_all = true;
}

void sonde__perf_event_layout_cfg(struct perf_layout *l, const struct perf_event_cfg *c)
{
	sonde__perf_event_layout(l);
	if (c->kernel)
		l->sample_type |= PERF_SAMPLE_CALLCHAIN;
	if (c->kind == PERF_KIND_TRACEPOINT)
		l->sample_type &= ~(uint64_t)PERF_SAMPLE_PERIOD;
	if (c->raw)
		l->sample_type |= PERF_SAMPLE_RAW;
}

static int raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (rl.rlim_cur >= rl.rlim_max)
		return -EMFILE;
	rlim_t want = rl.rlim_cur * 2 < rl.rlim_max ? rl.rlim_cur * 2 : rl.rlim_max;
	sonde_info("raising the open file limit from %llu to %llu", (unsigned long long)rl.rlim_cur,
		   (unsigned long long)want);
	rl.rlim_cur = want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	return 0;
}

int sonde__perf_open(struct perf_event_attr *a, pid_t pid, int cpu)
{
	for (;;) {
		long fd = syscall(SYS_perf_event_open, a, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd >= 0)
			return (int)fd;
		int err = errno;
		if (err != EMFILE || raise_nofile() < 0)
			return -err;
	}
}

int sonde__perf_set_output(int fd, int target)
{
	return ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, target) < 0 ? -errno : 0;
}

int sonde__perf_set_filter(int fd, const char *filter)
{
	return ioctl(fd, PERF_EVENT_IOC_SET_FILTER, filter) < 0 ? -errno : 0;
}

int sonde__perf_enable(int fd)
{
	return ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) < 0 ? -errno : 0;
}

int sonde__perf_disable(int fd)
{
	return ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) < 0 ? -errno : 0;
}

int sonde__perf_read_lost(int fd, uint64_t *lost)
{
	uint64_t v[2];
	ssize_t n = read(fd, v, sizeof(v));

	if (n < 0)
		return -errno;
	if (n != sizeof(v))
		return -EIO;
	*lost = v[1];
	return 0;
}

bool sonde__perf_err_is_unsupported(int err)
{
	if (err < 0)
		err = -err;
	return err == ENOENT || err == ENODEV || err == EOPNOTSUPP || err == EINVAL;
}

static int read_small_file(const char *path, char *buf, size_t cap, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	int err = n < 0 ? -errno : 0;
	close(fd);
	if (err)
		return err;
	buf[n] = 0;
	*len = (size_t)n;
	return 0;
}

int sonde__perf_max_sample_rate(uint64_t *out)
{
	char buf[64], *end;
	size_t len;
	int err = read_small_file("/proc/sys/kernel/perf_event_max_sample_rate", buf, sizeof(buf),
				  &len);

	if (err)
		return err;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno || end == buf)
		return -SONDE_E_FORMAT;
	*out = v;
	return 0;
}

int sonde__perf_parse_cpu_list(const char *buf, size_t len, int *cpus, size_t max)
{
	size_t n = 0, i = 0;

	while (i < len && buf[i] != '\n' && buf[i] != 0) {
		long a = 0, b;
		size_t start = i;
		while (i < len && buf[i] >= '0' && buf[i] <= '9' && a < 1 << 20)
			a = a * 10 + (buf[i++] - '0');
		if (i == start || a >= 1 << 20)
			return -SONDE_E_FORMAT;
		b = a;
		if (i < len && buf[i] == '-') {
			b = 0;
			start = ++i;
			while (i < len && buf[i] >= '0' && buf[i] <= '9' && b < 1 << 20)
				b = b * 10 + (buf[i++] - '0');
			if (i == start || b < a || b >= 1 << 20)
				return -SONDE_E_FORMAT;
		}
		for (long c = a; c <= b; c++) {
			if (n == max)
				return -SONDE_E_LIMIT;
			cpus[n++] = (int)c;
		}
		if (i < len && buf[i] == ',')
			i++;
		else if (i < len && buf[i] != '\n' && buf[i] != 0)
			return -SONDE_E_FORMAT;
	}
	return (int)n;
}

int sonde__perf_online_cpus(int **cpus, size_t *n)
{
	char buf[4096];
	size_t len;
	long conf = sysconf(_SC_NPROCESSORS_CONF);
	size_t max = conf > 0 ? (size_t)conf : 1;
	int err = read_small_file("/sys/devices/system/cpu/online", buf, sizeof(buf), &len);

	if (max < 4096)
		max = 4096;
	int *c = sonde__malloc(max * sizeof(int));
	if (!c)
		return -ENOMEM;
	int got = err ? err : sonde__perf_parse_cpu_list(buf, len, c, max);
	if (got <= 0) {
		/* No sysfs (containers): every configured CPU. */
		got = conf > 0 ? (int)conf : 1;
		for (int i = 0; i < got; i++)
			c[i] = i;
	}
	*cpus = c;
	*n = (size_t)got;
	return 0;
}

/* linux/magic.h's TRACEFS_MAGIC; debugfs mounts tracefs at debug/tracing on demand. */
#define TRACEFS_MAGIC_ 0x74726163

/* 0 when dir holds events/ (and, with want_tracefs, is a tracefs mount), -EACCES when
 * it is there but this user may not look in it (tracefs is 0700 root by default), else
 * -ENODEV. */
static int events_dir(const char *dir, bool want_tracefs)
{
	char p[PATH_MAX];
	struct statfs sf;
	struct stat st;

	if (want_tracefs && (statfs(dir, &sf) < 0 || (unsigned long)sf.f_type != TRACEFS_MAGIC_))
		return -ENODEV;
	if ((size_t)snprintf(p, sizeof(p), "%s/events", dir) >= sizeof(p))
		return -ENODEV;
	if (stat(p, &st) < 0)
		return errno == EACCES ? -EACCES : -ENODEV;
	return S_ISDIR(st.st_mode) ? 0 : -ENODEV;
}

/* A tracefs directory name: the path is built from it, so no separator and no way up. */
static bool tracepoint_name_ok(const char *s)
{
	return s && *s && !strchr(s, '/') && !strstr(s, "..");
}

int sonde__perf_tracepoint_id(const char *tracefs, const char *group, const char *name)
{
	static const char *const mounts[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};
	char path[PATH_MAX], buf[32], *end;
	size_t len;

	if (!tracepoint_name_ok(group) || !tracepoint_name_ok(name))
		return -EINVAL;
	if (!tracefs) {
		int err = -ENODEV;
		for (size_t i = 0; i < sizeof(mounts) / sizeof(mounts[0]) && !tracefs; i++) {
			int e = events_dir(mounts[i], true);
			if (!e)
				tracefs = mounts[i];
			else if (e == -EACCES)
				err = e; /* mounted, but not for us */
		}
		if (!tracefs)
			return err;
	} else {
		int err = events_dir(tracefs, false);
		if (err)
			return err;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/events/%s/%s/id", tracefs, group, name) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	int err = read_small_file(path, buf, sizeof(buf), &len);
	if (err)
		return err == -ENOTDIR ? -ENOENT : err;
	errno = 0;
	unsigned long v = strtoul(buf, &end, 10);
	if (errno || end == buf || (*end && *end != '\n') || v > INT32_MAX || buf[0] == '-')
		return -SONDE_E_FORMAT;
	return (int)v;
}
