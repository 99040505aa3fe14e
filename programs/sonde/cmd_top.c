/* sonde top: a live view of the hottest functions of a recording in progress.
 *
 * The source is a spool followed by a tail (include/sonde/tail.h): one this command
 * records itself (-p PID, or -- CMD), into an unlinked temporary file whose consumed blocks
 * are punched, or a file another `sonde record` is writing. The loop:
 *   1. wait up to 50 ms (for ring data when recording, else for a key)
 *   2. read keys (q quits), consume every batch the tail has
 *   3. once per refresh interval: drop samples older than the window, redraw
 *   4. stop on q, Ctrl-C/SIGTERM, the end of the recording (command or processes exited,
 *      END record), or an error
 * On a terminal the view is drawn on the alternate screen with the keyboard in raw mode;
 * both are restored on every exit path. Otherwise a plain table is printed each interval,
 * and a final one at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/record.h>
#include <sonde/tail.h>
#include <sonde/view.h>
#include <sonde/view_source.h>

#include "cli.h"
#include "output.h"
#include "top.h"

enum { MAX_PIDS = 64, WAIT_MS = 50, PLAIN_ROWS = 20, CHILD_GRACE_MS = 2000 };

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct top_args {
	double delay_s, window_s, duration_s;
	bool full_names;
	const char *command_output;
	uint64_t freq;
	pid_t attach[MAX_PIDS];
	int n_attach;
	pid_t tids[MAX_PIDS]; /* -t: threads recorded alone */
	int n_tids;
	uint32_t pid, tid;	/* filters */
	struct cli_filter filt; /* --filter-comm, --filter-cpu, --time */
	const char *cpu_list;	/* --filter-cpu as given */
	const char *time_arg;	/* --time as given */
	enum sonde_profile_metric metric;
	enum sonde_view_sort sort;
	bool system_wide; /* -a: every process (sonde_recorder__attach_system) */
	int rows;	  /* plain mode rows, 0: PLAIN_ROWS */
	const char *file;
	char **cmd;
};

struct top {
	struct top_args a;
	struct sonde_recorder *r;
	struct sonde_launch *l;
	struct sonde_tail *t;
	struct sonde_view_live *live; /* the window, once the recording's header is read */
	char source[128];
	bool screen, keys; /* drawing on a terminal; reading keys from one */
	struct termios saved;
	bool ended; /* the recording is over: show what is left, then stop */
	int child_status;
	uint64_t seen;	    /* samples consumed in all */
	uint64_t intervals; /* off-CPU intervals consumed in all (cut ones too) */
};

