/* The shared u64 -> u64 hash map: lookups after inserts, replacements and deletions that
 * collide and wrap around the table end, agreement with a brute-force model over random
 * operations, growth, and reservation that really avoids allocation. */
#include <stdlib.h>

#include "../test.h"
#include "base/u64map.h"

/* Keys whose home slot in a table of cap slots is `home`, found by search. */
static size_t keys_with_home(size_t cap, size_t home, uint64_t *out, size_t n, uint64_t from)
{
	size_t got = 0;

	for (uint64_t k = from; got < n; k++)
		if (k && (u64_hash(k) & (cap - 1)) == home)
			out[got++] = k;
	return got;
}

/* Checks that every stored key is reachable from its home without crossing an empty slot
 * (the invariant backward-shift deletion must keep) and that n matches the table. */
static int check_runs(const struct u64map *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].key)
			continue;
		n++;
		for (size_t j = u64_hash(m->slots[i].key) & (m->cap - 1); j != i;
		     j = (j + 1) & (m->cap - 1))
			if (!m->slots[j].key)
				return 0;
	}
	return n == m->n && 2 * m->n <= m->cap;
}

TEST(base_u64map_insert_replace_delete)
{
	struct u64map m = U64MAP_INIT;

	ASSERT(sonde__u64map_get(&m, 5) == NULL);
	ASSERT(sonde__u64map_get(&m, 0) == NULL);
	ASSERT(!sonde__u64map_del(&m, 5));
	ASSERT(!sonde__u64map_del(&m, 0));
	ASSERT_OK(sonde__u64map_put(&m, 5, 50));
	ASSERT_OK(sonde__u64map_put(&m, 0, 7)); /* key 0 is a valid key */
	ASSERT_OK(sonde__u64map_put(&m, UINT64_MAX, 0));
	ASSERT_UINT(u64map_count(&m), ==, 3);
	ASSERT_UINT(*sonde__u64map_get(&m, 5), ==, 50);
	ASSERT_UINT(*sonde__u64map_get(&m, 0), ==, 7);
	ASSERT_UINT(*sonde__u64map_get(&m, UINT64_MAX), ==, 0);
	ASSERT_OK(sonde__u64map_put(&m, 5, 51));
	ASSERT_UINT(u64map_count(&m), ==, 3);
	ASSERT_UINT(*sonde__u64map_get(&m, 5), ==, 51);
	*sonde__u64map_get(&m, 0) = 8;
	ASSERT_UINT(*sonde__u64map_get(&m, 0), ==, 8);
	ASSERT(sonde__u64map_del(&m, 0));
	ASSERT(sonde__u64map_get(&m, 0) == NULL);
	ASSERT(sonde__u64map_del(&m, 5));
	ASSERT(!sonde__u64map_del(&m, 5));
	ASSERT(sonde__u64map_get(&m, 5) == NULL);
	ASSERT_UINT(u64map_count(&m), ==, 1);
	sonde__u64map_clear(&m);
	ASSERT_UINT(u64map_count(&m), ==, 0);
	ASSERT(sonde__u64map_get(&m, UINT64_MAX) == NULL);
	sonde__u64map_free(&m);
	sonde__u64map_free(&m);
	sonde__u64map_free(NULL);
}

