/* The sonde command-line tool: one file per subcommand, each registering itself with
 * SONDE_COMMAND so that adding a subcommand touches no other file. */
#ifndef SONDE_CLI_H
#define SONDE_CLI_H

#define SONDE_VERSION "0.1.0"

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

/* Exit codes shared by all subcommands. */
enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2 };

#endif
