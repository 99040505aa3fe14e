/* The service loop's timers on a clock the test advances by hand: nothing sleeps, and what
 * fires is decided by the clock alone. Its wait for IO, with its owner's fd watched
 * alongside, on pipes that are ready before each wait. */
#include <sys/epoll.h>
#include <unistd.h>

#include "../test.h"
#include "service/loop.h"

struct fake_clock {
	uint64_t ns;
};

static uint64_t fake_now(void *ctx)
{
	return ((struct fake_clock *)ctx)->ns;
}

struct fired {
	uint64_t args[8];
	size_t n;
};

static void on_io(void *ctx, uint64_t cookie, uint32_t events)
{
}

static void on_timer(void *ctx, uint64_t arg)
{
	struct fired *f = *(struct fired **)ctx;

	ASSERT(f->n < 8);
	f->args[f->n++] = arg;
}

/* Timers fire when the clock reaches their deadline, not a nanosecond before, earliest
 * first; a deleted one never fires; the timeout the loop asks its owner to wait is the
 * clock's distance to the next deadline. */
TEST(loop_timers_follow_an_injected_clock)
{
	struct fake_clock clk = {.ns = 1000000000ull};
	struct fired fired = {0}, *ctx = &fired;
	struct loop l;

	ASSERT_OK(sonde__loop_init(&l, on_io, &ctx));
	sonde__loop_set_clock(&l, fake_now, &clk);
	ASSERT_UINT(sonde__loop_now(&l), ==, 1000000000ull);
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, -1);
	ASSERT(sonde__loop_timer_add(&l, 100, on_timer, 100) != 0);
	ASSERT(sonde__loop_timer_add(&l, 50, on_timer, 50) != 0);
	uint64_t gone = sonde__loop_timer_add(&l, 70, on_timer, 70);
	ASSERT(gone != 0);
	sonde__loop_timer_del(&l, gone);
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, 50);

	ASSERT_INT(sonde__loop_process(&l, 0), ==, 0);
	clk.ns += 50000000ull - 1;
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, 1);
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 0);
	ASSERT_UINT(fired.n, ==, 0);

	clk.ns += 1;
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, 0);
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 1);
	ASSERT_UINT(fired.n, ==, 1);
	ASSERT_UINT(fired.args[0], ==, 50);
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, 50);

	/* a long way past both remaining deadlines: each fires once, the deleted one never */
	clk.ns += 10000000000ull;
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 1);
	ASSERT_UINT(fired.n, ==, 2);
	ASSERT_UINT(fired.args[1], ==, 100);
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, -1);
	sonde__loop_free(&l);
}

/* Without a clock of its own the loop keeps CLOCK_MONOTONIC. */
TEST(loop_clock_defaults_to_monotonic)
{
	struct loop l;
	struct fired fired = {0}, *ctx = &fired;

	ASSERT_OK(sonde__loop_init(&l, on_io, &ctx));
	uint64_t a = sonde__loop_now_ns(), b = sonde__loop_now(&l), c = sonde__loop_now_ns();
	ASSERT_UINT(a, <=, b);
	ASSERT_UINT(b, <=, c);
	sonde__loop_set_clock(&l, NULL, NULL);
	ASSERT_UINT(sonde__loop_now(&l), >=, c);
	sonde__loop_free(&l);
}

/* A timer armed before the clock is given (the service arms its housekeeping when it is
 * created) keeps the time it had left, on the new clock: it neither fires at once nor
 * waits for the new clock to reach a deadline of the old one. */
TEST(loop_set_clock_keeps_the_time_left_of_armed_timers)
{
	struct fake_clock first = {.ns = 7000000000ull}, clk = {.ns = 5000000000ull};
	struct fired fired = {0}, *ctx = &fired;
	struct loop l;

	ASSERT_OK(sonde__loop_init(&l, on_io, &ctx));
	sonde__loop_set_clock(&l, fake_now, &first);
	ASSERT(sonde__loop_timer_add(&l, 60000, on_timer, 1) != 0);
	first.ns += 10000000000ull; /* 10 s of its 60 pass on the first clock */
	sonde__loop_set_clock(&l, fake_now, &clk);
	ASSERT_INT(sonde__loop_timeout_ms(&l), ==, 50000);
	clk.ns += 50000000000ull - 1;
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 0);
	clk.ns += 1;
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 1);
	ASSERT_UINT(fired.n, ==, 1);
	sonde__loop_free(&l);
}

