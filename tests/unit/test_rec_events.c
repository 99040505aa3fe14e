/* The events part's stale-record rule (sonde__rec_is_stale, src/record/resize.c), which the
 * stream applies before it copies a record: while a generation switch overlaps two
 * generations of a thread's events, the older one covers the time before the cut and the
 * newer one the time from it; an abandoned switch's records are all dropped. Decided from
 * the record's id alone, on a recorder state built by hand. */
#include <stdlib.h>

#include <linux/perf_event.h>

#include "../test.h"
#include "record/recorder.h"

enum { CUT = 1000000 };

/* Ids 10 (generation 1), 20 (generation 2) and 30 (an abandoned generation 3). */
static struct sonde_recorder *two_generations(void)
{
	struct sonde_recorder *r = ASSERT_NOT_NULL(calloc(1, sizeof(*r)));
	static struct rec_event_id ids[] = {
		{.id = 10, .tid = 7, .gen = 1},
		{.id = 20, .tid = 7, .gen = 2},
		{.id = 30, .tid = 7, .gen = 3, .dead = true},
	};

	r->ev.ids = ids;
	r->ev.n_ids = 3;
	r->ev.gen = 2;
	r->ev.gen_cut = CUT;
	r->ev.any_dead = true;
	return r;
}

static struct perf_rec rec_of(uint32_t type, uint64_t id, uint64_t time)
{
	return (struct perf_rec){.type = type, .has_id = true, .id = id, .time = time};
}

TEST(record_events_stale_generation_by_the_cut)
{
	struct sonde_recorder *r = two_generations();
	struct perf_rec rec;

	/* the old generation up to the cut, the new one from it */
	rec = rec_of(PERF_RECORD_SAMPLE, 10, CUT - 1);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_SAMPLE, 10, CUT);
	ASSERT(sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_SAMPLE, 20, CUT - 1);
	ASSERT(sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_SAMPLE, 20, CUT);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	/* side band is of the same events: the same rule */
	rec = rec_of(PERF_RECORD_MMAP2, 10, CUT + 5);
	ASSERT(sonde__rec_is_stale(r, &rec));
	/* an abandoned switch: whatever the time */
	rec = rec_of(PERF_RECORD_SAMPLE, 30, CUT - 1);
	ASSERT(sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_SAMPLE, 30, CUT + 1);
	ASSERT(sonde__rec_is_stale(r, &rec));
	/* what the rule cannot judge is kept: an unknown id, no id, a loss report */
	rec = rec_of(PERF_RECORD_SAMPLE, 40, CUT);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_SAMPLE, 10, CUT);
	rec.has_id = false;
	ASSERT(!sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_LOST, 10, CUT);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	rec = rec_of(PERF_RECORD_LOST_SAMPLES, 30, CUT);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	/* the stale ones are duplicates when processed too */
	rec = rec_of(PERF_RECORD_SAMPLE, 20, CUT - 1);
	ASSERT(sonde__rec_is_duplicate(r, &rec));
	free(r);
}

TEST(record_events_nothing_stale_without_a_switch)
{
	struct sonde_recorder *r = two_generations();
	struct perf_rec rec = rec_of(PERF_RECORD_SAMPLE, 20, CUT - 1);

	/* system-wide events are never switched */
	r->system_wide = true;
	ASSERT(!sonde__rec_is_stale(r, &rec));
	r->system_wide = false;
	ASSERT(sonde__rec_is_stale(r, &rec));
	/* the first generation, no switch abandoned: nothing can be stale */
	r->ev.gen = 1;
	r->ev.any_dead = false;
	rec = rec_of(PERF_RECORD_SAMPLE, 30, CUT);
	ASSERT(!sonde__rec_is_stale(r, &rec));
	/* an abandoned first switch: its records are */
	r->ev.any_dead = true;
	ASSERT(sonde__rec_is_stale(r, &rec));
	free(r);
}

static uint64_t fake_now(void *ctx)
{
	return *(const uint64_t *)ctx;
}

/* A poll waits at most 20 ms while a cut stack waits for a switch and, within a second of
 * the start or of the last switch, while a thread copies more than 8 KiB (its first size,
 * what a grown copy tells); else what the caller asked. */
TEST(record_events_poll_wait_short_while_sizes_settle)
{
	struct sonde_recorder *r = ASSERT_NOT_NULL(calloc(1, sizeof(*r)));
	uint64_t now = 5000000000ull;

	sonde__rec_set_clock(r, fake_now, &now);
	r->ev.adaptive = true;
	r->ev.gen = 1;
	r->cfg.stack_bytes = 32768;
	r->start_mono = now;
	/* no thread yet: nothing to size */
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	struct rec_thread *t = ASSERT_NOT_NULL(sonde__tasks_thread(&r->tasks, 7, true));
	/* at the starting copy */
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 20);
	ASSERT_INT(sonde__rec_regen_wait_ms(r, -1), ==, 20);
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 0), ==, 0);
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 5), ==, 5);
	now += 999000000ull;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 20);
	now += 1000000ull;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	ASSERT_INT(sonde__rec_regen_wait_ms(r, -1), ==, -1);
	/* a cut stack waits for its switch, whenever */
	r->ev.regen_grow = true;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 20);
	r->ev.regen_grow = false;
	/* a switch to the largest copy: judged anew for a second */
	r->ev.gen = 2;
	t->copy_bytes = 65528;
	r->ev.last_regen = now - 500000000ull;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 20);
	/* 8 KiB or less: as the caller asked */
	t->copy_bytes = 8192;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	t->copy_bytes = 65528;
	r->ev.last_regen = now - 1000000000ull;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	/* fixed copies (--stack-size) and system-wide recordings do not switch for sizes */
	r->ev.last_regen = now;
	r->ev.adaptive = false;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	r->ev.adaptive = true;
	r->system_wide = true;
	ASSERT_INT(sonde__rec_regen_wait_ms(r, 100), ==, 100);
	sonde__tasks_free(&r->tasks);
	free(r);
}
