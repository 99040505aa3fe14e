#include <sonde/log.h>

#include "../test.h"

TEST(strerror_covers_project_and_system_errors)
{
	ASSERT_STR_EQ(sonde_strerror(-SONDE_E_TRUNCATED), "data ends inside a record");
	ASSERT_STR_EQ(sonde_strerror(SONDE_E_TRUNCATED), "data ends inside a record");
	ASSERT_STR_EQ(sonde_strerror(-ENOENT), strerror(ENOENT));
	for (int e = SONDE_E_BASE; e < SONDE_E_END; e++)
		ASSERT(sonde_strerror(-e)[0] != 0);
}

static char last_msg[256];
static enum sonde_log_level last_level;

static void capture_log(enum sonde_log_level level, const char *msg, void *ctx)
{
	last_level = level;
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
	(*(int *)ctx)++;
}

TEST(log_filters_by_level_and_reaches_callback)
{
	int calls = 0;
	enum sonde_log_level lvl;

	sonde_log__set_callback(capture_log, &calls);
	sonde_log__set_level(SONDE_LOG_WARN);
	sonde_info("hidden %d", 1);
	ASSERT_INT(calls, ==, 0);
	sonde_warn("shown %d", 2);
	ASSERT_INT(calls, ==, 1);
	ASSERT_STR_EQ(last_msg, "shown 2");
	ASSERT_INT(last_level, ==, SONDE_LOG_WARN);
	ASSERT_OK(sonde_log__parse_level("debug", &lvl));
	ASSERT_INT(lvl, ==, SONDE_LOG_DEBUG);
	ASSERT_ERR(sonde_log__parse_level("loud", &lvl), -EINVAL);
	sonde_log__set_callback(NULL, NULL);
}

/* A log message is one line whatever its arguments hold (a peer's name, a path): a
 * control character but a tab is a '?', so a producer named "x\nsonde: error: ..." writes
 * no line of its own into the service's log, and no escape sequence reaches a terminal. */
TEST(log_message_is_one_line_whatever_its_arguments)
{
	int calls = 0;

	sonde_log__set_callback(capture_log, &calls);
	sonde_log__set_level(SONDE_LOG_WARN);
	sonde_warn("producer \"%s\"", "x\nsonde: error: forged\x1b[2J\tend");
	sonde_log__set_callback(NULL, NULL);
	ASSERT_INT(calls, ==, 1);
	ASSERT_STR_EQ(last_msg, "producer \"x?sonde: error: forged?[2J\tend\"");
}