/* clang-format off */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde top [options] -p PID [-p PID]...\n"
		"       sonde top [options] -t TID [-t TID]...\n"
		"       sonde top [options] -a\n"
		"       sonde top [options] -- CMD ARGS...\n"
		"       sonde top [options] [-i FILE | FILE]\n"
		"\n"
		"Shows the hottest functions of a live recording, by self and total samples (or\n"
		"time, with --metric) over a sliding window, refreshed every second. FILE is a spool\n"
		"being written by `sonde record` (default sonde.spool).\n"
		"\n"
		"  -p, --pid PID         record a running process and the processes it creates\n"
		"                        (repeatable; a command after -- too)\n"
		"  -t, --tid TID         record a thread alone (repeatable; with -p too)\n"
		"  -a, --all-cpus        record every process on every CPU, kernel frames too (as sonde record -a);\n"
		"                        a PROCESS column ('comm-pid') splits each function by process\n"
		"  -i, --input FILE      follow the spool FILE (or give it as the argument)\n"
		"  -d, --duration SECS   stop after SECS seconds (a launched command is then stopped)\n"
		"      --interval SECS   refresh interval (default 1)\n"
		"  -w, --window SECS     sliding window (default 5)\n"
		"  -F, --freq HZ|max     sampling frequency when recording (default 999)\n"
		"      --filter-pid PID  show only samples of process PID\n"
		"      --filter-tid TID  show only samples of thread TID\n"
		"      --filter-comm NAME[,NAME...]  show only samples of threads with these names\n"
		"      --filter-cpu LIST show only samples taken on these CPUs (0,2-3)\n"
		"      --time START,END  show only samples (and intervals, by their switch-out) taken\n"
		"                        between START and END seconds since the recording started\n"
		"                        (either side may be left out: 2.5, or ,10), as report's --time\n"
		"      --metric cpu|off-cpu|wall  what stacks weigh, as report's --metric (default\n"
		"                        cpu: on-CPU samples); off-cpu: the time threads spent off\n"
		"                        the CPU, under an [off-cpu: R|S|D|other] frame (recording\n"
		"                        itself, top then records off-CPU intervals; a FILE needs\n"
		"                        record's --off-cpu); wall: both, a sample weighing its\n"
		"                        period, or its thread's on-CPU time by the CPUs' switches\n"
		"                        (-a with off-CPU: as report). An interval stays in the\n"
		"                        window until -w after it ended\n"
		"  -s, --sort KEY        order of the table: self (default), total, name, or\n"
		"                        process (then self; shows the PROCESS column)\n"
		"  -n, --rows N          rows per table when not on a terminal (default 20)\n"
		"      --full-names      show whole C++ names (by default template arguments and\n"
		"                        parameters are elided and names cut to the column)\n"
		"      --command-output FILE  where a launched command's standard output and error\n"
		"                        go (default sonde-top.out; its input is /dev/null)\n"
		"  -h, --help            this help\n"
		"\n"
		"Keys: q quits (so does Ctrl-C). When standard output is not a terminal, a plain table is\n"
		"printed every interval and a final one at the end.\n");
}
/* clang-format on */

