/* The progress line (progress.h). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

enum { SHOW_AFTER_MS = 500, EVERY_MS = 100 };

struct cli_progress {
	char label[256];
	uint64_t start_ms, last_ms, delay_ms;
	bool shown;
	bool ticking;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t done_cv;
	bool done;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct cli_progress *cli_progress_begin(const char *cmd, const char *what)
{
	const char *force = getenv("SONDE_PROGRESS");
	const char *ci = getenv("CI");
	bool forced = force && !strcmp(force, "1");

	if (force && !strcmp(force, "0"))
		return NULL;
	if (!forced && (!isatty(STDERR_FILENO) || (ci && *ci)))
		return NULL;
	struct cli_progress *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->label, sizeof(p->label), "sonde %s: %s", cmd, what);
	p->start_ms = now_ms();
	p->delay_ms = forced ? 0 : SHOW_AFTER_MS;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	return p;
}

/* Prints the line when it is time; the caller holds p->lock or is the only user. */
static void show(struct cli_progress *p, const char *tail)
{
	uint64_t t = now_ms();

	if (t - p->start_ms < p->delay_ms || (p->shown && t - p->last_ms < EVERY_MS))
		return;
	p->last_ms = t;
	p->shown = true;
	fprintf(stderr, "\r%s%s\033[K", p->label, tail);
	fflush(stderr);
}

void cli_progress_update(struct cli_progress *p, uint64_t done, uint64_t total)
{
	char tail[64];

	if (!p)
		return;
	snprintf(tail, sizeof(tail), " %llu/%llu (%.0f%%)", (unsigned long long)done,
		 (unsigned long long)total, total ? 100.0 * (double)done / (double)total : 100.0);
	show(p, tail);
}

static void *tick_main(void *arg)
{
	struct cli_progress *p = arg;
	char tail[64];

	pthread_mutex_lock(&p->lock);
	while (!p->done) {
		snprintf(tail, sizeof(tail), "... %llu s",
			 (unsigned long long)((now_ms() - p->start_ms) / 1000));
		show(p, tail);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&p->done_cv, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void cli_progress_tick(struct cli_progress *p)
{
	if (!p || p->ticking)
		return;
	show(p, "... 0 s"); /* at once when shown at once */
	p->ticking = pthread_create(&p->thread, NULL, tick_main, p) == 0;
}

void cli_progress_end(struct cli_progress *p)
{
	if (!p)
		return;
	if (p->ticking) {
		pthread_mutex_lock(&p->lock);
		p->done = true;
		pthread_cond_signal(&p->done_cv);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	if (p->shown) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
	}
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->done_cv);
	free(p);
}
