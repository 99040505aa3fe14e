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
 * With PREEMPTS, the writes go on past COUNT until main has been switched out PREEMPTS
 * times while it spun (its nonvoluntary_ctxt_switches): on a loaded machine main is often
 * off its CPU already when the kworker comes, and one wait of it covers several writes'.
 *
 * usage: kworker_spin [COUNT [PREEMPTS]]   (default 200, 0); exit 2 when it cannot pin or
 *        write
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
static int count = 200, preempts, failed;
static pid_t main_tid;

/* Main's nonvoluntary context switches so far, from its /proc status (-1: unreadable). */
static long main_preempted(void)
{
	char path[64], line[128];
	long n = -1;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)main_tid);
	FILE *f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "nonvoluntary_ctxt_switches: %ld", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

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
	long from = main_preempted();
	for (int i = 0; !failed && (i < count || (preempts && main_preempted() - from < preempts));
	     i++) {
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
	if (argc > 2)
		preempts = atoi(argv[2]);
	main_tid = gettid();
	if (count < 1 || preempts < 0 || pin(1) != 0) {
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
