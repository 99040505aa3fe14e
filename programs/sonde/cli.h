/* The sonde command-line tool: one file per subcommand, each registering itself with
 * SONDE_COMMAND so that adding a subcommand touches no other file. */
#ifndef SONDE_CLI_H
#define SONDE_CLI_H

/* SONDE_VERSION comes from the Makefile (SONDE_MAJOR.SONDE_MINOR.SONDE_PATCH). */

struct cli_command {
	const char *name;
	const char *summary; /* one line, shown by `sonde --help` */
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand name; returns exit code */
};

void cli_register(const struct cli_command *cmd);

#define SONDE_COMMAND(cname, csummary, crun)                                                       \
	__attribute__((constructor)) static void cli_register_##crun(void)                        \
	{                                                                                          \
		static const struct cli_command c = {cname, csummary, crun};                       \
		cli_register(&c);                                                                  \
	}

/* Print "sonde CMD: message" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one line for an option getopt_long refused (c is what it returned; opterr must be
 * 0): "sonde CMD: unknown option '--x' (see 'sonde CMD --help')". Returns CLI_USAGE. */
int cli_bad_option(const char *cmd, int c, char **argv);

/* The input file of report, convert and top: -i FILE, else the one argument left at
 * argv[optind], else sonde.spool (as perf's perf.data). NULL, with the message printed,
 * when both or more than one are given. */
const char *cli_input(const char *cmd, const char *opt_i, int argc, char **argv);

/* Exit codes shared by all subcommands. */
enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2 };

#endif
