/* A thread that exits while blocked, for the off-CPU tests: main starts a reader that
 * blocks in read() on a pipe nobody writes, sleeps NAP_MS, writes the reader's tid to
 * TRUTH and exits the process, which ends the reader inside its read.
 *
 * usage: offcpu_exit NAP_MS TRUTH
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static volatile pid_t reader_tid;

__attribute__((noinline)) static void wait_forever(void)
{
	char c;

	reader_tid = (pid_t)syscall(SYS_gettid);
	if (read(fds[0], &c, 1) < 0)
		perror("read");
}

static void *reader(void *arg)
{
	wait_forever();
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc != 3) {
		fprintf(stderr, "usage: offcpu_exit NAP_MS TRUTH\n");
		return 2;
	}
	long ms = atol(argv[1]);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	if (pipe(fds) < 0 || pthread_create(&t, NULL, reader, NULL) != 0)
		return 1;
	nanosleep(&ts, NULL);
	FILE *f = fopen(argv[2], "w");
	if (!f)
		return 1;
	fprintf(f, "reader %d\n", (int)reader_tid);
	fclose(f);
	exit(0); /* the reader is still in read(): the exit ends it there */
}
