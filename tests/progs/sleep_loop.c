/* Sleeps in a loop: main calls sleep_caller COUNT times, which blocks 1 ms in nanosleep,
 * so every switch-out of the thread has the stack nanosleep <- sleep_caller <- main.
 *
 * usage: sleep_loop [COUNT]   (default 300)
 */
#include <stdio.h>
#include <stdlib.h>
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

	for (long i = 0; i < n; i++)
		sleep_caller();
	printf("done %ld\n", n);
	return 0;
}