TEST(base_u64map_collisions_wrap_around_the_end)
{
	struct u64map m = U64MAP_INIT;
	uint64_t a[3], b[2];

	ASSERT_OK(sonde__u64map_reserve(&m, 8));
	ASSERT_UINT(m.cap, ==, 16);
	/* three keys homed at the last slot spill into slots 0 and 1, then a key homed at
	 * slot 0 must probe past them */
	ASSERT_UINT(keys_with_home(16, 15, a, 3, 1), ==, 3);
	ASSERT_UINT(keys_with_home(16, 0, b, 2, 1), ==, 2);
	for (int i = 0; i < 3; i++)
		ASSERT_OK(sonde__u64map_put(&m, a[i], 100 + i));
	ASSERT_OK(sonde__u64map_put(&m, b[0], 200));
	ASSERT_UINT(m.slots[15].key, ==, a[0]);
	ASSERT_UINT(m.slots[0].key, ==, a[1]);
	ASSERT_UINT(m.slots[1].key, ==, a[2]);
	ASSERT_UINT(m.slots[2].key, ==, b[0]);
	/* deleting the head of the run shifts the wrapped members back across the end */
	ASSERT(sonde__u64map_del(&m, a[0]));
	ASSERT_UINT(m.slots[15].key, ==, a[1]);
	ASSERT_UINT(m.slots[0].key, ==, a[2]);
	ASSERT_UINT(m.slots[1].key, ==, b[0]);
	ASSERT_UINT(m.slots[2].key, ==, 0);
	ASSERT(check_runs(&m));
	/* a key homed at 0 sits at 0 only if its home is not after the hole: b[1] goes in at
	 * slot 2; deleting a[2] at slot 0 must move b[0] into 0 and b[1] into 1 */
	ASSERT_OK(sonde__u64map_put(&m, b[1], 201));
	ASSERT(sonde__u64map_del(&m, a[2]));
	ASSERT_UINT(m.slots[0].key, ==, b[0]);
	ASSERT_UINT(m.slots[1].key, ==, b[1]);
	ASSERT(check_runs(&m));
	ASSERT_UINT(*sonde__u64map_get(&m, a[1]), ==, 101);
	ASSERT_UINT(*sonde__u64map_get(&m, b[0]), ==, 200);
	ASSERT_UINT(*sonde__u64map_get(&m, b[1]), ==, 201);
	ASSERT(sonde__u64map_get(&m, a[0]) == NULL);
	ASSERT(sonde__u64map_get(&m, a[2]) == NULL);
	sonde__u64map_free(&m);
}

