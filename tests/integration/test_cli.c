#include <sonde/spool.h>

#include "../test.h"
#include "../util.h"
#include "../unit/spool_fixture.h"

TEST(cli_help_lists_commands)
{
	struct test_output o;

	test_runf(&o, 10, "%s --help", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde COMMAND");
	test_output_free(&o);
}

TEST(cli_unknown_command_is_usage_error)
{
	struct test_output o;

	test_runf(&o, 10, "%s frobnicate", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_CONTAINS(o.err, "unknown command 'frobnicate'");
	test_output_free(&o);
}

TEST(cli_version)
{
	struct test_output o;

	test_runf(&o, 10, "%s --version", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "sonde ");
	test_output_free(&o);
}

/* The version is the Makefile's, in both programs. */
TEST(cli_version_of_every_program)
{
	struct test_output o;

	test_runf(&o, 10, "%s --version", test_bin("sonde"));
	ASSERT_STR_EQ(o.out, "sonde " SONDE_VERSION "\n");
	test_output_free(&o);
	test_runf(&o, 10, "%s --version", test_bin("sonded"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_STR_EQ(o.out, "sonded " SONDE_VERSION "\n");
	test_output_free(&o);
	test_runf(&o, 10, "%s -V", test_bin("sonded"));
	ASSERT_STR_EQ(o.out, "sonded " SONDE_VERSION "\n");
	test_output_free(&o);
}

TEST(cli_help_command_shows_that_commands_help)
{
	struct test_output o;

	test_runf(&o, 10, "%s help report", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 0);
	ASSERT_CONTAINS(o.out, "usage: sonde report");
	test_output_free(&o);
	test_runf(&o, 10, "%s help frobnicate", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	test_output_free(&o);
}

/* A mistyped option: one line naming it and pointing at --help, exit 2, in every command. */
TEST(cli_mistyped_option_is_one_line_everywhere)
{
	static const char *const cmds[] = {"record", "report", "convert", "top",
					   "trace",  "run",    "probes"};
	struct test_output o;
	char want[256];

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		test_runf(&o, 10, "%s %s --no-such-option x", test_bin("sonde"), cmds[i]);
		ASSERT_INT(o.status, ==, 2);
		snprintf(want, sizeof(want),
			 "sonde %s: unknown option '--no-such-option' (see 'sonde %s --help')\n",
			 cmds[i], cmds[i]);
		ASSERT_STR_EQ(o.err, want);
		test_output_free(&o);
	}
	test_runf(&o, 10, "%s --no-such-option", test_bin("sonded"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonded: unknown option '--no-such-option' (see 'sonded --help')\n");
	test_output_free(&o);
	test_runf(&o, 10, "%s -l", test_bin("sonded"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonded: missing value for option '-l' (see 'sonded --help')\n");
	test_output_free(&o);
}

TEST(cli_run_names_an_unknown_user)
{
	struct test_output o;

	test_runf(&o, 10, "%s run --trace --user no-such-user-sonde -- true", test_bin("sonde"));
	ASSERT_INT(o.status, ==, 2);
	ASSERT_STR_EQ(o.err, "sonde run: --user: no such user 'no-such-user-sonde'\n");
	test_output_free(&o);
}

/* ---- every option of every --help is exercised ----
 *
 * Each row is run (%S: a small spool, %T: the test directory) and must end with its status
 * and, on stderr or stdout, its text. A row exercises the options it names: most go
 * through their parsing to a later check that fails quickly, or run on the small spool.
 * cli_every_help_option_is_exercised reads each program's --help as the bash completion
 * does and fails for an option no row names: a new option needs a row here. */
struct cli_row {
	const char *prog; /* "sonde" or "sonded" */
	const char *args;
	int status;
	const char *text;
};

static const struct cli_row cli_rows[] = {
	{"sonde",
	 "record -F 99 --freq max -c 10 --count 10 --no-inherit -d 1 --duration 1 -o %T/x "
	 "--output %T/x --kernel --buildid-cache %T --no-buildid-cache --stack-size 8 "
	 "--ring-pages 8 -e cpu-clock --event auto -g --call-graph fp -q --quiet",
	 2, "nothing to record"},
	{"sonde", "record -p x", 2, "-p wants a process id"},
	{"sonde", "record --pid 0", 2, "-p wants a process id"},
	{"sonde", "record -a -C 99 -d 0.1 -o %T/a.spool", 1, "CPU 99 is not online"},
	{"sonde", "record --all-cpus --cpu 99 --no-kernel -d 0.1 -o %T/a.spool", 1,
	 "CPU 99 is not online"},
	{"sonde", "record -C 0 -d 0.1 -o %T/a.spool -- true", 2, "add -a"},
	{"sonde", "record --off-cpu --off-cpu-min 2ms -d 5 -o %T/oc.spool -- true", 0, "off-CPU: "},
	{"sonde", "record --off-cpu --off-cpu-min 5x -- true", 2, "--off-cpu-min wants a duration"},
	{"sonde", "record --off-cpu --off-cpu-min -1 -- true", 2, "--off-cpu-min wants a duration"},
	{"sonde", "record --off-cpu-min 1ms -- true", 2, "add --off-cpu"},
	{"sonde", "record --off-cpu --off-cpu-backend kernel -- true", 2,
	 "--off-cpu-backend is bpf or perf, not 'kernel'"},
	{"sonde", "record --off-cpu-backend perf -- true", 2,
	 "--off-cpu-backend chooses how --off-cpu records: add --off-cpu"},
	{"sonde", "record --off-cpu --off-cpu-backend perf -o %T/ocb.spool -- true", 0,
	 "off-CPU backend: perf"},
	{"sonde", "record --off-cpu -e sched:sched_switch -o %T/oc2.spool -- true", 0,
	 "event dummy"},
	{"sonde", "record --off-cpu -e sched:sched_wakeup -o %T/oc3.spool -- true", 1,
	 "off-CPU recording samples sched:sched_switch or a CPU clock"},
	{"sonde", "record --off-cpu -e sched:sched_switch -c 2 -o %T/oc4.spool -- true", 1,
	 "takes every switch: no sample period"},
	{"sonde", "record -t x", 2, "-t wants thread ids separated by commas"},
	{"sonde", "record --tid 1,,2", 2, "-t wants thread ids separated by commas"},
	{"sonde", "record --tid 4194999 -o %T/t.spool", 1, "no such thread: 4194999"},
	{"sonde", "record -t 2 -o %T/t.spool", 1, "tid 2 is a kernel thread (kthreadd)"},
	{"sonde", "record --comm cli -d 0.1 -o %T/a.spool -- true", 2,
	 "--comm filters a system-wide recording: add -a"},
	{"sonde", "record -a --comm 0123456789abcdefg -d 0.1 -o %T/a.spool", 2,
	 "--comm wants a command name of 1 to 15 bytes"},
	{"sonde", "record -a -t 4194999 -d 0.1 -o %T/a.spool", 1, "no such thread: 4194999"},
	{"sonde", "record -h", 0, "usage: sonde record"},
	{"sonde", "record --help", 0, "usage: sonde record"},
	{"sonde",
	 "report -i %S --top 5 --sort total --percent-limit 1 --pid 4242 --tid 4242 --comm "
	 "cli --time 0,10 --lines --no-inline --buildid-cache %T",
	 0, "Top functions by total samples:"},
	{"sonde", "report --input %S --folded --folded-roots process", 0, "cli-4242;"},
	{"sonde", "report --column thread %S", 0, "cli-4242/4242  "},
	{"sonde", "report --diff %S %S", 0, "+0.00%"},
	{"sonde", "report --cpu 0 --sort cpu %S", 0, "0 samples on CPUs 0"},
	{"sonde", "report --sort cpu %S", 0, "[unknown]"},
	{"sonde", "report --cpu 0-x %S", 2, "--cpu wants a CPU list"},
	{"sonde", "report --metric wall %S", 0, "metric wall: "},
	{"sonde", "report --metric off-cpu --folded %S", 0, ""},
	{"sonde", "report --metric cpu %S", 0, "metric cpu: "},
	{"sonde", "report --summary %S", 0, "where the wall-clock time went"},
	{"sonde", "report --metric walls %S", 2, "--metric wants cpu, off-cpu or wall"},
	{"sonde", "report -h", 0, "usage: sonde report"},
	{"sonde", "report --help", 0, "usage: sonde report"},
	{"sonde",
	 "convert -i %S -o %T/c.folded -f folded --no-symbolize --title T --buildid-cache %T", 0,
	 ""},
	{"sonde", "convert --input %S --output %T/c.svg --format svg", 0, ""},
	{"sonde", "convert %S -o %T/c.json --metric wall", 0, ""},
	{"sonde", "convert %S -o %T/c.json --metric x", 2, "--metric wants cpu, off-cpu or wall"},
	{"sonde", "convert --diff %S %S -o %T/d.svg", 0, ""},
	{"sonde", "convert %S -o %T/f.folded --pid 1,2 --tid 3 --comm a,b --cpu 0-1 --time 0,9", 0,
	 ""},
	{"sonde", "convert %S -o %T/f.folded --folded-roots process", 0, ""},
	{"sonde", "convert %S -o %T/f.svg --inverted --hide-idle", 0, ""},
	{"sonde", "convert %S -o %T/f.svg --no-inverted --no-hide-idle", 0, ""},
	{"sonde", "convert %S -o %T/f.folded --pid x", 2, "--pid wants ids separated by commas"},
	{"sonde", "convert %S -o %T/f.folded --time 2,1", 2, "--time wants START,END"},
	{"sonde", "convert %S -o %T/f.folded --cpu z", 2, "--cpu wants a CPU list"},
	{"sonde", "convert -h", 0, "usage: sonde convert"},
	{"sonde", "convert --help", 0, "usage: sonde convert"},
	{"sonde",
	 "top -i %S --duration 1 --interval 0.5 -w 1 --window 2 -F 99 --freq max "
	 "--filter-pid 4242 --filter-tid 4242 --filter-comm split --filter-cpu 0-1 -s total "
	 "--sort self -n 3 --rows 3 --full-names --command-output %T/o",
	 0, "| final"},
	{"sonde", "top --filter-cpu x %S", 2,
	 "--filter-cpu wants a CPU list such as 0,2-3, not 'x'"},
	{"sonde", "top --filter-comm , %S", 2, "--filter-comm wants names separated by commas"},
	{"sonde", "top --input %S", 0, "| final"},
	/* the cli spool's samples are 1 ms apart from its start: 10 in its first 9.5 ms */
	{"sonde", "top -w 3600 --time 0,0.0095 %S", 0,
	 "| 10 samples | final\nfilter: time 0,0.0095 s\n"},
	{"sonde", "top -w 3600 --metric wall %S", 0, "| wall 0.020 s in 20 events | final\n"},
	{"sonde", "top --metric off-cpu %S", 0, "no off-CPU intervals so far"},
	{"sonde", "top --metric x %S", 2, "--metric wants cpu, off-cpu or wall, not 'x'"},
	{"sonde", "top --time 2,1 %S", 2, "--time wants START,END in seconds from the start"},
	{"sonde", "top -d 0 %S", 2, "bad value for -d/--duration: 0"},
	{"sonde", "top -a %S", 2, "give only one of -p PID (or -t TID), -a, -- CMD and FILE"},
	{"sonde", "top --all-cpus -p 1", 2,
	 "give only one of -p PID (or -t TID), -a, -- CMD and FILE"},
	{"sonde", "top -p x", 2, "bad value for -p/--pid: x"},
	{"sonde", "top -t x", 2, "bad value for -t/--tid: x"},
	{"sonde", "top --tid 4194999 -d 1", 1, "no such thread: 4194999"},
	{"sonde", "top --pid 0", 2, "bad value for -p/--pid: 0"},
	{"sonde", "top -h", 0, "usage: sonde top"},
	{"sonde", "top --help", 0, "usage: sonde top"},
	{"sonde", "trace -c %T/none --txt -o %T/t", 1, "cannot read config"},
	{"sonde", "trace --config %T/none --output %T/t", 1, "cannot read config"},
	{"sonde", "trace -c %T/none --txt --config-only -o %T/t", 1, "cannot read config"},
	{"sonde",
	 "trace -d 1s --duration 1s -t 1s --time 1s -b 1mb --buffer 1mb --socket %T/none "
	 "--trust-uid 0 -o %T/t x",
	 1, "no tracing service at"},
	{"sonde", "trace --machine guest --machine host --socket %T/none -o %T/t x", 1,
	 "no tracing service at"},
	{"sonde", "trace --machine guest -c %T/none -o %T/t", 2,
	 "--machine applies to the data sources named on the command line"},
	{"sonde", "trace -q --socket %T/none", 1, "no tracing service at"},
	{"sonde", "trace --query --socket %T/none", 1, "no tracing service at"},
	{"sonde", "trace --trigger x --producer-socket %T/none", 1, "cannot connect"},
	{"sonde", "trace --clone 1 --socket %T/none -o %T/t", 1, "no tracing service at"},
	{"sonde", "trace -h", 0, "usage: sonde trace"},
	{"sonde", "trace --help", 0, "usage: sonde trace"},
	{"sonde",
	 "run --trace --connector %T/none --buffer own --buffer-size 64kb --page-size 4kb -- "
	 "true",
	 1, "cannot reach the connector"},
	{"sonde", "run --trace --user no-such-user-sonde -- true", 2, "no such user"},
	{"sonde", "probes --targets bogus", 2, "--targets takes own, any or none, not 'bogus'"},
	{"sonde", "probes --targets none extra", 2, "unexpected argument 'extra'"},
	{"sonde", "probes -l loud", 2, "unknown log level 'loud'"},
	{"sonde",
	 "probes -s %T/none --socket %T/none --targets any --trust-parent -l warn --log-level warn "
	 "extra",
	 2, "unexpected argument 'extra'"},
	{"sonde", "probes -h", 0, "usage: sonde probes"},
	{"sonde", "probes --help", 0, "usage: sonde probes"},
	{"sonde", "run -h", 0, "usage: sonde run"},
	{"sonde", "run --help", 0, "usage: sonde run"},
	/* sonded parses in order and stops at -V: every option before it is checked */
	{"sonded",
	 "-p %T/p --producer-socket %T/p -c %T/c --consumer-socket %T/c -x none "
	 "--connector-socket none --socket-mode producer:0600 --socket-group consumer:0 "
	 "--set-socket-permissions 0:0660:0:0660 --lockdown --max-sessions 2 "
	 "--max-sessions-per-uid 2 --max-connections 9 --max-connections-per-uid 9 "
	 "--max-buffers 2 --max-session-buffer-kb 1024 --max-buffer-kb-per-uid 1024 "
	 "--max-smb-kb 1024 --max-pending-kb 1024 --remote-handshake-ms 2000 --stall-timeout-ms "
	 "2000 --no-perf --no-probes -b --background -f "
	 "--foreground -l warn --log-level warn --relay-socket 127.0.0.1:1 --machine-name box "
	 "--relay 127.0.0.1:9 -V",
	 0, "sonded " SONDE_VERSION},
	{"sonded", "--version", 0, "sonded " SONDE_VERSION},
	{"sonded", "--max-sessions x", 2, "invalid option value 'x'"},
	{"sonded", "--remote-handshake-ms x", 2, "invalid option value 'x'"},
	{"sonded", "--stall-timeout-ms 0", 2, "invalid option value '0'"},
	{"sonded", "-p %T/p -c %T/c -x none --no-probes --relay-socket %T/r", 1,
	 "not a HOST:PORT, [V6]:PORT or vsock://CID:PORT address"},
	{"sonded", "--relay", 2, "missing value for option '--relay'"},
	{"sonded", "-h", 0, "usage: sonded"},
	{"sonded", "--help", 0, "usage: sonded"},
};

/* A spool of one thread (pid 4242, "cli") with a few raw-address samples. */
static const char *cli_spool(void)
{
	struct sonde_spool_header h = {1700000000000000000ULL, 1000000000, 1000000};
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, &b, &h));
	struct sonde_spool_frame st[] = {{0, 0x1234}, {0, 0x5678}};
	uint32_t th;

	ASSERT_OK(sonde_spool_writer__add_thread(w, h.start_monotonic_ns, 4242, 4242, "cli", &th));
	for (int i = 0; i < 20; i++)
		ASSERT_OK(sonde_spool_writer__add_sample(w, h.start_monotonic_ns + i * 1000000ull,
							 th, st, 2, 0));
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	const char *path = test_path("cli.spool");
	test_write_file(path, b.data, b.len);
	sonde__buf_free(&b);
	return path;
}

/* args with %S and %T replaced. */
static void expand(char *out, size_t cap, const char *args, const char *spool)
{
	size_t n = 0;

	for (const char *p = args; *p && n + 1 < cap; p++) {
		const char *sub = p[0] == '%' && p[1] == 'S'   ? spool
				  : p[0] == '%' && p[1] == 'T' ? test_tmpdir()
							       : NULL;
		if (sub) {
			n += (size_t)snprintf(out + n, cap - n, "%s", sub);
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n < cap ? n : cap - 1] = 0;
}

TEST_TIMEOUT(cli_option_rows_behave, 120)
{
	const char *spool = cli_spool();
	struct test_output o;
	char args[2048];

	for (size_t i = 0; i < sizeof(cli_rows) / sizeof(cli_rows[0]); i++) {
		const struct cli_row *r = &cli_rows[i];
		expand(args, sizeof(args), r->args, spool);
		test_runf(&o, 30, "%s %s", test_bin(r->prog), args);
		if (o.status != r->status || (!strstr(o.out, r->text) && !strstr(o.err, r->text)))
			FAIL("%s %s: exit %d (want %d), wanted '%s' in:\n%s%s", r->prog, r->args,
			     o.status, r->status, r->text, o.out, o.err);
		test_output_free(&o);
	}
}

/* Whether a row of prog (and, for sonde, of command cmd) names option opt. */
static bool row_names(const char *prog, const char *cmd, const char *opt)
{
	for (size_t i = 0; i < sizeof(cli_rows) / sizeof(cli_rows[0]); i++) {
		const struct cli_row *r = &cli_rows[i];
		size_t cl = cmd ? strlen(cmd) : 0;
		if (strcmp(r->prog, prog) ||
		    (cmd && (strncmp(r->args, cmd, cl) || r->args[cl] != ' ')))
			continue;
		for (const char *p = r->args; (p = strstr(p, opt)); p++) {
			bool start = p == r->args || p[-1] == ' ';
			char end = p[strlen(opt)];
			if (start && (end == ' ' || end == 0))
				return true;
		}
	}
	return false;
}

/* The options of a --help text, as dist/sonde.bash-completion reads them. */
static void check_help(const char *prog, const char *cmd)
{
	struct test_output o;
	char missing[2048] = "";

	if (cmd)
		test_runf(&o, 10, "%s %s --help", test_bin(prog), cmd);
	else
		test_runf(&o, 10, "%s --help", test_bin(prog));
	ASSERT_INT(o.status, ==, 0);
	int found = 0;
	for (char *save = NULL, *line = strtok_r(o.out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] != ' ' || line[strspn(line, " ")] != '-')
			continue;
		for (char *s2 = NULL, *w = strtok_r(line, " ", &s2); w && w[0] == '-';
		     w = strtok_r(NULL, " ", &s2)) {
			size_t n = strlen(w);
			if (w[n - 1] == ',')
				w[n - 1] = 0;
			found++;
			if (!row_names(prog, cmd, w) && strlen(missing) + n + 2 < sizeof(missing))
				strcat(strcat(missing, " "), w);
		}
	}
	ASSERT_INT(found, >, 2);
	if (missing[0])
		FAIL("%s %s: options no row exercises:%s", prog, cmd ? cmd : "", missing);
	test_output_free(&o);
}

TEST(cli_every_help_option_is_exercised)
{
	static const char *const cmds[] = {"record", "report", "convert", "top",
					   "trace",  "run",    "probes"};

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		check_help("sonde", cmds[i]);
	check_help("sonded", NULL);
}
