#include "../test.h"
#include "../util.h"

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
	static const char *const cmds[] = {"record", "report", "convert", "top", "trace", "run"};
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
