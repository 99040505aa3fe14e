/* The service's producer id allocator (src/service/producer.c) at its wrap. */
#include <stdbool.h>
#include <stdint.h>

#include "../test.h"
#include "service/internal.h"

/* Ids 1, 2, 3 and UINT32_MAX are live; the counter is about to wrap. */
static bool live(void *ctx, uint32_t id)
{
	(*(int *)ctx)++;
	return id == 1 || id == 2 || id == 3 || id == UINT32_MAX;
}

TEST(producer_ids_wrap_without_reusing_a_live_id)
{
	uint32_t next = UINT32_MAX - 1;
	int calls = 0;

	ASSERT_UINT(sonde__producer_id_next(&next, live, &calls), ==, UINT32_MAX - 1);
	/* UINT32_MAX is live, 0 is never an id, 1..3 are live */
	ASSERT_UINT(sonde__producer_id_next(&next, live, &calls), ==, 4);
	ASSERT_UINT(sonde__producer_id_next(&next, live, &calls), ==, 5);
	ASSERT_INT(calls, ==, 1 + 5 + 1);
}
