/* A process whose main thread exits first, for the off-CPU tests: main starts a thread,
 * named "napper", and ends with pthread_exit() at once; with "held", only once a line (or
 * the end) came on its stdin and it napped once itself (a wait a recorder attached with
 * -p sees, so that main's exit is in its spool), the napper napping meanwhile (seen before
 * the test lets main go). The napper then waits for main's exit (it
 * joins main, whose tid the kernel clears as it exits), naps N times NAP_MS in nap(),
 * writes "leader PID\nnapper TID\nnaps N\n" to TRUTH (renamed into place: a reader never
 * sees half of it) and returns: the process ends with it, its last thread. Those N naps
 * all come after the main thread's exit, the last ones long after it. With "late", main
 * ends at once and the napper naps on after it until the file TRUTH.go exists (a recorder
 * attached to a process whose main thread is gone: the test creates it once attached),
 * then naps its N times.
 *
 * usage: offcpu_leader_exit N NAP_MS TRUTH [held|late]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_t leader;
static int naps, nap_ms;
static const char *truth;
static volatile int go;
static int late;

__attribute__((noinline)) static void nap(void)
{
	struct timespec ts = {nap_ms / 1000, (nap_ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0)
		;
	__asm__ volatile("" ::: "memory"); /* not a tail call: nap stays on the stack */
}

static void *napper(void *arg)
{
	char tmp[4096];

	prctl(PR_SET_NAME, "napper");
	while (!go)
		nap();
	if (pthread_join(leader, NULL) != 0) {
		fprintf(stderr, "offcpu_leader_exit: cannot join the main thread\n");
		exit(1);
	}
	snprintf(tmp, sizeof(tmp), "%s.go", truth);
	while (late && access(tmp, F_OK) != 0)
		nap();
	for (int i = 0; i < naps; i++)
		nap();
	snprintf(tmp, sizeof(tmp), "%s.tmp", truth);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		perror(tmp);
		exit(1);
	}
	fprintf(f, "leader %d\nnapper %d\nnaps %d\n", (int)getpid(), (int)syscall(SYS_gettid),
		naps);
	if (fclose(f) || rename(tmp, truth)) {
		perror(truth);
		exit(1);
	}
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc < 4 || argc > 5 ||
	    (argc == 5 && strcmp(argv[4], "held") && strcmp(argv[4], "late"))) {
		fprintf(stderr, "usage: offcpu_leader_exit N NAP_MS TRUTH [held|late]\n");
		return 2;
	}
	naps = atoi(argv[1]);
	nap_ms = atoi(argv[2]);
	truth = argv[3];
	leader = pthread_self();
	late = argc == 5 && !strcmp(argv[4], "late");
	go = argc == 4 || late;
	if (pthread_create(&t, NULL, napper, NULL) != 0)
		return 1;
	if (!go) {
		char line[64];
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0; /* the end lets it go too */
		nap();
		go = 1;
	}
	pthread_exit(NULL); /* the process goes on in the napper */
}
