/* A small epoll loop with one-shot timers (in the manner of redis' ae). Internal to the
 * service: the service registers its sockets and timers here, and the program that owns
 * the owner of the real event loop either waits in sonde__loop_process() itself (one
 * epoll_wait per wakeup, with the caller's own fd watched alongside) or polls loop.epfd and
 * calls sonde__loop_process(l, 0) when it is readable or the next timer is due.
 *
 * IO registrations carry a 64-bit cookie, not a pointer, so an event for an object freed
 * earlier in the same batch resolves to nothing instead of to freed memory. Timers call
 * back with (ctx, arg) and are removed before they run.
 *
 * Time is the loop's clock: CLOCK_MONOTONIC unless sonde__loop_set_clock() gave it another
 * (as Perfetto's service takes its clock), so that a test drives timers by advancing a
 * clock of its own and calling sonde__loop_process(l, 0), without sleeping.
 */
#ifndef SONDE_SERVICE_LOOP_H
#define SONDE_SERVICE_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*loop_io_fn)(void *ctx, uint64_t cookie, uint32_t events);
typedef void (*loop_timer_fn)(void *ctx, uint64_t arg);

struct loop_timer {
	uint64_t id, when_ns, arg;
	loop_timer_fn fn;
};

typedef uint64_t (*loop_clock_fn)(void *clock_ctx);

struct loop {
	int epfd;
	loop_io_fn io_fn;
	void *ctx;
	loop_clock_fn clock; /* NULL: CLOCK_MONOTONIC */
	void *clock_ctx;
	struct loop_timer *timers;
	size_t ntimers, cap;
	uint64_t next_id;
	bool watch_ready; /* the watched fd was readable at the last sonde__loop_process */
};

/* The cookie of the loop owner's watched fd; never dispatched to io_fn. */
#define LOOP_COOKIE_WATCH UINT64_MAX

int sonde__loop_init(struct loop *l, loop_io_fn io_fn, void *ctx);
void sonde__loop_free(struct loop *l);
int sonde__loop_add(struct loop *l, int fd, uint32_t events, uint64_t cookie);
int sonde__loop_mod(struct loop *l, int fd, uint32_t events, uint64_t cookie);
void sonde__loop_del(struct loop *l, int fd);
/* Returns the timer id (never 0), or 0 on allocation failure. */
uint64_t sonde__loop_timer_add(struct loop *l, uint64_t ms, loop_timer_fn fn, uint64_t arg);
void sonde__loop_timer_del(struct loop *l, uint64_t id);
/* Milliseconds until the next timer (0 if due), or -1 when there is none. */
int sonde__loop_timeout_ms(const struct loop *l);
/* Dispatches ready IO (waiting at most wait_ms, -1: until an fd is ready or the next
 * timer is due) and then due timers: one epoll_wait. Returns events handled (the watched
 * fd's included) or -errno; watch_ready tells whether the watched fd was among them. */
int sonde__loop_process(struct loop *l, int wait_ms);
/* Adds fd, the loop owner's (a signalfd, say), to what sonde__loop_process waits for, so
 * that the owner needs no wait of its own around it. The loop never reads or closes it; a
 * readable fd sets watch_ready instead of reaching io_fn. 0 or -errno. */
int sonde__loop_watch(struct loop *l, int fd);
uint64_t sonde__loop_now_ns(void);
/* The loop's clock: now_ns(clock_ctx) gives nanoseconds that never go back; NULL restores
 * CLOCK_MONOTONIC. Timers already armed keep the time they had left, on the new clock. */
void sonde__loop_set_clock(struct loop *l, loop_clock_fn now_ns, void *clock_ctx);
/* Now, by the loop's clock. */
uint64_t sonde__loop_now(const struct loop *l);

#endif
