/* sonde record: sample a command or running processes into a spool file.
 *
 * The loop: wait for ring data (or 100 ms), let the recorder process what is ready, then
 * check whether to stop (SIGINT/SIGTERM, --duration elapsed, the launched command exited,
 * every -p process exited). The recorder is then finished and the summary printed to
 * stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/profile.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>

#include "cli.h"
#include "output.h"

enum { MAX_PIDS = 64, POLL_MS = 100, CHILD_GRACE_MS = 2000 };

static volatile sig_atomic_t stop_signal;
/* A child may have exited since the last look (SIGCHLD): the launched command is reaped
 * then, not polled with a wait4 at every wakeup of the recorder, and its exit interrupts
 * the wait at once. Set at first, so that the first look is taken. */
static volatile sig_atomic_t child_changed = 1;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void on_child(int sig)
{
	(void)sig;
	child_changed = 1;
}

struct record_args {
	struct sonde_record_opts opts;
	pid_t pids[MAX_PIDS];
	int n_pids;
	pid_t tids[MAX_PIDS]; /* -t */
	int n_tids;
	const char *comms[MAX_PIDS]; /* --comm, with -a */
	int n_comms;
	const char *output; /* the spool: -o, or TRACE.spool for a trace */
	const char *trace;  /* -o names a Perfetto trace, made from the spool at the end */
	char spool_name[PATH_MAX];
	struct cli_output out; /* the spool's */
	int spool_fd;	       /* out.fd, or a copy of standard output (-o -) */
	char **cmd;
	bool quiet;
	double duration;      /* seconds; 0: until the targets exit */
	bool system_wide;     /* -a: every process; -p filters, a command only sets the duration */
	bool kernel_set;      /* --kernel or --no-kernel given */
	bool off_cpu_min_set; /* --off-cpu-min given (it needs --off-cpu) */
	bool off_cpu_backend_set; /* --off-cpu-backend given (it needs --off-cpu) */
	int *cpus;	      /* -C */
	size_t n_cpus;
	bool failed;	/* recording or finishing failed */
	long long kept; /* then: samples readable in the spool, -1 unknown */
};

/* The library explains failures through the log; the last error becomes our one line. */
static char last_error[512];

static void log_to_stderr(enum sonde_log_level level, const char *msg, void *ctx)
{
	if (level >= SONDE_LOG_ERROR)
		snprintf(last_error, sizeof(last_error), "%s", msg);
	else if (level >= sonde_log__get_level())
		fprintf(stderr, "sonde record: %s: %s\n",
			level == SONDE_LOG_WARN ? "warning" : "info", msg);
}

