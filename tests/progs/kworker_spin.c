/* A thread preempted in user mode by kernel threads alone: main, pinned to CPU 1, spins in
 * kworker_spin_work (reached through main) while a second thread, pinned to CPU 0, writes
 * /proc/sys/vm/stat_refresh COUNT times. Each write runs a kworker on every CPU and
 * returns once they all ran (schedule_on_each_cpu), so main is switched out (R, not in a
 * system call) for a kworker at least COUNT times and resumed with no other user thread
 * run on its CPU meanwhile: its FPU registers still loaded, the kernel passes no
 * x86_fpu_regs_activated on its way back (and no rseq_update when glibc registered no
 * restartable sequence: GLIBC_TUNABLES=glibc.pthread.rseq=0). Writing stat_refresh
 * changes no setting. Needs root and two CPUs. Prints "spin START END", the CLOCK_MONOTONIC
 * nanoseconds between which main spun.
 *
 * usage: kworker_spin [COUNT]   (default 200); exit 2 when it cannot pin or write
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int done;
static volatile uint64_t sink;
static int count = 200, failed;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static void *refresher(void *arg)
{
	(void)arg;
	if (pin(0) != 0) {
		perror("kworker_spin: pin to CPU 0");
		failed = 1;
	}
	for (int i = 0; i < count && !failed; i++) {
		int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY);
		if (fd < 0 || write(fd, "1", 1) != 1) {
			perror("kworker_spin: /proc/sys/vm/stat_refresh");
			failed = 1;
		}
		if (fd >= 0)
			close(fd);
	}
	atomic_store(&done, 1);
	return NULL;
}

__attribute__((noinline)) void kworker_spin_work(void)
{
	uint64_t x = 1;

	while (!atomic_load_explicit(&done, memory_order_relaxed))
		for (int i = 0; i < 2000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	pthread_t t;
	unsigned long long start, end;

	if (argc > 1)
		count = atoi(argv[1]);
	if (count < 1 || pin(1) != 0) {
		fprintf(stderr, "kworker_spin: bad count or cannot pin to CPU 1\n");
		return 2;
	}
	if (pthread_create(&t, NULL, refresher, NULL) != 0)
		return 2;
	start = mono_ns();
	kworker_spin_work();
	end = mono_ns();
	pthread_join(t, NULL);
	printf("spin %llu %llu\n", start, end);
	return failed ? 2 : 0;
}
