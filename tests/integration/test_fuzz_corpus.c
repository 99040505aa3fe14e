/* Every fuzz target's kept inputs (fuzz/corpus/NAME/: seeds and past findings) replay
 * cleanly; in the SAN=1 build this runs them under ASan and UBSan. */
#include <dirent.h>
#include <sys/stat.h>

#include "../test.h"
#include "../util.h"

TEST_TIMEOUT(fuzz_corpora_replay_cleanly, 300)
{
	DIR *d = opendir(test_src_path("fuzz"));
	int targets = 0;

	ASSERT(d != NULL);
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".c") || !strcmp(e->d_name, "driver.c"))
			continue;
		char name[256], corpus[4096];
		struct stat st;
		snprintf(name, sizeof(name), "replay-%.*s", (int)(n - 2), e->d_name);
		snprintf(corpus, sizeof(corpus), "%s/%.*s", test_src_path("fuzz/corpus"),
			 (int)(n - 2), e->d_name);
		if (stat(corpus, &st) < 0)
			FAIL("fuzz target %s has no corpus directory %s", e->d_name, corpus);
		struct test_output o;
		const char *argv[] = {test_bin(name), corpus, NULL};
		test_run(&o, 240, argv);
		if (o.status != 0)
			FAIL("%s %s exited %d:\n%s%s", name, corpus, o.status, o.out, o.err);
		printf("%s: %s", name, o.out);
		test_output_free(&o);
		targets++;
	}
	closedir(d);
	printf("%d fuzz targets replayed\n", targets);
}
