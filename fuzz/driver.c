/* Replays inputs through a fuzz target without libFuzzer, so that every target's corpus
 * runs in the ordinary and sanitizer builds (the test suite does this).
 *
 * usage: replay-NAME FILE|DIR...   (directories are read one level deep)
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 65536;
			uint8_t *n = realloc(buf, cap);
			if (!n) {
				fclose(f);
				free(buf);
				return -1;
			}
			buf = n;
		}
		size_t r = fread(buf + len, 1, cap - len, f);
		if (r == 0)
			break;
		len += r;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0, errors = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			errors++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			errors += replay_file(argv[i]) < 0;
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		for (struct dirent *e; d && (e = readdir(d));) {
			char path[4096];
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			errors += replay_file(path) < 0;
			files++;
		}
		if (d)
			closedir(d);
	}
	printf("replayed %d inputs\n", files);
	return errors ? 1 : 0;
}