static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v > 0) || v > 86400)
		return -1;
	*out = v;
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (end == s || *end || v == 0 || v > INT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static const char *opt_name(int c)
{
	switch (c) {
	case 'I':
		return "--interval";
	case 'w':
		return "-w/--window";
	case 'F':
		return "-F/--freq";
	case 's':
		return "-s/--sort";
	case 'n':
		return "-n/--rows";
	case 'd':
		return "-d/--duration";
	case 't':
		return "-t/--tid";
	default:
		return "-p/--pid";
	}
}

/* One option; returns 0, or CLI_USAGE after reporting. */
static int parse_opt(struct top_args *a, int c)
{
	uint32_t v;

	switch (c) {
	case 'a':
		a->system_wide = true;
		return 0;
	case 'p':
		if (a->n_attach == MAX_PIDS || parse_u32(optarg, &v) < 0)
			break;
		a->attach[a->n_attach++] = (pid_t)v;
		return 0;
	case 't':
		if (a->n_tids == MAX_PIDS || parse_u32(optarg, &v) < 0)
			break;
		a->tids[a->n_tids++] = (pid_t)v;
		return 0;
	case 'I':
		if (parse_seconds(optarg, &a->delay_s) < 0)
			break;
		return 0;
	case 'd':
		if (parse_seconds(optarg, &a->duration_s) < 0)
			break;
		return 0;
	case 'i':
		a->file = optarg;
		return 0;
	case 'N':
		a->full_names = true;
		return 0;
	case 'O':
		a->command_output = optarg;
		return 0;
	case 'w':
		if (parse_seconds(optarg, &a->window_s) < 0)
			break;
		return 0;
	case 'F':
		if (strcmp(optarg, "max") == 0) {
			a->freq = SONDE_RECORD_FREQ_MAX;
			return 0;
		}
		if (parse_u32(optarg, &v) < 0)
			break;
		a->freq = v;
		return 0;
	case 'P':
		return parse_u32(optarg, &a->pid) < 0
			       ? (cli_error("top", "bad --filter-pid: %s", optarg), CLI_USAGE)
			       : 0;
	case 'T':
		return parse_u32(optarg, &a->tid) < 0
			       ? (cli_error("top", "bad --filter-tid: %s", optarg), CLI_USAGE)
			       : 0;
	case 'C':
		return cli_filter_parse("top", &a->filt, "filter-comm", optarg);
	case 'U':
		a->cpu_list = optarg; /* the parser reads a CPU list without cutting it up */
		return cli_filter_parse("top", &a->filt, "filter-cpu", optarg);
	case 'X':
		a->time_arg = optarg; /* and a time window likewise */
		return cli_filter_parse("top", &a->filt, "time", optarg);
	case 'M':
		if (sonde_profile__parse_metric(optarg, &a->metric) == 0)
			return 0;
		cli_error("top", "--metric wants cpu, off-cpu or wall, not '%s'", optarg);
		return CLI_USAGE;
	case 's':
		if (!strcmp(optarg, "self"))
			a->sort = SONDE_VIEW_SORT_SELF;
		else if (!strcmp(optarg, "total"))
			a->sort = SONDE_VIEW_SORT_TOTAL;
		else if (!strcmp(optarg, "name"))
			a->sort = SONDE_VIEW_SORT_NAME;
		else if (!strcmp(optarg, "process"))
			a->sort = SONDE_VIEW_SORT_PROCESS;
		else
			break;
		return 0;
	case 'n':
		if (parse_u32(optarg, &v) < 0)
			break;
		a->rows = (int)v;
		return 0;
	default:
		return CLI_USAGE;
	}
	cli_error("top", "bad value for %s: %s", opt_name(c), optarg);
	return CLI_USAGE;
}

/* Returns 0, or an exit code (help or usage error) after printing. */
static int parse_args(struct top_args *a, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"tid", required_argument, NULL, 't'},
		{"input", required_argument, NULL, 'i'},
		{"duration", required_argument, NULL, 'd'},
		{"interval", required_argument, NULL, 'I'},
		{"window", required_argument, NULL, 'w'},
		{"freq", required_argument, NULL, 'F'},
		{"filter-pid", required_argument, NULL, 'P'},
		{"filter-tid", required_argument, NULL, 'T'},
		{"filter-comm", required_argument, NULL, 'C'},
		{"filter-cpu", required_argument, NULL, 'U'},
		{"time", required_argument, NULL, 'X'},
		{"metric", required_argument, NULL, 'M'},
		{"sort", required_argument, NULL, 's'},
		{"rows", required_argument, NULL, 'n'},
		{"full-names", no_argument, NULL, 'N'},
		{"command-output", required_argument, NULL, 'O'},
		{"all-cpus", no_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	*a = (struct top_args){
		.delay_s = 1, .window_s = 5, .freq = 999, .command_output = "sonde-top.out"};
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:p:t:i:d:w:F:s:n:ha", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return CLI_OK + 256; /* done, exit 0 */
		}
		if (c == '?' || c == ':')
			return cli_bad_option("top", c, argv);
		int err = parse_opt(a, c);
		if (err)
			return err;
	}
	bool dashdash = optind > 0 && strcmp(argv[optind - 1], "--") == 0;
	if (dashdash && optind < argc) {
		a->cmd = &argv[optind];
	} else if (optind < argc || (!a->n_attach && !a->n_tids && !a->system_wide)) {
		if (!(a->file = cli_input("top", a->file, argc, argv)))
			return CLI_USAGE;
	}
	int sources = (a->n_attach > 0 || a->n_tids > 0) + (a->cmd != NULL) + (a->file != NULL) +
		      a->system_wide;
	if (sources != 1) {
		cli_error("top",
			  sources ? "give only one of -p PID (or -t TID), -a, -- CMD and FILE"
				  : "nothing to show: give -p PID, -t TID, -a, -- CMD or FILE");
		return CLI_USAGE;
	}
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- sources ---- */

/* The library explains a failure through the log: its last error is the one line said,
 * in place of the errno it returns (which is often only EIO). */
static char last_error[512];

