/* Sleeps in a loop: main calls sleep_caller COUNT times, which blocks 1 ms in nanosleep,
 * so every switch-out of the thread has the stack nanosleep <- sleep_caller <- main.
 * Prints how many times it left the CPU of its own accord meanwhile (getrusage): one per
 * sleep, but for a sleep whose timer had fired before the thread reached the scheduler (an
 * interrupt that long, on a loaded machine), which leaves no CPU.
 *
 * usage: sleep_loop [COUNT]   (default 300)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

__attribute__((noinline)) void sleep_caller(void);

void sleep_caller(void)
{
	struct timespec ts = {0, 1000000};

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 300;
	struct rusage before, after;

	getrusage(RUSAGE_THREAD, &before);
	for (long i = 0; i < n; i++)
		sleep_caller();
	getrusage(RUSAGE_THREAD, &after);
	printf("done %ld\nvoluntary switches %ld\n", n, after.ru_nvcsw - before.ru_nvcsw);
	return 0;
}