/* User-visible lines stay whole, so they can be found with grep. */
/* clang-format off */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde record [-F HZ|max|-c N] [-p PID]... [-t TID]... [--no-inherit] [-d SECONDS] [-o FILE] [--kernel] [-- CMD ARGS...]\n"
		"       sonde record -a [-C CPUS] [-p PID]... [-t TID]... [--comm NAME]... [-d SECONDS] [-o FILE] [-- CMD ARGS...]\n"
		"\n"
		"Samples the user-space stacks of a command, or of running processes, into a spool file.\n"
		"\n"
		"  -F, --freq HZ|max     samples per second per thread, per CPU with -a (default 999; max = the kernel limit)\n"
		"  -c, --count N         sample every N events instead (nanoseconds of CPU time for cpu-clock,\n"
		"                        hits for a tracepoint, whose default is 1: every hit)\n"
		"  -p, --pid PID         record a running process (repeatable); with -a, record only these and their children\n"
		"  -t, --tid TID[,TID]   record only these threads of running processes (repeatable), and the threads\n"
		"                        and processes they create unless --no-inherit; with -a, only these threads\n"
		"  -a, --all-cpus        every process on every CPU, including those started later (not sonde itself);\n"
		"                        kernel frames on by default; with a command, until it exits\n"
		"  -C, --cpu CPUS        with -a, only these CPUs (perf's list syntax: 0,2-3)\n"
		"      --comm NAME       with -a, only the samples of tasks whose command name is NAME at that\n"
		"                        sample (exact, repeatable; -p, -t and --comm add up)\n"
		"      --no-inherit      record the targets and their threads only, not the processes\n"
		"                        they fork (by default, children are followed at any depth)\n"
		"  -d, --duration SECS   stop after SECS seconds (a fraction is fine): -p processes keep\n"
		"                        running, a launched command is sent SIGTERM (SIGKILL after 2 s)\n"
		"  -o, --output FILE     spool file to write (default sonde.spool; '-': standard output,\n"
		"                        and the command's own goes to stderr); an existing FILE is kept\n"
		"                        as FILE.old; FILE.pftrace or FILE.perfetto-trace: a Perfetto\n"
		"                        trace, recorded into FILE.spool and converted at the end\n"
		"      --kernel          kernel frames too (below the user frames); user frames only, with a warning, when the kernel denies it\n"
		"                        (by default time in the kernel is sampled too, each such sample a [kernel] frame\n"
		"                        below the user stack; the default with -a is --kernel)\n"
		"      --no-kernel       sample user space only: time in the kernel is not counted\n"
		"      --buildid-cache DIR  keep images deleted or replaced while recorded in DIR (default $SONDE_BUILDID_CACHE, else ~/.cache/sonde/buildid)\n"
		"      --no-buildid-cache   keep no images\n"
		"      --stack-size N    user stack bytes copied per sample, at most 65528 (default: sized\n"
		"                        per thread from what its stacks need, starting at 32768;\n"
		"                        32768 with -a)\n"
		"      --ring-pages N    data pages per CPU ring, a power of two (default: 250 ms of\n"
		"                        samples, 1 MiB at least; the summary says)\n"
		"      --off-cpu         also where threads wait: each switch-out's stack, state (runnable,\n"
		"                        sleeping, blocked) and time off the CPU (sched tracepoints; root)\n"
		"                        (with -e sched:sched_switch: off CPU only, no on-CPU samples)\n"
		"      --off-cpu-min DURATION  off-CPU intervals shorter than this are counted per thread,\n"
		"                        not stacked (default 1ms; units ns, us, ms, s; 0: stack all)\n"
		"      --off-cpu-backend bpf|perf  how switches are tracked: bpf (in the kernel, only\n"
		"                        waits of --off-cpu-min or more leave it with their stacks) or\n"
		"                        perf (a perf_event sample per switch). Default: bpf when the\n"
		"                        kernel allows it (root, or CAP_BPF and CAP_PERFMON; kernel\n"
		"                        BTF), else perf; the summary says which ran and why\n"
		"  -e, --event EVENT     auto (default), cycles (try cycles first, say so when it falls\n"
		"                        back to cpu-clock), cpu-clock, or a tracepoint GROUP:NAME\n"
		"                        (e.g. sched:sched_switch: the stacks that hit it)\n"
		"  -g                    record call graphs (always on: sonde records stacks)\n"
		"      --call-graph MODE dwarf (default: CFI, frame pointers where CFI fails) or fp\n"
		"                        (frame pointers only, for code built with them)\n"
		"  -q, --quiet           no summary\n"
		"  -h, --help            this help\n"
		"\n"
		"Recording stops when the command exits (with -p: when every -p process and every\n"
		"process they forked have exited; with -t: when those threads and what they created\n"
		"have), when --duration elapses, or on Ctrl-C.\n"
		"The exit status is the command's (128+N when killed by signal N), or 0 when\n"
		"--duration ended the recording and the command was stopped by it.\n");
}
/* clang-format on */

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_event(const char *s, enum sonde_record_event *out)
{
	if (!strcmp(s, "auto"))
		*out = SONDE_RECORD_EVENT_AUTO;
	else if (!strcmp(s, "cycles"))
		*out = SONDE_RECORD_EVENT_CYCLES;
	else if (!strcmp(s, "cpu-clock"))
		*out = SONDE_RECORD_EVENT_CPU_CLOCK;
	else
		return -EINVAL;
	return 0;
}

/* "1ms", "250us", "2s", "100ns" (a bare number is milliseconds) into nanoseconds. */
static int parse_duration_ns(const char *s, uint64_t *out)
{
	static const struct {
		const char *unit;
		double ns;
	} units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"", 1e6}};
	char *end;

	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !(v >= 0) || s[0] == '-')
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit))
			continue;
		double ns = v * units[i].ns;
		if (ns > 1e15)
			return -1;
		*out = (uint64_t)(ns + 0.5);
		return 0;
	}
	return -1;
}

/* -t TID[,TID...]: appended to a->tids. 0 or CLI_USAGE after printing why. */
static int parse_tids(struct record_args *a, const char *arg)
{
	char buf[256];
	char *save = NULL;
	uint64_t v;

	if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf) || !arg[0] || arg[0] == ',' ||
	    arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
		goto bad;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (parse_u64(tok, &v) || v == 0 || v > INT32_MAX)
			goto bad;
		if (a->n_tids == MAX_PIDS) {
			cli_error("record", "at most %d threads with -t", MAX_PIDS);
			return CLI_USAGE;
		}
		a->tids[a->n_tids++] = (pid_t)v;
	}
	return 0;
bad:
	cli_error("record", "-t wants thread ids separated by commas, not '%s'", arg);
	return CLI_USAGE;
}