static void log_to_stderr(enum sonde_log_level level, const char *msg, void *ctx)
{
	if (level >= SONDE_LOG_ERROR)
		snprintf(last_error, sizeof(last_error), "%s", msg);
	else if (level >= sonde_log__get_level())
		fprintf(stderr, "sonde top: warning: %s\n", msg);
}

/* "cannot record pid N: why", said once: the library's reason when it gave one. */
static void record_error(pid_t pid, int err)
{
	if (last_error[0])
		cli_error("top", "%s", last_error);
	else
		cli_error("top", "cannot record pid %d: %s", (int)pid,
			  err == -ESRCH ? "no such process" : sonde_strerror(err));
}

/* A temporary spool for recording: unlinked once the tail has it open, and punched as it
 * is consumed, so it takes no lasting disk space. */
static int temp_spool(char *path, size_t n)
{
	const char *dir = getenv("TMPDIR");

	snprintf(path, n, "%s/sonde-top-XXXXXX", dir && *dir ? dir : "/tmp");
	int fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int open_tail(struct top *tp, const char *spool)
{
	struct sonde_tail_opts o = {.sz = sizeof(o), .punch_holes = 1};

	tp->t = tp->r ? sonde_recorder__tail(tp->r, &o) : sonde_tail__open(spool, NULL);
	if (!tp->t) {
		int e = errno;
		if (tp->r)
			cli_error("top", "cannot follow the recording: %s", sonde_strerror(e));
		else
			cli_spool_error("top", spool, e, 0);
		return CLI_FAILURE;
	}
	return 0;
}

/* The launched command, its standard output and error going to --command-output (so that
 * they do not scribble over the view) and its input from /dev/null (the keys are top's).
 * The child takes the descriptors at fork: ours are put back right after. */
static struct sonde_launch *launch_quiet(struct top *tp)
{
	const char *out = tp->a.command_output;
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int saved[3] = {dup(0), dup(1), dup(2)};
	struct sonde_launch *l = NULL;

	if (fd < 0 || in < 0 || saved[0] < 0 || saved[1] < 0 || saved[2] < 0) {
		cli_error("top", "%s: %s", out, strerror(errno));
		errno = 0;
	} else if (dup2(in, 0) >= 0 && dup2(fd, 1) >= 0 && dup2(fd, 2) >= 0) {
		l = sonde_launch__new(tp->a.cmd, NULL);
	}
	int e = errno;
	for (int i = 0; i < 3; i++)
		if (saved[i] >= 0) {
			dup2(saved[i], i);
			close(saved[i]);
		}
	if (fd >= 0)
		close(fd);
	if (in >= 0)
		close(in);
	errno = e;
	return l;
}

static int start_recording(struct top *tp)
{
	/* a time metric weighs the intervals off the CPU: record them */
	struct sonde_record_opts o = {.sz = sizeof(o),
				      .frequency = tp->a.freq,
				      .off_cpu = tp->a.metric != SONDE_PROFILE_METRIC_CPU};
	char path[256];
	pid_t pid = tp->a.n_attach ? tp->a.attach[0] : tp->a.n_tids ? tp->a.tids[0] : 0;
	int err = temp_spool(path, sizeof(path));

	if (err) {
		cli_error("top", "cannot create a temporary spool in %s: %s", path, strerror(-err));
		return CLI_FAILURE;
	}
	if (tp->a.system_wide) {
		o.kernel = true; /* falls back to user frames, with a warning, when denied */
		tp->r = sonde_recorder__attach_system(path, &o);
		if (!tp->r) {
			cli_error("top", "cannot record system-wide: %s", strerror(errno));
			unlink(path);
			return CLI_FAILURE;
		}
		snprintf(tp->source, sizeof(tp->source), "all CPUs");
		err = open_tail(tp, path);
		unlink(path);
		return err;
	}
	if (tp->a.cmd) {
		tp->l = launch_quiet(tp);
		if (!tp->l) {
			int e = errno;
			if (e)
				cli_error("top", "cannot run '%s': %s", tp->a.cmd[0], strerror(e));
			unlink(path);
			return !e ? CLI_FAILURE : e == ENOENT ? 127 : 126;
		}
		pid = sonde_launch__pid(tp->l);
	}
	/* only threads: the first creates the recorder */
	o.attach_thread = !tp->l && !tp->a.n_attach;
	/* As `sonde record` does by default: what a launched command or an attached process
	 * runs (sh -c "prog; ...", make) is where its time goes. Threads given alone stay alone. */
	o.no_follow_children = o.attach_thread;
	tp->r = sonde_recorder__attach(pid, path, tp->l ? SONDE_ATTACH_ON_EXEC : SONDE_ATTACH_STOP,
				       &o);
	if (!tp->r) {
		record_error(pid, -errno);
		unlink(path);
		return CLI_FAILURE;
	}
	for (int i = 1; i < tp->a.n_attach; i++) {
		int out = sonde_recorder__attach_process(tp->r, tp->a.attach[i], SONDE_ATTACH_STOP);
		if (out < 0 || out == SONDE_ATTACH_EXITED) {
			record_error(tp->a.attach[i], out < 0 ? out : -ESRCH);
			unlink(path);
			return CLI_FAILURE;
		}
	}
	for (int i = o.attach_thread ? 1 : 0; i < tp->a.n_tids; i++) {
		int out = sonde_recorder__attach_thread(tp->r, tp->a.tids[i], SONDE_ATTACH_STOP);
		if (out < 0 || out == SONDE_ATTACH_EXITED) {
			if (out == SONDE_ATTACH_EXITED)
				snprintf(last_error, sizeof(last_error), "no such thread: %d",
					 (int)tp->a.tids[i]);
			record_error(tp->a.tids[i], out < 0 ? out : -ESRCH);
			unlink(path);
			return CLI_FAILURE;
		}
	}
	err = open_tail(tp, path);
	unlink(path);
	if (err)
		return err;
	if (tp->l && (err = sonde_launch__resume(tp->l)) < 0) {
		cli_error("top", "cannot run '%s': %s", tp->a.cmd[0], strerror(-err));
		return err == -ENOENT ? 127 : 126;
	}
	if (tp->l)
		snprintf(tp->source, sizeof(tp->source), "%s (pid %d, output in %s)", tp->a.cmd[0],
			 (int)pid, tp->a.command_output);
	else
		snprintf(tp->source, sizeof(tp->source), "%s %d%s", o.attach_thread ? "tid" : "pid",
			 (int)pid, tp->a.n_attach + tp->a.n_tids > 1 ? " and others" : "");
	return 0;
}

static int open_source(struct top *tp)
{
	if (!tp->a.file)
		return start_recording(tp);
	snprintf(tp->source, sizeof(tp->source), "%s", tp->a.file);
	return open_tail(tp, tp->a.file);
}

/* true once the recorded processes are gone. */
static bool recording_over(struct top *tp)
{
	if (tp->l)
		return sonde_launch__wait(tp->l, WNOHANG, &tp->child_status) == 1;
	if (tp->a.system_wide)
		return false; /* until q or Ctrl-C */
	if (tp->r)
		return sonde_recorder__active_process_count(tp->r) == 0;
	return false;
}

/* Ends what this command started: the recording (its last samples go to the tail) and a
 * launched command that is still running. */
static void stop_source(struct top *tp)
{
	if (tp->l && sonde_launch__wait(tp->l, WNOHANG, &tp->child_status) == 0) {
		pid_t pid = sonde_launch__pid(tp->l);
		kill(pid, SIGTERM);
		for (int i = 0; i < CHILD_GRACE_MS / 10; i++) {
			if (sonde_launch__wait(tp->l, WNOHANG, &tp->child_status) != 0)
				break;
			usleep(10000);
		}
		if (sonde_launch__wait(tp->l, WNOHANG, &tp->child_status) == 0) {
			kill(pid, SIGKILL);
			sonde_launch__wait(tp->l, 0, &tp->child_status);
		}
	}
	if (tp->r) {
		int err = sonde_recorder__finish(tp->r, NULL);
		if (err)
			cli_error("top", "finishing the recording: %s", sonde_strerror(err));
	}
}

/* ---- the terminal ---- */

static void screen_enter(struct top *tp)
{
	struct termios raw;

	tp->screen = isatty(STDOUT_FILENO);
	tp->keys = tp->screen && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &tp->saved) == 0;
	if (tp->keys) {
		/* Keys arrive one by one without echo; ISIG stays on, so Ctrl-C is SIGINT. */
		raw = tp->saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
	}
	if (tp->screen) {
		/* Alternate screen, cursor hidden: the shell's screen comes back on exit. */
		fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
		fflush(stdout);
	}
}

