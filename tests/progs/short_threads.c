/* Threads that exit with short waits only, after a thread that waits long: main naps NAPS
 * times 1 ms (its waits long, each a record of the off-CPU recorder), then starts THREADS
 * threads one after another, each of which sleeps SLEEPS times 1 us (waits far shorter than
 * a millisecond: counted, not stacked) and exits. Writes "worker TID" for each to OUT,
 * then "done".
 *
 * usage: short_threads NAPS THREADS SLEEPS OUT
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long sleeps;

static void *worker(void *arg)
{
	struct timespec us = {0, 1000};

	*(pid_t *)arg = gettid();
	for (long i = 0; i < sleeps; i++)
		nanosleep(&us, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: short_threads NAPS THREADS SLEEPS OUT\n");
		return 2;
	}
	FILE *out = fopen(argv[4], "w");
	if (!out) {
		perror(argv[4]);
		return 1;
	}
	long naps = atol(argv[1]), threads = atol(argv[2]);
	struct timespec ms = {0, 1000000};

	sleeps = atol(argv[3]);
	for (long i = 0; i < naps; i++)
		nanosleep(&ms, NULL);
	for (long i = 0; i < threads; i++) {
		pthread_t t;
		pid_t tid = 0;
		if (pthread_create(&t, NULL, worker, &tid) || pthread_join(t, NULL)) {
			fprintf(stderr, "thread %ld failed\n", i);
			return 1;
		}
		fprintf(out, "worker %d\n", (int)tid);
	}
	fprintf(out, "done\n");
	return fclose(out) ? 1 : 0;
}
