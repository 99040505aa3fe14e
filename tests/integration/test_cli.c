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