static void screen_leave(struct top *tp)
{
	if (tp->screen) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
	}
	if (tp->keys)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &tp->saved);
	tp->screen = tp->keys = false;
}

/* true when q was pressed. */
static bool read_keys(struct top *tp)
{
	char buf[64];

	if (!tp->keys)
		return false;
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 'q' || buf[i] == 'Q')
			return true;
	return false;
}

/* ---- drawing ---- */

/* The PROCESS column: with -a, where any process may be anyone's, and when sorting by it. */
static bool process_column(const struct top *tp)
{
	return tp->a.system_wide || tp->a.sort == SONDE_VIEW_SORT_PROCESS;
}

/* s cut to cap - 1 characters, ending in "..." when it was longer (a command is not a C++
 * name: its brackets stay). Returns out. */
static const char *cut(const char *s, char *out, size_t cap)
{
	if (snprintf(out, cap, "%s", s) >= (int)cap && cap > 4)
		memcpy(out + cap - 4, "...", 4);
	return out;
}

/* The header's count: samples, or the time a time metric adds up to and in how many
 * samples and intervals. */
static void print_total(const struct top *tp, uint64_t total, uint64_t events)
{
	if (tp->a.metric == SONDE_PROFILE_METRIC_CPU)
		printf("%llu samples", (unsigned long long)total);
	else
		printf("%s %.3f s in %llu events", sonde_profile__metric_name(tp->a.metric),
		       (double)total / 1e9, (unsigned long long)events);
}

