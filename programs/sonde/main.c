#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { MAX_COMMANDS = 64 };

static const struct cli_command *commands[MAX_COMMANDS];
static int n_commands;

void cli_register(const struct cli_command *cmd)
{
	if (n_commands < MAX_COMMANDS)
		commands[n_commands++] = cmd;
}

void cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "sonde %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	char shrt[3] = {'-', (char)optopt, 0};
	int len;

	/* a short option in a cluster (-qx) is named by its letter, a long one as typed */
	if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 128)
		arg = shrt;
	len = (int)strcspn(arg, "=");
	if (c == ':')
		cli_error(cmd, "option '%.*s' needs a value (see 'sonde %s --help')", len, arg,
			  cmd);
	else
		cli_error(cmd, "unknown option '%.*s' (see 'sonde %s --help')", len, arg, cmd);
	return CLI_USAGE;
}

const char *cli_input(const char *cmd, const char *opt_i, int argc, char **argv)
{
	int left = argc - optind;

	if (left > 1 || (left == 1 && opt_i)) {
		cli_error(cmd, "one input file at a time (see 'sonde %s --help')", cmd);
		return NULL;
	}
	if (opt_i)
		return opt_i;
	return left == 1 ? argv[optind] : "sonde.spool";
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(const struct cli_command *const *)a)->name,
		      (*(const struct cli_command *const *)b)->name);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: sonde COMMAND [OPTIONS] [ARGS]\n\n"
		   "A CPU stack-sampling profiler and Perfetto-compatible tracing client.\n\n"
		   "commands:\n");
	for (int i = 0; i < n_commands; i++)
		fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
	fprintf(f, "\n'sonde COMMAND --help' (or 'sonde help COMMAND') describes a command's\n"
		   "options; 'sonde --version' prints the version.\n");
}

int main(int argc, char **argv)
{
	qsort(commands, n_commands, sizeof(commands[0]), by_name);
	if (argc < 2) {
		usage(stderr);
		return CLI_USAGE;
	}
	const char *name = argv[1];
	if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
		if (argc > 2 && strcmp(name, "help") == 0) {
			/* `sonde help CMD` is `sonde CMD --help` */
			char *args[] = {argv[2], "--help", NULL};
			for (int i = 0; i < n_commands; i++)
				if (!strcmp(commands[i]->name, argv[2]))
					return commands[i]->run(2, args);
			fprintf(stderr, "sonde: unknown command '%s'\n", argv[2]);
			return CLI_USAGE;
		}
		usage(stdout);
		return CLI_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		printf("sonde %s\n", SONDE_VERSION);
		return CLI_OK;
	}
	for (int i = 0; i < n_commands; i++)
		if (!strcmp(commands[i]->name, name))
			return commands[i]->run(argc - 1, argv + 1);
	fprintf(stderr, "sonde: unknown command '%s' (see 'sonde --help')\n", name);
	return CLI_USAGE;
}