TEST(base_u64map_delete_keeps_entries_homed_after_the_hole)
{
	struct u64map m = U64MAP_INIT;
	uint64_t a[2], c[1];

	ASSERT_OK(sonde__u64map_reserve(&m, 8));
	/* slots 3,4 hold keys homed at 3, slot 5 a key homed at 5: deleting slot 3 moves
	 * the second home-3 key back but must leave the home-5 key where it is */
	ASSERT_UINT(keys_with_home(16, 3, a, 2, 1), ==, 2);
	ASSERT_UINT(keys_with_home(16, 5, c, 1, 1), ==, 1);
	ASSERT_OK(sonde__u64map_put(&m, a[0], 1));
	ASSERT_OK(sonde__u64map_put(&m, a[1], 2));
	ASSERT_OK(sonde__u64map_put(&m, c[0], 3));
	ASSERT_UINT(m.slots[5].key, ==, c[0]);
	ASSERT(sonde__u64map_del(&m, a[0]));
	ASSERT_UINT(m.slots[3].key, ==, a[1]);
	ASSERT_UINT(m.slots[4].key, ==, 0);
	ASSERT_UINT(m.slots[5].key, ==, c[0]);
	ASSERT_UINT(*sonde__u64map_get(&m, c[0]), ==, 3);
	sonde__u64map_free(&m);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

enum { MODEL_KEYS = 300 };

TEST(base_u64map_matches_brute_force_model)
{
	/* keys come from a small universe (so puts replace and deletes hit), including 0
	 * and keys chosen to share home slots */
	uint64_t universe[MODEL_KEYS], vals[MODEL_KEYS];
	bool present[MODEL_KEYS] = {0};
	struct u64map m = U64MAP_INIT;
	size_t count = 0;

	universe[0] = 0;
	keys_with_home(64, 63, universe + 1, 40, 1);
	for (size_t i = 41; i < MODEL_KEYS; i++)
		universe[i] = rnd() % 4096 + 1 + (i & 1 ? UINT64_MAX - 5000 : 0);
	for (size_t i = 1; i < MODEL_KEYS; i++) /* keep keys distinct */
		for (size_t j = 0; j < i; j++)
			if (universe[j] == universe[i])
				universe[i] = universe[i - 1] + 7919, j = (size_t)-1;
	for (int op = 0; op < 200000; op++) {
		size_t k = rnd() % (op < 100000 ? MODEL_KEYS : 60);
		unsigned what = rnd() % 3;
		if (what == 0) {
			uint64_t v = rnd();
			ASSERT_OK(sonde__u64map_put(&m, universe[k], v));
			count += !present[k];
			present[k] = true;
			vals[k] = v;
		} else if (what == 1) {
			ASSERT_INT(sonde__u64map_del(&m, universe[k]), ==, present[k]);
			count -= present[k];
			present[k] = false;
		} else {
			uint64_t *v = sonde__u64map_get(&m, universe[k]);
			ASSERT_INT(v != NULL, ==, present[k]);
			if (v)
				ASSERT_UINT(*v, ==, vals[k]);
		}
		ASSERT_UINT(u64map_count(&m), ==, count);
		if (op % 997 == 0) {
			ASSERT(check_runs(&m));
			for (size_t i = 0; i < MODEL_KEYS; i++) {
				uint64_t *v = sonde__u64map_get(&m, universe[i]);
				ASSERT_INT(v != NULL, ==, present[i]);
				if (v)
					ASSERT_UINT(*v, ==, vals[i]);
			}
		}
	}
	sonde__u64map_free(&m);
}

TEST(base_u64map_grows_and_iterates_every_entry_once)
{
	struct u64map m = U64MAP_INIT;
	enum { N = 5000 };
	uint64_t key, val, sum = 0;
	size_t seen = 0;

	for (uint64_t k = 0; k < N; k++) {
		ASSERT_OK(sonde__u64map_put(&m, k << 20, k * 3));
		ASSERT(2 * m.n <= m.cap);
	}
	ASSERT_UINT(u64map_count(&m), ==, N);
	ASSERT_UINT(m.cap, ==, 16384); /* the smallest power of two holding N at half load */
	for (uint64_t k = 0; k < N; k++)
		ASSERT_UINT(*sonde__u64map_get(&m, k << 20), ==, k * 3);
	ASSERT(check_runs(&m));
	for (size_t pos = 0; sonde__u64map_next(&m, &pos, &key, &val);) {
		ASSERT_UINT(val, ==, (key >> 20) * 3);
		ASSERT_UINT(key & 0xfffff, ==, 0);
		sum += key >> 20;
		seen++;
	}
	ASSERT_UINT(seen, ==, N);
	ASSERT_UINT(sum, ==, (uint64_t)N * (N - 1) / 2);
	sonde__u64map_free(&m);
}

TEST(base_u64map_reservation_means_no_allocation)
{
	struct u64map m = U64MAP_INIT;
	const struct u64map_slot *table;
	size_t cap;

	/* every growth allocates a new table before freeing the old one, so an unchanged
	 * slots pointer and capacity mean nothing was allocated */
	ASSERT_OK(sonde__u64map_reserve(&m, 1000));
	table = m.slots;
	cap = m.cap;
	ASSERT_UINT(cap, >=, 2000);
	for (int round = 0; round < 50; round++) {
		for (uint64_t k = 0; k < 1000; k++)
			ASSERT_OK(sonde__u64map_put(&m, k * 0x10001 + (uint64_t)round * 1000, k));
		for (uint64_t k = 0; k < 1000; k++)
			ASSERT_OK(sonde__u64map_put(&m, k * 0x10001 + (uint64_t)round * 1000, k + 1));
		ASSERT_UINT(u64map_count(&m), ==, 1000);
		for (uint64_t k = 0; k < 1000; k++)
			ASSERT(sonde__u64map_del(&m, k * 0x10001 + (uint64_t)round * 1000));
		ASSERT(m.slots == table);
		ASSERT_UINT(m.cap, ==, cap);
	}
	/* reserving less than the capacity changes nothing either */
	ASSERT_OK(sonde__u64map_reserve(&m, 10));
	ASSERT(m.slots == table);
	/* one key past the reservation does grow */
	for (uint64_t k = 1; k <= cap / 2 + 1; k++)
		ASSERT_OK(sonde__u64map_put(&m, k, k));
	ASSERT(m.slots != table);
	ASSERT_UINT(m.cap, ==, cap * 2);
	ASSERT_UINT(*sonde__u64map_get(&m, cap / 2), ==, cap / 2);
	ASSERT_ERR(sonde__u64map_reserve(&m, SIZE_MAX / 2), -ENOMEM);
	sonde__u64map_free(&m);
}

TEST(base_u64map_pointer_values)
{
	struct u64map m = U64MAP_INIT;
	static const char name[] = "x";

	ASSERT(u64map_get_ptr(&m, 42) == NULL);
	ASSERT_OK(u64map_put_ptr(&m, 42, name));
	ASSERT(u64map_get_ptr(&m, 42) == name);
	sonde__u64map_free(&m);
}