static void draw_table(struct top *tp, int max_rows, int width, const char *note)
{
	const struct sonde_view_row *rows = NULL;
	uint64_t total = 0, events = 0;
	bool by_process = process_column(tp);
	size_t n = 0, n_all = 0;
	char line[1024], proc[21];

	struct sonde_view_rows_opts ro = {
		.sz = sizeof(ro),
		.group = by_process ? SONDE_VIEW_BY_FUNCTION_PROCESS : SONDE_VIEW_BY_FUNCTION,
		.sort = tp->a.sort,
		.max = max_rows > 0 ? (size_t)max_rows : 1,
	};
	/* no view before the recording's header (and its start, for --time) was read */
	struct sonde_view *v = tp->live ? sonde_view_live__view(tp->live) : NULL;
	if (v)
		total = sonde_view__total(v, &events);
	if (!v || sonde_view__rows(v, &ro, &rows, &n, &n_all) < 0)
		n = n_all = 0; /* out of memory: the header still says how many samples */
	printf("sonde top: %s | window %.1f s | ", tp->source, tp->a.window_s);
	print_total(tp, total, events);
	printf("%s%s\n", note ? " | " : "", note ? note : "");
	if (tp->a.pid || tp->a.tid || tp->a.filt.n_comms || tp->a.filt.cpus || tp->a.time_arg) {
		printf("filter:");
		if (tp->a.pid)
			printf(" pid %u", tp->a.pid);
		if (tp->a.tid)
			printf(" tid %u", tp->a.tid);
		for (size_t i = 0; i < tp->a.filt.n_comms; i++)
			printf(" comm %s", tp->a.filt.comms[i]);
		if (tp->a.filt.cpus)
			printf(" cpu %s", tp->a.cpu_list);
		if (tp->a.time_arg)
			printf(" time %s s", tp->a.time_arg);
		printf("\n");
	}
	/* a time metric of a recording without intervals is empty for that reason: say it */
	if (tp->a.metric != SONDE_PROFILE_METRIC_CPU && !tp->intervals)
		printf("no off-CPU intervals so far (a FILE has them when `sonde record --off-cpu` "
		       "writes it)\n");
	if (by_process)
		printf("%7s %7s  %-40s %-20s %s\n", "SELF%", "TOTAL%", "FUNCTION", "PROCESS",
		       "MODULE");
	else
		printf("%7s %7s  %-40s %s\n", "SELF%", "TOTAL%", "FUNCTION", "MODULE");
	for (size_t i = 0; i < n; i++) {
		double self = total ? 100.0 * (double)rows[i].self / (double)total : 0;
		double tot = total ? 100.0 * (double)rows[i].total / (double)total : 0;
		char name[NAME_COLUMN + 1];
		const char *shown = tp->a.full_names
					    ? rows[i].name
					    : top_short_name(rows[i].name, name, sizeof(name));
		if (by_process)
			snprintf(line, sizeof(line), "%7.2f %7.2f  %-40s %-20s %s", self, tot,
				 shown, cut(rows[i].label, proc, 21), rows[i].module);
		else
			snprintf(line, sizeof(line), "%7.2f %7.2f  %-40s %s", self, tot, shown,
				 rows[i].module);
		if (width > 0 && (size_t)width < sizeof(line))
			line[width] = 0;
		puts(line);
	}
	/* say what was left out, so that a short table is not read as the whole window */
	if (n_all > n)
		printf("... %zu more row%s (-n shows more; -s total, name or process orders "
		       "them)\n",
		       n_all - n, n_all - n == 1 ? "" : "s");
}

