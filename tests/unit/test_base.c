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