/* One option; returns 0, or CLI_USAGE after printing why. */
static int parse_opt(struct record_args *a, int c, const char *arg, char **argv)
{
	uint64_t v;

	switch (c) {
	case 'F':
		if (!strcmp(arg, "max")) {
			a->opts.frequency = SONDE_RECORD_FREQ_MAX;
			return 0;
		}
		if (parse_u64(arg, &v) || v == 0) {
			cli_error("record",
				  "-F wants a positive number of samples per second or "
				  "'max', not '%s'",
				  arg);
			return CLI_USAGE;
		}
		a->opts.frequency = v;
		return 0;
	case 'c':
		if (parse_u64(arg, &v) || v == 0) {
			cli_error("record", "-c wants a positive sample period, not '%s'", arg);
			return CLI_USAGE;
		}
		a->opts.sample_period = v;
		return 0;
	case 'g':
		return 0;
	case 'G':
		if (strcmp(arg, "dwarf") && strcmp(arg, "fp")) {
			cli_error("record", "--call-graph wants dwarf or fp, not '%s'", arg);
			return CLI_USAGE;
		}
		a->opts.frame_pointers_only = !strcmp(arg, "fp");
		return 0;
	case 'p':
		if (parse_u64(arg, &v) || v == 0 || v > INT32_MAX) {
			cli_error("record", "-p wants a process id, not '%s'", arg);
			return CLI_USAGE;
		}
		if (a->n_pids == MAX_PIDS) {
			cli_error("record", "at most %d -p options", MAX_PIDS);
			return CLI_USAGE;
		}
		a->pids[a->n_pids++] = (pid_t)v;
		return 0;
	case 't':
		return parse_tids(a, arg);
	case 'M':
		if (!arg[0] || strlen(arg) > 15) {
			cli_error("record",
				  "--comm wants a command name of 1 to 15 bytes, not '%s'", arg);
			return CLI_USAGE;
		}
		if (a->n_comms == MAX_PIDS) {
			cli_error("record", "at most %d --comm options", MAX_PIDS);
			return CLI_USAGE;
		}
		a->comms[a->n_comms++] = arg;
		return 0;
	case 'o':
		a->output = arg;
		return 0;
	case 'S':
		if (parse_u64(arg, &v) || v == 0 || v > 65528) {
			cli_error("record", "--stack-size wants 8..65528 bytes, not '%s'", arg);
			return CLI_USAGE;
		}
		a->opts.stack_bytes = (uint32_t)v;
		return 0;
	case 'R':
		if (parse_u64(arg, &v) || v == 0 || v > (1u << 20) || (v & (v - 1))) {
			cli_error("record", "--ring-pages wants a power of two, not '%s'", arg);
			return CLI_USAGE;
		}
		a->opts.ring_pages = (uint32_t)v;
		return 0;
	case 'e':
		a->opts.tracepoint = NULL;
		if (strchr(arg, ':') && arg[0] != ':') {
			a->opts.tracepoint = arg; /* looked up by the recorder */
			return 0;
		}
		if (parse_event(arg, &a->opts.event)) {
			cli_error("record",
				  "--event wants auto, cycles, cpu-clock or a tracepoint "
				  "GROUP:NAME, not '%s'",
				  arg);
			return CLI_USAGE;
		}
		return 0;
	case 'I':
		a->opts.follow_children = false;
		a->opts.no_follow_children = true;
		return 0;
	case 'd': {
		char *end;
		errno = 0;
		double d = strtod(arg, &end);
		if (errno || end == arg || *end || !(d > 0) || d > 1e7) {
			cli_error("record",
				  "--duration wants a positive number of seconds, not '%s'", arg);
			return CLI_USAGE;
		}
		a->duration = d;
		return 0;
	}
	case 'q':
		a->quiet = true;
		return 0;
	case 'K':
	case 'k':
		a->opts.kernel = c == 'K';
		a->opts.user_only = c == 'k';
		a->kernel_set = true;
		return 0;
	case 'a':
		a->system_wide = true;
		return 0;
	case 'C':
		free(a->cpus);
		a->cpus = NULL;
		if (sonde_cpu_list__parse(arg, &a->cpus, &a->n_cpus) < 0) {
			cli_error("record", "-C wants a CPU list such as 0,2-3, not '%s'", arg);
			return CLI_USAGE;
		}
		return 0;
	case 'B':
		a->opts.buildid_cache_dir = arg;
		return 0;
	case 'N':
		a->opts.no_buildid_cache = true;
		return 0;
	case 'O':
		a->opts.off_cpu = true;
		return 0;
	case 'm':
		if (parse_duration_ns(arg, &v)) {
			cli_error(
				"record",
				"--off-cpu-min wants a duration such as 1ms, 250us or 0, not '%s'",
				arg);
			return CLI_USAGE;
		}
		a->opts.off_cpu_min_ns = v ? v : 1; /* 0 in the options is the default */
		a->off_cpu_min_set = true;
		return 0;
	case 'b':
		if (strcmp(arg, "bpf") == 0) {
			a->opts.off_cpu_backend = SONDE_OFFCPU_BACKEND_BPF;
		} else if (strcmp(arg, "perf") == 0) {
			a->opts.off_cpu_backend = SONDE_OFFCPU_BACKEND_PERF;
		} else {
			cli_error("record", "--off-cpu-backend is bpf or perf, not '%s'", arg);
			return CLI_USAGE;
		}
		a->off_cpu_backend_set = true;
		return 0;
	default:
		return cli_bad_option("record", c, argv);
	}
}

/* Processes and threads named: the recording ends when they have all ended (a
 * system-wide one's --comm and -t filters do not end it). */
static int targets(const struct record_args *a)
{
	return a->n_pids + (a->system_wide ? 0 : a->n_tids);
}

