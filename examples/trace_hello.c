/* trace_hello: a minimal producer for sonded (or traced) using the sonde client library.
 *
 *   trace_hello [DATA_SOURCE [COUNT [TEXT]]]
 *
 * Registers DATA_SOURCE (default "sonde.hello") and, when a session starts it, writes
 * COUNT (default 10) packets whose for_testing payload is "TEXT i" (default "hello"),
 * commits them, and exits once the session stops it. It connects wherever the library
 * finds the service: the socket inherited from `sonde run --trace` ($SONDE_PRODUCER_FD),
 * else $PERFETTO_PRODUCER_SOCK_NAME, else the default path. If the service goes away (a
 * restart), it connects again with a backoff (100 ms doubling to 5 s), registers
 * DATA_SOURCE again and waits for the next session.
 *
 * Exit status: 0 after a stop, 1 if it cannot connect, 2 if never started within 30 s
 * (of starting, or of losing the service). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sonde/client.h>

enum { FOR_TESTING = 900, TEST_STR = 1 };

struct hello {
	struct sonde_producer *p;
	struct sonde_trace_writer *w;
	uint64_t inst;
	const char *text;
	int count;
	bool started, stopped;
	double deadline;
};

static double now(void);

static void on_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct hello *h = ctx;
	char s[256];

	(void)cfg;
	(void)len;
	if (h->started)
		return;
	h->started = true;
	h->inst = id;
	if (!(h->w = sonde_producer__new_writer(h->p, id)))
		return;
	for (int i = 0; i < h->count; i++) {
		snprintf(s, sizeof(s), "%s %d", h->text, i);
		sonde_trace_writer__begin_packet(h->w);
		sonde_trace_writer__begin_nested(h->w, FOR_TESTING);
		sonde_trace_writer__append_bytes(h->w, TEST_STR, s, strlen(s));
		sonde_trace_writer__end_nested(h->w);
		sonde_trace_writer__end_packet(h->w);
	}
	sonde_trace_writer__flush(h->w);
}

static void on_stop(void *ctx, uint64_t id)
{
	struct hello *h = ctx;

	if (id != h->inst)
		return;
	sonde_trace_writer__free(h->w);
	h->w = NULL;
	if (sonde_producer__connected(h->p)) {
		h->stopped = true; /* the session ended */
		return;
	}
	/* the service went away: the next session (after a reconnection) starts afresh */
	h->started = false;
	h->deadline = now() + 30;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct hello h = {.text = argc > 3 ? argv[3] : "hello",
			  .count = argc > 2 ? atoi(argv[2]) : 10};
	struct sonde_producer_opts po = {.sz = sizeof(po), .name = "trace_hello", .reconnect = true};
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = on_start,
					    .stop = on_stop,
					    .ctx = &h,
					    .will_notify_on_stop = true};
	const char *ds = argc > 1 ? argv[1] : "sonde.hello";

	h.deadline = now() + 30;

	if (!(h.p = sonde_producer__new(&po))) {
		fprintf(stderr, "trace_hello: cannot connect to %s: %s\n",
			sonde_producer__socket_path(&po), strerror(errno));
		return 1;
	}
	if (sonde_producer__register_data_source(h.p, ds, &cbs) < 0) {
		sonde_producer__free(h.p);
		return 1;
	}
	while (!h.stopped && (h.started || now() < h.deadline))
		if (sonde_producer__poll(h.p, 100) < 0)
			break; /* the service went away */
	/* let the stop acknowledgement go out */
	for (double end = now() + 0.2; now() < end;)
		sonde_producer__poll(h.p, 50);
	sonde_trace_writer__free(h.w);
	sonde_producer__free(h.p);
	return h.started ? 0 : 2;
}
