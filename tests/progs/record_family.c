/* A process family for the recorder's lifecycle tests: the main thread starts two worker
 * threads (named "worker"), then forks a child that runs its own work loop, and waits for
 * everyone. Every busy function is reached through main, so stacks end at main.
 *
 * usage: record_family [SECONDS]   (default 1)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static double seconds = 1.0;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void family_spin(double until)
{
	uint64_t x = 1;

	while (now() < until)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

static void *worker(void *arg)
{
	prctl(PR_SET_NAME, "worker");
	family_spin(now() + seconds);
	return arg;
}

__attribute__((noinline)) void family_child(void)
{
	prctl(PR_SET_NAME, "child");
	family_spin(now() + seconds);
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	int status;

	if (argc > 1)
		seconds = atof(argv[1]);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	pid_t pid = fork();
	if (pid == 0) {
		family_child();
		_exit(0);
	}
	family_spin(now() + seconds);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