/* Returns -1 to go on, else an exit code. */
static int parse_args(struct record_args *a, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"freq", required_argument, NULL, 'F'},
		{"count", required_argument, NULL, 'c'},
		{"call-graph", required_argument, NULL, 'G'},
		{"pid", required_argument, NULL, 'p'},
		{"tid", required_argument, NULL, 't'},
		{"comm", required_argument, NULL, 'M'},
		{"output", required_argument, NULL, 'o'},
		{"stack-size", required_argument, NULL, 'S'},
		{"ring-pages", required_argument, NULL, 'R'},
		{"event", required_argument, NULL, 'e'},
		{"no-inherit", no_argument, NULL, 'I'},
		{"duration", required_argument, NULL, 'd'},
		{"quiet", no_argument, NULL, 'q'},
		{"kernel", no_argument, NULL, 'K'},
		{"no-kernel", no_argument, NULL, 'k'},
		{"all-cpus", no_argument, NULL, 'a'},
		{"cpu", required_argument, NULL, 'C'},
		{"buildid-cache", required_argument, NULL, 'B'},
		{"no-buildid-cache", no_argument, NULL, 'N'},
		{"off-cpu", no_argument, NULL, 'O'},
		{"off-cpu-min", required_argument, NULL, 'm'},
		{"off-cpu-backend", required_argument, NULL, 'b'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(a, 0, sizeof(*a));
	a->opts.sz = sizeof(a->opts);
	a->opts.frequency = 999;
	a->opts.follow_children = true; /* like perf: children inherit the events */
	a->output = "sonde.spool";
	optind = 1;
	opterr = 0;
	/* '+': options end at the command, so its own options are left alone. */
	while ((c = getopt_long(argc, argv, "+:F:c:gp:t:o:e:d:qhaC:", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return CLI_OK;
		}
		int err = parse_opt(a, c, optarg, argv);
		if (err)
			return err;
	}
	if (optind < argc)
		a->cmd = argv + optind;
	if (a->n_cpus && !a->system_wide) {
		cli_error("record", "-C selects CPUs of a system-wide recording: add -a");
		return CLI_USAGE;
	}
	if (a->off_cpu_min_set && !a->opts.off_cpu) {
		cli_error("record", "--off-cpu-min sets a threshold of --off-cpu: add --off-cpu");
		return CLI_USAGE;
	}
	if (a->off_cpu_backend_set && !a->opts.off_cpu) {
		cli_error("record", "--off-cpu-backend chooses how --off-cpu records: add --off-cpu");
		return CLI_USAGE;
	}
	if (a->n_comms && !a->system_wide) {
		cli_error("record", "--comm filters a system-wide recording: add -a");
		return CLI_USAGE;
	}
	if (a->system_wide) {
		/* like perf record -a: the kernel's part of the machine's time is wanted too */
		if (!a->kernel_set)
			a->opts.kernel = true;
		a->opts.cpus = a->cpus;
		a->opts.n_cpus = a->n_cpus;
		a->opts.filter_pids = a->pids;
		a->opts.n_filter_pids = (size_t)a->n_pids;
		a->opts.filter_tids = a->tids;
		a->opts.n_filter_tids = (size_t)a->n_tids;
		a->opts.filter_comms = a->comms;
		a->opts.n_filter_comms = (size_t)a->n_comms;
		return -1;
	}
	if (!a->cmd && a->n_pids == 0 && a->n_tids == 0) {
		cli_error("record",
			  "nothing to record: give a command after '--', -p PID or -t TID");
		return CLI_USAGE;
	}
	return -1;
}

/* Why the kernel refused the cycles event: ENOENT (no such hardware event) and the
 * "unsupported" errors mean the machine exposes no CPU PMU, as virtual machines often do. */
static const char *cycles_why(int err)
{
	if (err == -ENOENT || err == -EOPNOTSUPP || err == -ENODEV || err == -EINVAL)
		return "this machine exposes no hardware PMU";
	return strerror(-err);
}

static void report_failure(const char *fallback_fmt, int err)
{
	if (last_error[0])
		cli_error("record", "%s", last_error);
	else
		cli_error("record", fallback_fmt, sonde_strerror(err));
}

struct child;
static void print_status(const struct child *c);

static void print_summary(const struct record_args *a, const struct sonde_record_summary *s,
			  const struct child *c)
{
	char fallback[96] = "", followed[48] = "";
	/* (threads of one process count once there: an estimate of the processes named) */
	unsigned attached = (a->cmd ? 1u : 0u) + (unsigned)a->n_pids + (unsigned)a->n_tids;

	char rate[48];

	if (a->opts.sample_period)
		snprintf(rate, sizeof(rate), "a sample every %llu events",
			 (unsigned long long)a->opts.sample_period);
	else if (s->tracepoint[0])
		snprintf(rate, sizeof(rate), "every hit");
	else if (!strcmp(s->event, "dummy"))
		snprintf(rate, sizeof(rate), "off-CPU only (every switch)");
	else
		snprintf(rate, sizeof(rate), "%llu Hz", (unsigned long long)s->frequency);
	if (s->cycles_error)
		snprintf(fallback, sizeof(fallback), " (cycles unavailable: %s)",
			 cycles_why(s->cycles_error));
	if (a->opts.follow_children)
		snprintf(followed, sizeof(followed), " (%u followed)",
			 s->processes > attached ? s->processes - attached : 0);
	fprintf(stderr,
		"sonde record: %llu samples (%llu written; %llu samples and %llu records lost), "
		"%.2f "
		"s, event %s%s\n"
		"  output %s; %s, %u-byte stacks, %u ring%s of %llu KiB; %u process%s%s, %u "
		"thread%s; %llu empty, %llu truncated stacks\n",
		(unsigned long long)s->samples, (unsigned long long)s->samples_written,
		(unsigned long long)s->lost_samples, (unsigned long long)s->lost_events,
		s->duration_ns / 1e9, s->tracepoint[0] ? s->tracepoint : s->event, fallback,
		cli_output_is_stdout(a->output) ? "standard output" : a->output, rate,
		s->stack_bytes, s->rings, s->rings == 1 ? "" : "s",
		(unsigned long long)(s->ring_bytes / 1024), s->processes,
		s->processes == 1 ? "" : "es", followed, s->threads, s->threads == 1 ? "" : "s",
		(unsigned long long)s->empty_stacks, (unsigned long long)s->truncated_stacks);
	fprintf(stderr, "  unwind: %llu frames by DWARF CFI, %llu by frame pointers",
		(unsigned long long)s->unwind_cfi_frames, (unsigned long long)s->unwind_fp_frames);
	const char *sep = "; CFI fallbacks:";
	for (unsigned i = 0; i < SONDE_UNWIND_FALLBACKS; i++) {
		if (!s->unwind_fallbacks[i])
			continue;
		fprintf(stderr, "%s %s %llu", sep, sonde_recorder__unwind_fallback_name(i),
			(unsigned long long)s->unwind_fallbacks[i]);
		sep = ",";
	}
	fprintf(stderr, "\n");
	if (s->images_saved)
		fprintf(stderr, "  %u deleted or replaced image%s kept in the build-id cache\n",
			s->images_saved, s->images_saved == 1 ? "" : "s");
	if (s->files_refused)
		fprintf(stderr, "  %llu mapped file%s not read (not a regular file, or too big)\n",
			(unsigned long long)s->files_refused, s->files_refused == 1 ? "" : "s");
	if (s->system_wide)
		fprintf(stderr,
			"  system-wide: %u CPU%s, %u process%s read from /proc, %llu samples of "
			"sonde itself dropped, %llu of processes not recorded\n",
			s->rings, s->rings == 1 ? "" : "s", s->processes_synthesized,
			s->processes_synthesized == 1 ? "" : "es",
			(unsigned long long)s->own_samples,
			(unsigned long long)s->unfollowed_samples);
	fprintf(stderr, "  ring memory: %llu KiB mapped (bound %llu KiB)",
		(unsigned long long)(s->ring_bytes_total / 1024),
		(unsigned long long)(s->ring_bytes_cap / 1024));
	if (s->ring_grows)
		fprintf(stderr, ", %u ring%s doubled after a loss", s->ring_grows,
			s->ring_grows == 1 ? "" : "s");
	fprintf(stderr, "\n");
	if (s->off_cpu)
		fprintf(stderr,
			"  off-CPU: %llu switch-outs, %llu intervals stacked, %llu shorter than "
			"%.3f ms counted (%.3f s in all), %llu dropped (lost or not writable), %llu "
			"wakeups seen, %llu switch-ins not traced (ended at the wakeup or next "
			"sample), %llu exits (a task's last switch-out: no interval), %llu "
			"unknown (open when records were lost or a switch-in went untraced, %.3f "
			"s)\n",
			(unsigned long long)s->offcpu_switches,
			(unsigned long long)s->offcpu_intervals,
			(unsigned long long)s->offcpu_short,
			(a->opts.off_cpu_min_ns ? a->opts.off_cpu_min_ns
						: SONDE_RECORD_OFF_CPU_MIN_DEFAULT) /
				1e6,
			s->offcpu_short_ns / 1e9, (unsigned long long)s->offcpu_dropped,
			(unsigned long long)s->offcpu_wakeups,
			(unsigned long long)s->offcpu_unseen_switch_ins,
			(unsigned long long)s->offcpu_exits,
			(unsigned long long)s->offcpu_unknown, s->offcpu_unknown_ns / 1e9);
	if (s->off_cpu)
		fprintf(stderr, "  off-CPU backend: %s%s%s%s\n", s->offcpu_backend,
			s->offcpu_backend_why[0] ? " (" : "", s->offcpu_backend_why,
			s->offcpu_backend_why[0] ? ")" : "");
	if (s->offcpu_ring_waits_bytes)
		fprintf(stderr,
			"  off-CPU rings: waits %llu KiB (at most %llu KiB held), switches %llu KiB "
			"(at most %llu KiB held)\n",
			(unsigned long long)s->offcpu_ring_waits_bytes >> 10,
			(unsigned long long)s->offcpu_ring_waits_high >> 10,
			(unsigned long long)s->offcpu_ring_switches_bytes >> 10,
			(unsigned long long)s->offcpu_ring_switches_high >> 10);
	if (s->stack_switches)
		fprintf(stderr,
			"  stack copies: %u-%u bytes per thread after %u switch%s (%u grown after "
			"a cut stack), %llu duplicate records dropped\n",
			s->stack_bytes_min, s->stack_bytes_max, s->stack_switches,
			s->stack_switches == 1 ? "" : "es", s->stack_grows,
			(unsigned long long)s->duplicates_dropped);
	if (a->opts.kernel && s->kernel_enabled)
		fprintf(stderr, "  kernel: %llu frames, %llu samples in the kernel\n",
			(unsigned long long)s->kernel_frames,
			(unsigned long long)s->kernel_samples);
	else if (a->opts.kernel)
		fprintf(stderr,
			"  kernel: not recorded (denied: %s), user frames only; kernel time not "
			"visible\n",
			strerror(-s->kernel_error));
	else if (s->kernel_time)
		fprintf(stderr, "  kernel: %llu samples in the kernel (under [kernel] frames)\n",
			(unsigned long long)s->kernel_samples);
	else if (s->kernel_time_error == -ERANGE)
		fprintf(stderr, "  kernel: kernel time not visible (not sampled above 10000 Hz, "
				"where the samples' own cost would be; --kernel samples it)\n");
	else if (s->kernel_time_error)
		fprintf(stderr,
			"  kernel: kernel time not visible (kernel sampling denied: %s; needs "
			"kernel.perf_event_paranoid <= 1 or CAP_PERFMON)\n",
			strerror(-s->kernel_time_error));
	else
		fprintf(stderr, "  kernel: kernel time not visible (--no-kernel)\n");
	fprintf(stderr,
		"  loss: %llu records and %llu samples lost; %llu gap%s, %llu recovered by %llu "
		"sweep%s (modules %llu added, %llu dropped; %llu processes, %llu exits, %llu "
		"execs, %llu threads recovered)\n",
		(unsigned long long)s->lost_events, (unsigned long long)s->lost_samples,
		(unsigned long long)s->lifecycle_gaps, s->lifecycle_gaps == 1 ? "" : "s",
		(unsigned long long)s->gaps_recovered, (unsigned long long)s->recovery_sweeps,
		s->recovery_sweeps == 1 ? "" : "s", (unsigned long long)s->recovered_modules,
		(unsigned long long)s->stale_modules, (unsigned long long)s->recovered_processes,
		(unsigned long long)s->recovered_exits, (unsigned long long)s->recovered_execs,
		(unsigned long long)s->threads_refreshed);
	if (a->failed && a->kept >= 0)
		fprintf(stderr, "  recording failed: %lld samples kept in %s\n", a->kept,
			a->output);
	else if (a->failed)
		fprintf(stderr,
			"  recording failed: %s cannot be read back to count the samples "
			"kept\n",
			a->output);
	print_status(c);
}

static int install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a signal interrupts the wait */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return -errno;
	/* SA_RESTART for the calls it could interrupt elsewhere; epoll_wait, which it is
	 * meant to, is never restarted */
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		return -errno;
	return 0;
}

