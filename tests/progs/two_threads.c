/* Two busy threads with hot functions of their own, named hot_a and hot_b (their comm),
 * for recordings of one thread (-t) and of a command name (--comm). Writes "TID_A TID_B\n"
 * to FILE once both run (renamed into place: a reader never sees half of it), then runs
 * for SECONDS. With "late", hot_a starts a third busy thread, hot_c in hot_c_work, once a
 * file FILE.late exists (looked for every 10 ms): a thread created after a recording of
 * hot_a began, when the test has seen the recording start.
 *
 * usage: two_threads SECONDS FILE [late]
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static volatile pid_t tids[2];
static double until;
static char late_path[4096]; /* "": no late thread */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void hot_a_work(void)
{
	uint64_t x = sink;

	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005ULL + 1;
	sink = x;
}

__attribute__((noinline)) void hot_b_work(void)
{
	uint64_t x = sink;

	for (int i = 0; i < 20000; i++)
		x = x * 2862933555777941757ULL + 3;
	sink = x;
}

__attribute__((noinline)) void hot_c_work(void)
{
	uint64_t x = sink;

	for (int i = 0; i < 20000; i++)
		x = x * 3202034522624059733ULL + 7;
	sink = x;
}

__attribute__((noinline)) void *thread_c(void *arg)
{
	prctl(PR_SET_NAME, "hot_c");
	while (now() < until)
		hot_c_work();
	return arg;
}

__attribute__((noinline)) void *thread_a(void *arg)
{
	pthread_t c;
	bool started = false;
	double look = 0;

	prctl(PR_SET_NAME, "hot_a");
	tids[0] = (pid_t)syscall(SYS_gettid);
	while (now() < until) {
		hot_a_work();
		if (late_path[0] && !started && now() >= look) {
			look = now() + 0.01;
			if (access(late_path, F_OK) == 0)
				started = pthread_create(&c, NULL, thread_c, NULL) == 0;
		}
	}
	if (started)
		pthread_join(c, NULL);
	return arg;
}

__attribute__((noinline)) void *thread_b(void *arg)
{
	prctl(PR_SET_NAME, "hot_b");
	tids[1] = (pid_t)syscall(SYS_gettid);
	while (now() < until)
		hot_b_work();
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	char tmp[4096];

	if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "late")))
		return 2;
	until = now() + atof(argv[1]);
	if (argc == 4)
		snprintf(late_path, sizeof(late_path), "%s.late", argv[2]);
	if (pthread_create(&a, NULL, thread_a, NULL) || pthread_create(&b, NULL, thread_b, NULL))
		return 1;
	while (!tids[0] || !tids[1])
		usleep(1000);
	snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
	FILE *f = fopen(tmp, "we");
	if (!f || fprintf(f, "%d %d\n", (int)tids[0], (int)tids[1]) < 0 || fclose(f) ||
	    rename(tmp, argv[2]))
		return 1;
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