static void redraw(struct top *tp, bool final)
{
	uint64_t last = sonde_view_live__last_time(tp->live);
	uint64_t now = tp->ended && last ? last : mono_ns();

	sonde_view_live__expire(tp->live, now);
	if (!tp->screen) {
		draw_table(tp, tp->a.rows ? tp->a.rows : PLAIN_ROWS, 0, final ? "final" : NULL);
		putchar('\n');
		fflush(stdout);
		return;
	}
	struct winsize ws = {.ws_row = 24, .ws_col = 80};
	ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
	fputs("\033[H\033[2J", stdout);
	draw_table(tp, ws.ws_row > 6 ? ws.ws_row - 6 : 1, ws.ws_col,
		   tp->ended ? "recording ended, q to quit" : "q to quit");
	fflush(stdout);
}

/* ---- the loop ---- */

/* The window: the tail's events of the last window_s seconds that --filter-pid, -tid,
 * -comm, -cpu and --time keep (the view copies the filter; --time counts from the
 * recording's start, in its header), weighed by --metric, each frame its outermost
 * function. */
static struct sonde_view_live *live_new(struct top *tp, const struct sonde_spool_header *h)
{
	struct sonde_view_filter f;

	cli_filter_to_view(&tp->a.filt, h->start_monotonic_ns, &f);
	f.pids = &tp->a.pid;
	f.n_pids = tp->a.pid != 0;
	f.tids = &tp->a.tid;
	f.n_tids = tp->a.tid != 0;
	struct sonde_view_source_opts o = {.sz = sizeof(o),
					   .filter = &f,
					   .metric = tp->a.metric,
					   .state_frames = 1,
					   .no_inline = 1};

	return sonde_view_live__new(tp->t, (uint64_t)(tp->a.window_s * 1e9), &o);
}

