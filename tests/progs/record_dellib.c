/* Runs code from a library that no longer exists on disk: copies LIB to DIR/libgone.so,
 * dlopens the copy, deletes it, then calls the library's shlib_spin in a loop for SECONDS.
 * With "replace", the copy is instead replaced by another file (a copy of this program,
 * renamed over it), as a package upgrade does. A profile made after it exited can only
 * name those functions if the profiler kept the image.
 *
 * usage: record_dellib LIB DIR SECONDS [replace]
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "copy_file.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char path[4096], tmp[4200];

	if (argc != 4 && !(argc == 5 && strcmp(argv[4], "replace") == 0)) {
		fprintf(stderr, "usage: record_dellib LIB DIR SECONDS [replace]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/libgone.so", argv[2]);
	snprintf(tmp, sizeof(tmp), "%s/libgone.so.new", argv[2]);
	if (copy_file(argv[1], path, O_TRUNC) < 0)
		return 1;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (argc == 5) {
		if (copy_file("/proc/self/exe", tmp, O_TRUNC) < 0 || rename(tmp, path) < 0)
			return 1;
	} else if (unlink(path) < 0) {
		return 1;
	}
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	uint64_t (*spin)(uint64_t) = (uint64_t(*)(uint64_t))dlsym(h, "shlib_spin");
	if (!spin)
		return 1;
	uint64_t x = 0;
	for (double end = now() + atof(argv[3]); now() < end;)
		x += spin(100000);
	return x == 42 ? 3 : 0;
}
