/* A stand-in for a JIT: spins in machine code it copied into anonymous executable memory,
 * so that samples land where only a perf map (/tmp/perf-PID.map) could name them.
 *
 * usage: jit_spin SECONDS [fifo|sparse]
 *   fifo: first put a FIFO at /tmp/perf-PID.map, as a hostile process may, to see that a
 *   profiler reading its map does not block on it;
 *   sparse: make the map a 768 MiB sparse file (one real line, then zeros), which a
 *   profiler must not read into memory.
 * x86-64 only (the copied code is x86-64); elsewhere it exits 77.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
#if defined(__x86_64__)
	/* mov rax, rdi; 1: dec rax; jnz 1b; ret */
	static const uint8_t code[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};
	double secs = argc > 1 ? atof(argv[1]) : 3, end = now() + secs;
	char map[64];

	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)getpid());
	if (argc > 2 && strcmp(argv[2], "fifo") == 0 && mkfifo(map, 0644) < 0) {
		perror(map);
		return 1;
	}
	if (argc > 2 && strcmp(argv[2], "sparse") == 0) {
		int fd = open(map, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0 || write(fd, "1000 10 f\n", 10) != 10 || ftruncate(fd, 768 << 20) < 0) {
			perror(map);
			return 1;
		}
		close(fd);
	}
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(p, code, sizeof(code));
	uint64_t (*spin)(uint64_t) = (uint64_t(*)(uint64_t))p;
	while (now() < end)
		spin(10000000);
	return 0;
#else
	return 77;
#endif
}
