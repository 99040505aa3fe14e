/* A syscall-heavy target: most of its CPU time is spent in the kernel, reached from known
 * user frames:
 *
 *   main -> run -> zero_reader -> read(/dev/zero, 64 KiB)    (the kernel clears the buffer)
 *               -> null_writer -> write(/dev/null, 16 bytes)
 *
 * usage: kernel_syscalls [SECONDS]   (default 3)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[65536];

__attribute__((noinline)) static long zero_reader(int fd)
{
	long got = 0;

	for (int i = 0; i < 64; i++)
		got += read(fd, buf, sizeof(buf));
	return got;
}

__attribute__((noinline)) static long null_writer(int fd)
{
	long put = 0;

	for (int i = 0; i < 256; i++)
		put += write(fd, buf, 16);
	return put;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static int run(double seconds)
{
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	long total = 0;

	if (zero < 0 || null < 0) {
		perror("open");
		return 1;
	}
	for (double end = now() + seconds; now() < end;)
		total += zero_reader(zero) + null_writer(null);
	close(zero);
	close(null);
	return total > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	return run(argc > 1 ? atof(argv[1]) : 3);
}