static int consume(struct top *tp)
{
	struct sonde_tail_batch b = {.sz = sizeof(b)};
	struct sonde_spool_header h;
	int n;

	while ((n = sonde_tail__poll(tp->t, 0, 0, &b)) > 0) {
		tp->seen += b.n_samples;
		tp->intervals += b.n_offcpu + b.n_unknown;
		/* the header is the first record: the window starts with it */
		if (!tp->live && sonde_tail__header(tp->t, &h) == 0 &&
		    !(tp->live = live_new(tp, &h)))
			return -errno;
		int err = tp->live ? sonde_view_live__add(tp->live, &b) : 0;
		if (err)
			return err;
	}
	if (b.ended)
		tp->ended = true;
	return n;
}

/* Waits at most WAIT_MS: for ring data when recording, else for a key. */
static int wait_step(struct top *tp)
{
	if (tp->r && !tp->ended) {
		int err = sonde_recorder__poll(tp->r, WAIT_MS, NULL);
		return err < 0 ? err : 0;
	}
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	poll(&p, tp->keys ? 1 : 0, WAIT_MS);
	return 0;
}

static int top_loop(struct top *tp)
{
	uint64_t delay = (uint64_t)(tp->a.delay_s * 1e9), next = mono_ns() + delay;
	uint64_t end = tp->a.duration_s ? mono_ns() + (uint64_t)(tp->a.duration_s * 1e9) : 0;
	int err = 0;

	while (!stop_signal && !(end && mono_ns() >= end)) {
		if ((err = wait_step(tp)) < 0)
			break;
		if (read_keys(tp))
			break;
		if (!tp->ended && (tp->r || tp->l) && recording_over(tp)) {
			stop_source(tp);
			tp->ended = true;
		}
		if ((err = consume(tp)) < 0)
			break;
		/* Without a terminal to keep showing, the end of the recording ends the view. */
		if (tp->ended && !tp->screen)
			break;
		if (mono_ns() >= next) {
			redraw(tp, false);
			next += delay;
			if (next < mono_ns())
				next = mono_ns() + delay;
		}
	}
	if (err < 0 && tp->a.file) /* the file being followed is what failed: name it */
		cli_spool_error("top", tp->a.file, err, 0);
	else if (err < 0)
		cli_error("top", "%s", last_error[0] ? last_error : sonde_strerror(err));
	return err < 0 ? CLI_FAILURE : CLI_OK;
}

static void handle_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static int cmd_top(int argc, char **argv)
{
	struct top tp = {0};
	int code = parse_args(&tp.a, argc, argv);

	if (code) {
		cli_filter_free(&tp.a.filt);
		return code > 255 ? CLI_OK : code;
	}
	sonde_log__set_callback(log_to_stderr, NULL);
	handle_signals();
	code = open_source(&tp);
	if (!code) {
		screen_enter(&tp);
		bool on_screen = tp.screen;
		code = top_loop(&tp);
		screen_leave(&tp);
		if (!tp.ended)
			stop_source(&tp);
		/* A terminal gets its own screen back; a pipe or file gets the last word. */
		if (!code && !on_screen) {
			consume(&tp);
			redraw(&tp, true);
		}
		/* A file that never got a header is one nothing was recorded into: said as
		 * report and convert say it (a file still being written has one from the
		 * start, as `sonde record` puts it under its name once it runs). */
		struct sonde_spool_header h;
		if (!code && tp.a.file && sonde_tail__header(tp.t, &h) < 0) {
			cli_spool_error("top", tp.a.file, SONDE_E_EMPTY, 0);
			code = CLI_FAILURE;
		}
	}
	if (tp.l)
		fprintf(stderr, "sonde top: the command's output is in %s\n", tp.a.command_output);
	sonde_view_live__free(tp.live);
	cli_filter_free(&tp.a.filt);
	sonde_tail__free(tp.t);
	sonde_recorder__free(tp.r);
	sonde_launch__free(tp.l);
	return code;
}

SONDE_COMMAND("top", "live view of the hottest functions of a running recording", cmd_top)