struct seen {
	uint64_t cookies[8];
	size_t n;
};

static void on_io_seen(void *ctx, uint64_t cookie, uint32_t events)
{
	struct seen *s = ctx;

	ASSERT(s->n < 8);
	s->cookies[s->n++] = cookie;
}

/* The owner's fd (sonded's signalfd) is waited for in the loop's own epoll_wait, so that
 * a wakeup needs no poll of the owner's around it: when it is readable the wait ends and
 * watch_ready says so, and it never reaches the service's dispatch, alone or beside a
 * service fd ready in the same wakeup. The loop does not read it: left unread, it is
 * reported again. Nothing here waits: each wait has something ready or due. */
TEST(loop_watched_fd_ends_the_wait_and_is_reported_not_dispatched)
{
	struct fake_clock clk = {.ns = 1000000000ull};
	struct seen seen = {0};
	int svc_fd[2], own[2];
	struct loop l;
	char c;

	ASSERT_OK(pipe(svc_fd));
	ASSERT_OK(pipe(own));
	ASSERT_OK(sonde__loop_init(&l, on_io_seen, &seen));
	sonde__loop_set_clock(&l, fake_now, &clk);
	ASSERT_OK(sonde__loop_add(&l, svc_fd[0], EPOLLIN, 7));
	ASSERT_OK(sonde__loop_watch(&l, own[0]));

	ASSERT_INT(write(own[1], "s", 1), ==, 1);
	ASSERT_INT(sonde__loop_process(&l, -1), ==, 1);
	ASSERT(l.watch_ready);
	ASSERT_UINT(seen.n, ==, 0);
	ASSERT_INT(sonde__loop_process(&l, -1), ==, 1);
	ASSERT(l.watch_ready);

	ASSERT_INT(write(svc_fd[1], "x", 1), ==, 1);
	ASSERT_INT(sonde__loop_process(&l, -1), ==, 2);
	ASSERT(l.watch_ready);
	ASSERT_UINT(seen.n, ==, 1);
	ASSERT_UINT(seen.cookies[0], ==, 7);

	ASSERT_INT(read(own[0], &c, 1), ==, 1);
	ASSERT_INT(sonde__loop_process(&l, -1), ==, 1);
	ASSERT(!l.watch_ready);
	ASSERT_UINT(seen.n, ==, 2);
	ASSERT_UINT(seen.cookies[1], ==, 7);
	ASSERT_INT(read(svc_fd[0], &c, 1), ==, 1);
	ASSERT_INT(sonde__loop_process(&l, 0), ==, 0);
	ASSERT(!l.watch_ready);

	sonde__loop_free(&l);
	close(svc_fd[0]);
	close(svc_fd[1]);
	close(own[0]);
	close(own[1]);
}

/* A wait with no bound of the caller's ends at the next timer, by the loop's clock: a
 * timer already due runs at once instead of the loop waiting for IO. */
TEST(loop_unbounded_wait_ends_at_a_due_timer)
{
	struct fake_clock clk = {.ns = 1000000000ull};
	struct fired fired = {0}, *ctx = &fired;
	int own[2];
	struct loop l;

	ASSERT_OK(pipe(own));
	ASSERT_OK(sonde__loop_init(&l, on_io, &ctx));
	sonde__loop_set_clock(&l, fake_now, &clk);
	ASSERT_OK(sonde__loop_watch(&l, own[0]));
	ASSERT(sonde__loop_timer_add(&l, 30000, on_timer, 3) != 0);
	clk.ns += 30000000000ull;
	ASSERT_INT(sonde__loop_process(&l, -1), ==, 1);
	ASSERT_UINT(fired.n, ==, 1);
	ASSERT_UINT(fired.args[0], ==, 3);
	ASSERT(!l.watch_ready);
	sonde__loop_free(&l);
	close(own[0]);
	close(own[1]);
}
