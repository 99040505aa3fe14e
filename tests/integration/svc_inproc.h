/* The service in the test's own process, on a clock the test advances: no sonded, no
 * sleeping. The service is sonde_service__new's, its loop given a fake clock; producers
 * and consumers are the raw-frame clients of svc_util.h over socketpairs the service
 * adopts as if it had accepted them. While a harness is up, every wait of svc_util.h
 * (tc_wait, tprod_cmd, tprod_expect, tc_ok, ...) runs the service until it is idle instead
 * of waiting: a reply that has not come then will not come until something else happens,
 * such as the clock moving (inproc_advance). */
#ifndef SONDE_TEST_SVC_INPROC_H
#define SONDE_TEST_SVC_INPROC_H

#include <stdbool.h>
#include <stdint.h>

#include "svc_util.h"

struct sonde_service;
struct sonde_service_opts;

struct inproc {
	struct sonde_service *svc;
	uint64_t now_ns; /* the service's clock */
	unsigned rounds; /* sonde_service__process calls so far */
	/* inproc_advance does not wait for the file writers first: one is meant to block */
	bool writer_blocks;
};

/* A service listening on sockets in the test's tmpdir (for the few tests that also connect
 * through them), connector disabled, its clock at an arbitrary start. */
void inproc_up(struct inproc *h);
/* The same with options (o->sz set); the tmpdir sockets replace NULL socket names. */
void inproc_up_opts(struct inproc *h, const struct sonde_service_opts *o);
void inproc_down(struct inproc *h);
/* The names of h's producer and consumer sockets in d (its pid 0), for the tests that
 * connect through them: to be accepted (connection limits) or as another uid
 * (sec_connect_as). svc_util's clients connect there as to sonded's. */
void inproc_sockets(const struct inproc *h, struct sonded *d);
/* A producer named name (svc_util's tprod_open) and a consumer (tc_open on ConsumerPort),
 * each over a socketpair the service adopts. */
void inproc_producer(struct inproc *h, struct tprod *p, const char *name, bool scraping);
void inproc_consumer(struct inproc *h, struct tc *c);
/* The same, the service's end of the socketpair given the smallest send buffer the kernel
 * allows (a few KB): what the service sends beyond it stays unsent in its own queue. */
void inproc_consumer_small_sndbuf(struct inproc *h, struct tc *c);
/* A socketpair whose one end the service adopts as a producer (or consumer) connection;
 * returns the other, the test's, for tc_open_fd or raw frames. */
int inproc_adopt(struct inproc *h, bool producer);
/* Runs the service until it has nothing ready and no timer due; returns whether it did
 * anything. */
bool inproc_run(struct inproc *h);
/* Waits up to timeout_ms of real time for the service's own threads (the file writer) to
 * wake its loop, then runs it; returns whether it was woken. The clock does not move. */
bool inproc_wait_thread(struct inproc *h, int timeout_ms);
/* The reply to req on c once the file writer's thread let the session end: runs the
 * service at each wake-up of the thread, its clock moving 20 ms (the period at which it
 * looks at its writer's progress) after each 100 ms of real time without one, up to
 * timeout_s in all; NULL without it. */
struct tc_msg *inproc_wait_writer_reply(struct inproc *h, struct tc *c, uint64_t req,
					int timeout_s);
/* Packets tagged tag in the trace file at path, once count of them are there and the file
 * writer has nothing left to write: the writer thread's work, waited for in real time as
 * an event, up to 20 s. */
int inproc_file_count_when(const char *path, const char *tag, int count);
/* Moves the clock ms forward, one due timer at a time (as the real clock would pass
 * them), running the service at each. Before each step it waits (real time, up to 20 s)
 * for the file writers to have written what they were given, unless h->writer_blocks:
 * their threads run in real time, and a clock moving seconds in microseconds would take
 * a thread not yet scheduled for a stalled file. */
void inproc_advance(struct inproc *h, uint64_t ms);
/* Runs argv (argv[0] a path; a client such as `sonde trace --query` connecting to
 * h's sockets) to its end, capturing both streams into o as test_run does, the service
 * run at each of its requests meanwhile: the test waits on the service's fd and the
 * program's pidfd, no clock moving. Kills it after timeout_s of real time. */
struct test_output;
void inproc_run_program(struct inproc *h, struct test_output *o, int timeout_s,
			const char *const argv[]);

#endif
