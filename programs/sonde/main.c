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
	fprintf(f, "\n'sonde COMMAND --help' describes a command's options.\n");
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