/* The launched command: forward a stop signal once, then give it a grace period. */
struct child {
	struct sonde_launch *l;
	bool exited;
	int status;
	bool signalled;
	double signal_time;
	double deadline; /* --duration: monotonic seconds at which to stop; 0: none */
	bool timed_out;	 /* the deadline ended the recording */
	bool failed;	 /* the recording failed: the command is ended as at the deadline */
};

static void print_status(const struct child *c)
{
	if (!c->l)
		return;
	if (!c->exited)
		fprintf(stderr, "  command: still running\n");
	else if (WIFSIGNALED(c->status))
		fprintf(stderr, "  command: killed by signal %d (%s)%s\n", WTERMSIG(c->status),
			strsignal(WTERMSIG(c->status)),
			!c->signalled  ? ""
			: c->failed    ? " after the recording failed"
			: c->timed_out ? " at the end of --duration"
				       : "");
	else
		fprintf(stderr, "  command: exited with status %d\n", WEXITSTATUS(c->status));
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool child_done(struct child *c)
{
	if (!c->l || c->exited)
		return true;
	if (!child_changed)
		return false;
	child_changed = 0; /* before the wait: an exit after it sets it again */
	if (sonde_launch__wait(c->l, WNOHANG, &c->status) == 1)
		c->exited = true;
	return c->exited;
}

/* true when the loop should end. */
static bool should_stop(struct sonde_recorder *r, struct child *c, int n_pids)
{
	if (c->deadline && !c->timed_out && now_s() >= c->deadline)
		c->timed_out = true;
	if (c->l) {
		if (child_done(c))
			return true;
		if ((stop_signal || c->timed_out || c->failed) && !c->signalled) {
			kill(sonde_launch__pid(c->l), stop_signal ? stop_signal : SIGTERM);
			c->signalled = true;
			c->signal_time = now_s();
		}
		if (c->signalled && now_s() - c->signal_time > CHILD_GRACE_MS / 1000.0) {
			kill(sonde_launch__pid(c->l), SIGKILL);
			sonde_launch__wait(c->l, 0, &c->status);
			c->exited = true;
			return true;
		}
		return false;
	}
	if (stop_signal || c->timed_out || c->failed)
		return true;
	/* An inspection failure is not an exit: go on (Ctrl-C still ends it). */
	return n_pids > 0 && sonde_recorder__active_process_count(r) == 0;
}

static int record_loop(struct sonde_recorder *r, struct child *c, int n_pids)
{
	int first = 0;

	while (!should_stop(r, c, n_pids)) {
		int err = sonde_recorder__poll(r, POLL_MS, NULL);
		if (err < 0 && !first) {
			first = err;
			report_failure("recording failed: %s", err);
			break;
		}
	}
	return first;
}

/* After a failed recording, a launched command is ended as at the end of --duration
 * (SIGTERM, SIGKILL 2 s later), rather than left running unrecorded. */
static void end_command(struct sonde_recorder *r, struct child *c, int n_pids)
{
	struct timespec nap = {0, 10 * 1000000};

	c->failed = true;
	while (!should_stop(r, c, n_pids))
		nanosleep(&nap, NULL);
}

/* How many samples a failed recording left readable in its spool: -1 when it cannot be
 * read back (not a regular file, or nothing decodable). */
static long long samples_kept(const char *path)
{
	struct stat st;
	struct sonde_spool_info info;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	struct sonde_spool *s = sonde_spool__open(path, NULL);
	if (!s)
		return -1;
	sonde_spool__get_info(s, &info);
	sonde_spool__close(s);
	return (long long)info.samples;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return CLI_FAILURE;
}

/* Launches the command suspended; returns NULL after reporting (and sets *code). */
static struct sonde_launch *launch(char **cmd, int *code)
{
	struct sonde_launch *l = sonde_launch__new(cmd, NULL);

	if (!l) {
		cli_error("record", "cannot run '%s': %s", cmd[0], strerror(errno));
		*code = errno == ENOENT ? 127 : 126;
	}
	return l;
}

/* After attaching another process or thread: true (r freed, the error said) when it
 * failed. */
static bool attach_failed(struct sonde_recorder *r, int out, const char *what, pid_t id)
{
	if (out >= 0 && out != SONDE_ATTACH_EXITED)
		return false;
	if (out == SONDE_ATTACH_EXITED)
		cli_error("record", "no such %s: %d", what, (int)id);
	else
		report_failure("cannot attach: %s", out);
	sonde_recorder__free(r);
	return true;
}

static struct sonde_recorder *attach_all(struct record_args *a, struct child *c, int *code)
{
	if (a->system_wide) {
		/* The command, if any, is one of the processes recorded; it only bounds the
		 * recording. */
		*code = CLI_FAILURE;
		struct sonde_recorder *sr = sonde_recorder__attach_system_writer(
			sonde_spool_writer__write_fd, (void *)(intptr_t)a->spool_fd, &a->opts);
		if (!sr)
			report_failure("cannot record system-wide: %s", -errno);
		return sr;
	}
	/* the first target creates the recorder: the command, else a -p process, else a -t
	 * thread */
	struct sonde_record_opts o = a->opts;
	pid_t first = c->l ? sonde_launch__pid(c->l) : a->n_pids ? a->pids[0] : a->tids[0];
	enum sonde_attach_mode mode = c->l ? SONDE_ATTACH_ON_EXEC : SONDE_ATTACH_STOP;
	o.attach_thread = !c->l && !a->n_pids;
	struct sonde_recorder *r = sonde_recorder__attach_writer(
		first, sonde_spool_writer__write_fd, (void *)(intptr_t)a->spool_fd, mode, &o);

	*code = CLI_FAILURE;
	if (!r) {
		report_failure("cannot attach: %s", -errno);
		return NULL;
	}
	struct sonde_record_summary s = {.sz = sizeof(s)};
	if (a->opts.event == SONDE_RECORD_EVENT_CYCLES && sonde_recorder__summary(r, &s) == 0 &&
	    s.cycles_error)
		fprintf(stderr,
			"sonde record: warning: cycles unavailable (%s): sampling cpu-clock\n",
			cycles_why(s.cycles_error));
	for (int i = c->l ? 0 : 1; i < a->n_pids; i++) {
		int out = sonde_recorder__attach_process(r, a->pids[i], SONDE_ATTACH_STOP);
		if (attach_failed(r, out, "process", a->pids[i]))
			return NULL;
	}
	for (int i = o.attach_thread ? 1 : 0; i < a->n_tids; i++) {
		int out = sonde_recorder__attach_thread(r, a->tids[i], SONDE_ATTACH_STOP);
		if (attach_failed(r, out, "thread", a->tids[i]))
			return NULL;
	}
	return r;
}

/* The spool goes where -o says, by output.h's rules; it is published under its name once
 * the recording runs, so that `sonde top FILE` can follow it as it grows. -o x.pftrace:
 * the spool is x.pftrace.spool, converted at the end (a killed recording leaves it there,
 * and report/convert of x.pftrace say so). -o -: standard output; a launched command's own
 * standard output then goes to standard error, so that it does not mix with the spool. */
static int open_output(struct record_args *a)
{
	if (cli_is_trace_name(a->output)) {
		a->trace = a->output;
		if (cli_trace_spool_name(a->spool_name, sizeof(a->spool_name), a->trace) < 0) {
			cli_error("record", "output name too long: %s", a->output);
			return -ENAMETOOLONG;
		}
		a->output = a->spool_name;
	}
	int err = cli_output_open(&a->out, a->output);
	if (err) {
		cli_error("record", "cannot create %s: %s", a->output, strerror(-err));
		return err;
	}
	a->spool_fd = a->out.fd;
	if (a->out.fd != STDOUT_FILENO)
		return 0;
	a->spool_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (a->spool_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		err = -errno;
		cli_error("record", "cannot write to standard output: %s", strerror(-err));
		if (a->spool_fd >= 0)
			close(a->spool_fd);
		cli_output_close(&a->out, false);
		return err;
	}
	return 0;
}

/* ok: the spool is complete (or as complete as it will be). 0 or -errno, reported. */
static int close_output(struct record_args *a, bool ok)
{
	int err = 0;

	if (a->spool_fd != a->out.fd && close(a->spool_fd) < 0)
		err = -errno;
	int cerr = cli_output_close(&a->out, ok);
	if (!err)
		err = cerr;
	if (err && ok)
		cli_error("record", "%s: %s", a->output, strerror(-err));
	return err;
}

static int convert_trace(struct record_args *a)
{
	struct cli_output o;
	int err = cli_output_open(&o, a->trace);

	if (!err) {
		err = sonde_profile__spool_to_perfetto(a->spool_name, o.fd, NULL);
		int cerr = cli_output_close(&o, err == 0);
		if (!err)
			err = cerr;
	}
	if (err) {
		cli_error("record", "%s: %s; the recording is kept in %s", a->trace,
			  sonde_strerror(err), a->spool_name);
		return err;
	}
	unlink(a->spool_name);
	return 0;
}

/* The command runs and the recording is on: the spool goes under its name. */
static int publish_output(struct record_args *a)
{
	int err = cli_output_publish(&a->out);

	if (err)
		cli_error("record", "cannot create %s: %s", a->output, strerror(-err));
	else if (a->trace && !a->quiet)
		fprintf(stderr, "sonde record: recording into %s, converted to %s at the end\n",
			a->spool_name, a->trace);
	return err;
}

/* Opens the output, launches the command, attaches, lets the command run and publishes
 * the spool. The recorder, or NULL after reporting, with *code the exit status. */
static struct sonde_recorder *start_recording(struct record_args *a, struct child *c, int *code)
{
	struct sonde_recorder *r = NULL;
	int err;

	*code = CLI_FAILURE;
	if (open_output(a) < 0)
		return NULL;
	if (a->cmd && !(c->l = launch(a->cmd, code)))
		goto fail;
	/* A reader of -o - that goes away is a write error, not a silent death that would
	 * leave the command running. Set after the launch: the command keeps the default. */
	signal(SIGPIPE, SIG_IGN);
	if (!(r = attach_all(a, c, code)))
		goto fail;
	if (c->l && (err = sonde_launch__resume(c->l)) < 0) {
		cli_error("record", "cannot run '%s': %s", a->cmd[0], strerror(-err));
		*code = err == -ENOENT ? 127 : 126;
		goto fail;
	}
	if (publish_output(a) < 0) {
		end_command(r, c, targets(a));
		*code = CLI_FAILURE;
		goto fail;
	}
	return r;
fail:
	sonde_recorder__free(r);
	close_output(a, false);
	sonde_launch__free(c->l);
	c->l = NULL;
	return NULL;
}

/* After the loop (err: its error): finishes the spool, ends a launched command when the
 * recording failed, makes the trace. true when anything failed (reported). */
static bool stop_recording(struct record_args *a, struct child *c, struct sonde_recorder *r,
			   int err, struct sonde_record_summary *sum)
{
	int ferr = sonde_recorder__finish(r, sum);

	if (ferr && !err)
		report_failure("finishing the recording failed: %s", ferr);
	/* The recorder writes nothing after finish: its file can be closed before it is freed. */
	if (close_output(a, true) < 0 && !ferr)
		ferr = -EIO;
	if (err || ferr) {
		end_command(r, c, targets(a));
		a->failed = true;
		a->kept = samples_kept(a->output);
	}
	sonde_recorder__free(r);
	if (!a->trace)
		return a->failed;
	if (a->failed) {
		cli_error("record", "%s not written; the recording is kept in %s", a->trace,
			  a->output);
		return true;
	}
	if (convert_trace(a) < 0)
		return true;
	a->output = a->trace;
	return false;
}

/* The command's status (128+N for signal N), or 0 when --duration ended it as asked. */
static int command_code(const struct child *c)
{
	if (!c->exited)
		return CLI_FAILURE;
	if (c->timed_out && c->signalled && WIFSIGNALED(c->status))
		return CLI_OK;
	return exit_code(c->status);
}

static int run_record(int argc, char **argv)
{
	struct record_args a;
	struct child c = {0};
	struct sonde_record_summary sum = {.sz = sizeof(sum)};
	int code = parse_args(&a, argc, argv);

	if (code >= 0) {
		free(a.cpus); /* -C's list, parsed before the usage error */
		return code;
	}
	sonde_log__set_callback(log_to_stderr, NULL);
	if (install_signals() < 0)
		return CLI_FAILURE;
	struct sonde_recorder *r = start_recording(&a, &c, &code);
	if (!r) {
		free(a.cpus);
		return code;
	}
	if (a.duration > 0)
		c.deadline = now_s() + a.duration;
	int err = record_loop(r, &c, targets(&a));
	bool failed = stop_recording(&a, &c, r, err, &sum);
	if (c.l)
		child_done(&c);
	if (!a.quiet)
		print_summary(&a, &sum, &c);
	code = c.l ? command_code(&c) : CLI_OK;
	sonde_launch__free(c.l);
	free(a.cpus);
	/* A failed recording is a failure whatever became of the command it ended. */
	return failed ? CLI_FAILURE : code;
}

SONDE_COMMAND("record", "sample the stacks of a command or running processes into a spool",
	      run_record)
