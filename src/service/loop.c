#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "service/loop.h"

uint64_t sonde__loop_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sonde__loop_set_clock(struct loop *l, loop_clock_fn now_ns, void *clock_ctx)
{
	uint64_t before = sonde__loop_now(l), after;

	l->clock = now_ns;
	l->clock_ctx = clock_ctx;
	/* timers already armed (the service's housekeeping, from its creation) keep the time
	 * they had left, counted on the new clock */
	after = sonde__loop_now(l);
	for (size_t i = 0; i < l->ntimers; i++) {
		uint64_t left = l->timers[i].when_ns > before ? l->timers[i].when_ns - before : 0;
		l->timers[i].when_ns = after + left;
	}
}

uint64_t sonde__loop_now(const struct loop *l)
{
	return l->clock ? l->clock(l->clock_ctx) : sonde__loop_now_ns();
}

int sonde__loop_init(struct loop *l, loop_io_fn io_fn, void *ctx)
{
	memset(l, 0, sizeof(*l));
	l->io_fn = io_fn;
	l->ctx = ctx;
	l->next_id = 1;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	return l->epfd < 0 ? -errno : 0;
}

void sonde__loop_free(struct loop *l)
{
	if (l->epfd >= 0)
		close(l->epfd);
	l->epfd = -1;
	sonde__free(l->timers);
	l->timers = NULL;
	l->ntimers = l->cap = 0;
}

static int ctl(struct loop *l, int op, int fd, uint32_t events, uint64_t cookie)
{
	struct epoll_event ev = {.events = events, .data.u64 = cookie};

	return epoll_ctl(l->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

int sonde__loop_add(struct loop *l, int fd, uint32_t events, uint64_t cookie)
{
	return ctl(l, EPOLL_CTL_ADD, fd, events, cookie);
}

int sonde__loop_mod(struct loop *l, int fd, uint32_t events, uint64_t cookie)
{
	return ctl(l, EPOLL_CTL_MOD, fd, events, cookie);
}

void sonde__loop_del(struct loop *l, int fd)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
}

uint64_t sonde__loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, uint64_t arg)
{
	if (l->ntimers == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct loop_timer *t = sonde__realloc(l->timers, cap * sizeof(*t));
		if (!t)
			return 0;
		l->timers = t;
		l->cap = cap;
	}
	l->timers[l->ntimers++] = (struct loop_timer){
		.id = l->next_id, .when_ns = sonde__loop_now(l) + ms * 1000000ull, .arg = arg, .fn = fn};
	return l->next_id++;
}

void sonde__loop_timer_del(struct loop *l, uint64_t id)
{
	for (size_t i = 0; i < l->ntimers; i++) {
		if (l->timers[i].id == id) {
			l->timers[i] = l->timers[--l->ntimers];
			return;
		}
	}
}

int sonde__loop_timeout_ms(const struct loop *l)
{
	uint64_t now = sonde__loop_now(l), best = UINT64_MAX;

	for (size_t i = 0; i < l->ntimers; i++)
		if (l->timers[i].when_ns < best)
			best = l->timers[i].when_ns;
	if (best == UINT64_MAX)
		return -1;
	if (best <= now)
		return 0;
	return (int)((best - now + 999999) / 1000000);
}

/* Runs due timers one at a time, earliest first; a callback may add or delete timers. */
static int run_timers(struct loop *l)
{
	uint64_t now = sonde__loop_now(l);
	int n = 0;

	for (;;) {
		size_t best = l->ntimers;
		for (size_t i = 0; i < l->ntimers; i++)
			if (l->timers[i].when_ns <= now &&
			    (best == l->ntimers || l->timers[i].when_ns < l->timers[best].when_ns))
				best = i;
		if (best == l->ntimers)
			return n;
		struct loop_timer t = l->timers[best];
		l->timers[best] = l->timers[--l->ntimers];
		t.fn(l->ctx, t.arg);
		n++;
	}
}

int sonde__loop_watch(struct loop *l, int fd)
{
	return sonde__loop_add(l, fd, EPOLLIN, LOOP_COOKIE_WATCH);
}

int sonde__loop_process(struct loop *l, int wait_ms)
{
	struct epoll_event ev[64];
	int t = sonde__loop_timeout_ms(l), n;

	l->watch_ready = false;
	if (t >= 0 && (wait_ms < 0 || t < wait_ms))
		wait_ms = t;
	n = epoll_wait(l->epfd, ev, 64, wait_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == LOOP_COOKIE_WATCH)
			l->watch_ready = true;
		else
			l->io_fn(l->ctx, ev[i].data.u64, ev[i].events);
	}
	return n + run_timers(l);
}
