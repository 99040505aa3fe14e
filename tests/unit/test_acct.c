/* The accounting tables (src/export/acct.c) of spools written by hand: tasks whose pid
 * and tid the kernel gave again. Times in ms after the recording's start. */
#include <stdint.h>

#include <sonde/spool.h>
#include <sonde/spool_reader.h>

#include "../test.h"
#include "base/buf.h"
#include "export/acct.h"
#include "spool_fixture.h"

enum { MS = 1000000 };
static const uint64_t S0 = 1000000000;

static struct sonde_spool_writer *writer(struct buf *b)
{
	static const struct sonde_spool_header h = {1700000000000000000ULL, S0, MS};
	struct sonde_spool_writer *w =
		ASSERT_NOT_NULL(sonde_spool_writer__new(spool_fixture_write, b, &h));

	ASSERT_OK(sonde_spool_writer__declare_offcpu(w));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, NULL, 0));
	ASSERT_OK(sonde_spool_writer__add_switches(w, 1, 0, NULL, 0));
	return w;
}

static struct sonde_spool *finish(struct sonde_spool_writer *w, struct buf *b)
{
	ASSERT_OK(sonde_spool_writer__finish(w));
	sonde_spool_writer__free(w);
	return ASSERT_NOT_NULL(sonde_spool__open_mem(b->data, b->len, NULL));
}

/* A task whose exit record went unseen (a loss) ends at its last switch-out, the one the
 * kernel reports an exited task's state in: a thread defined with its pid and tid after
 * that is another task. Q (70) runs 10..20 and leaves dead; a new Q is defined at 50 and
 * runs 50..80. Taken for one, the second's stays were nobody's. */
TEST(acct_an_exit_seen_in_the_switches_ends_the_task)
{
	struct buf b = BUF_INIT;
	struct sonde_spool_writer *w = writer(&b);
	uint32_t first, second;

	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 10 * MS, 70, 70, "true", &first));
	ASSERT_OK(sonde_spool_writer__add_thread(w, S0 + 50 * MS, 70, 70, "true", &second));
	const struct sonde_spool_switch cpu0[] = {
		{S0 + 10 * MS, 0, 70, SONDE_OFFCPU_RUNNABLE},
		{S0 + 20 * MS, 70, 0, SONDE_SWITCH_EXITED},
		{S0 + 50 * MS, 0, 70, SONDE_OFFCPU_RUNNABLE},
		{S0 + 80 * MS, 70, 0, SONDE_SWITCH_EXITED},
	};
	ASSERT_OK(sonde_spool_writer__add_switches(w, 0, 0, cpu0, 4));
	struct sonde_spool *s = finish(w, &b);

	struct sonde_acct a;
	ASSERT_OK(sonde__acct_build(s, NULL, &a));
	ASSERT_UINT(a.n_tasks, ==, 2);
	ASSERT(a.thread_task[first] != a.thread_task[second]);
	const struct sonde_acct_task *k = &a.tasks[a.thread_task[first] - 1];
	ASSERT(k->exited);
	ASSERT_UINT(k->start_ns, ==, S0 + 10 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 20 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 10 * MS);
	k = &a.tasks[a.thread_task[second] - 1];
	ASSERT(k->exited);
	ASSERT_UINT(k->start_ns, ==, S0 + 50 * MS);
	ASSERT_UINT(k->end_ns, ==, S0 + 80 * MS);
	ASSERT_UINT(k->ns[SONDE_ACCT_ON], ==, 30 * MS);
	for (size_t i = 0; i < a.n_tasks; i++) {
		ASSERT_UINT(a.tasks[i].unseen_ns, ==, 0);
		ASSERT_UINT(a.tasks[i].over_ns, ==, 0);
	}
	sonde__acct_free(&a);
	sonde_spool__close(s);
	sonde__buf_free(&b);
}
