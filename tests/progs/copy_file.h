/* Copying a file, for the target programs that write libraries and executables of their
 * own (tests/progs/record_dellib.c, record_inode_reuse.c). */
#ifndef SONDE_TESTS_PROGS_COPY_FILE_H
#define SONDE_TESTS_PROGS_COPY_FILE_H

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

/* Copies from into to, created executable with the open flags `create` (O_TRUNC, or
 * O_EXCL for a file that must be new): 0, or -1. */
static inline int copy_file(const char *from, const char *to, int create)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | create | O_CLOEXEC, 0755);
	ssize_t n;
	int ok = in >= 0 && out >= 0;

	while (ok && (n = read(in, buf, sizeof(buf))) > 0)
		ok = write(out, buf, (size_t)n) == n;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0)
		ok = 0;
	return ok ? 0 : -1;
}

#endif
