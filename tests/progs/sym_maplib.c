/* Maps shared objects and waits, for the symbolizer's image-cache tests.
 *
 * usage: sym_maplib LIB... READY_FILE
 * dlopens every LIB, calls its shlib_spin once, creates READY_FILE, then sleeps until
 * killed (at most 60 s).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: sym_maplib LIB... READY_FILE\n");
		return 2;
	}
	for (int i = 1; i < argc - 1; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		uint64_t (*spin)(uint64_t) = (uint64_t(*)(uint64_t))dlsym(h, "shlib_spin");
		if (spin)
			spin(10);
	}
	int fd = open(argv[argc - 1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 1;
	close(fd);
	for (int i = 0; i < 600; i++)
		usleep(100000);
	return 0;
}
