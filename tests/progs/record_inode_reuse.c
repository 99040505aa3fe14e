/* A library written to a temporary file, loaded, deleted, unloaded, then another library
 * written under the same name: on ext4 the second file gets the first one's inode number
 * (freed with it), and only the inode's generation tells them apart. Each library spins
 * 0.2 s of CPU time in its life_NAME_hot (tests/progs/life_lib: liblife_a.so, then
 * liblife_b.so) while loaded.
 *
 * usage: record_inode_reuse LIBA LIBB DIR
 * Prints "inodes A B".
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "copy_file.h"

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static const char *const hot[2] = {"life_a_hot", "life_b_hot"};
	unsigned long inode[2];
	char path[4096];

	if (argc != 4)
		return 2;
	snprintf(path, sizeof(path), "%s/libreuse.so", argv[3]);
	for (int k = 0; k < 2; k++) {
		struct stat st;
		if (copy_file(argv[1 + k], path, O_EXCL) < 0 || stat(path, &st) < 0)
			return 1;
		inode[k] = (unsigned long)st.st_ino;
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h || unlink(path) < 0)
			return 1;
		void (*fn)(uint64_t) = (void (*)(uint64_t))dlsym(h, hot[k]);
		if (!fn)
			return 1;
		for (double end = cpu_s() + 0.2; cpu_s() < end;)
			fn(100000);
		dlclose(h);
	}
	printf("inodes %lu %lu\n", inode[0], inode[1]);
	return 0;
}
