/* A known wall-clock split for the off-CPU tests: rounds of burn (20 ms of the thread's own
 * CPU time), nap (one 40 ms nanosleep) and wait_pipe (a blocking read of a pipe that a
 * writer thread fills 20 ms later): 25 % on the CPU, 50 % sleeping, 25 % blocked on the
 * pipe, when the machine is idle. On a loaded one each phase is measured on the wall
 * clock as it happens (burn's preemptions count as burn), and the truth is written to
 * TRUTH at the end: what the main thread's rounds really spent where.
 *
 * With DEPTH, the rounds of the second half run at the bottom of DEPTH recursive frames
 * of about 64 bytes (descend): a thread whose stack needs change mid-recording, for the
 * recorder's per-thread stack copies.
 *
 * usage: offcpu_split SECONDS TRUTH [DEPTH]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static int pipe_in[2], pipe_go[2];
static volatile uint64_t sink;

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void burn(uint64_t cpu_ns)
{
	uint64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + cpu_ns;

	/* the thread's CPU clock is a system call: read it rarely, so that burn's time is
	 * spent in user space, where the samples see it */
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 50000; i++)
			sink += (uint64_t)i * i;
}

__attribute__((noinline)) static void nap(uint64_t ns)
{
	struct timespec ts = {0, (long)ns};

	nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void wait_pipe(void)
{
	char c = 1;

	if (write(pipe_go[1], &c, 1) != 1 || read(pipe_in[0], &c, 1) != 1)
		exit(3);
}

/* Answers each request on pipe_go 20 ms later. */
static void *writer(void *arg)
{
	char c;

	prctl(PR_SET_NAME, "offcpu-writer");
	while (read(pipe_go[0], &c, 1) == 1) {
		nap(20000000);
		if (write(pipe_in[1], &c, 1) != 1)
			break;
	}
	return NULL;
}

static uint64_t spent[3], rounds;

/* Rounds until end (CLOCK_MONOTONIC ns). A macro, not a function: the shallow rounds are
 * main's own, their stacks main -> burn/nap/wait_pipe as the tests look for them. */
#define RUN_ROUNDS(end)                                                                            \
	do {                                                                                       \
		uint64_t t_[4];                                                                    \
		while (now_ns(CLOCK_MONOTONIC) < (end)) {                                          \
			t_[0] = now_ns(CLOCK_MONOTONIC);                                           \
			burn(20000000);                                                            \
			t_[1] = now_ns(CLOCK_MONOTONIC);                                           \
			nap(40000000);                                                             \
			t_[2] = now_ns(CLOCK_MONOTONIC);                                           \
			wait_pipe();                                                               \
			t_[3] = now_ns(CLOCK_MONOTONIC);                                           \
			for (int i_ = 0; i_ < 3; i_++)                                             \
				spent[i_] += t_[i_ + 1] - t_[i_];                                  \
			rounds++;                                                                  \
		}                                                                                  \
	} while (0)

/* One frame: a buffer the compiler must keep, so each level takes its share of stack. */
__attribute__((noinline)) static void descend(uint64_t end, int level)
{
	volatile uint64_t pad[4];

	pad[0] = end;
	if (level <= 1)
		RUN_ROUNDS(end);
	else
		descend(end, level - 1);
	sink += pad[0];
}

int main(int argc, char **argv)
{
	pthread_t w;

	if (argc < 3 || argc > 4 || pipe(pipe_in) || pipe(pipe_go) ||
	    pthread_create(&w, NULL, writer, NULL))
		return 2;
	int depth = argc > 3 ? atoi(argv[3]) : 0;
	if (depth < 0 || depth > 1000)
		return 2;
	uint64_t start = now_ns(CLOCK_MONOTONIC), len = (uint64_t)(atof(argv[1]) * 1e9);
	RUN_ROUNDS(depth ? start + len / 2 : start + len);
	if (depth)
		descend(start + len, depth);
	FILE *f = fopen(argv[2], "w");
	if (!f)
		return 2;
	fprintf(f, "pid %d\nburn %llu\nnap %llu\nwait_pipe %llu\nrounds %llu\n", (int)getpid(),
		(unsigned long long)spent[0], (unsigned long long)spent[1],
		(unsigned long long)spent[2], (unsigned long long)rounds);
	return fclose(f) ? 2 : 0;
}
