/* Helpers of the recorder lifecycle tests: a spool read back with every frame symbolized,
 * so that tests can check which function and which file each sample was attributed to. */
#ifndef SONDE_TEST_LIFE_UTIL_H
#define SONDE_TEST_LIFE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

enum { LIFE_MAX_FRAMES = 64 };

struct life_spool {
	struct sonde_spool *s;
	struct sonde_spool_info info;
	struct sonde_symbolizer *sym;
};

/* One sample, symbolized. fn[k] and mod[k] (module path, "" when no module covered the
 * frame) are owned by the spool and symbolizer, valid until life_close. */
struct life_sample {
	uint32_t pid, tid;
	const char *comm;
	int depth;
	const char *fn[LIFE_MAX_FRAMES];
	const char *mod[LIFE_MAX_FRAMES];
};

/* Opens a complete spool file (fails the test otherwise). */
void life_open(struct life_spool *ls, const char *path);
/* Same, over bytes in memory (kept by the caller until life_close). */
void life_open_mem(struct life_spool *ls, const void *buf, size_t len);
void life_close(struct life_spool *ls);
/* Sample i (< ls->info.samples). */
void life_sample(struct life_spool *ls, uint64_t i, struct life_sample *out);
/* The same with the outermost LIFE_MAX_FRAMES frames of a deeper stack (main, _start, and
 * what lies below them), and its whole depth and flags. Returns the depth. */
int life_sample_outer(struct life_spool *ls, uint64_t i, struct life_sample *out, uint32_t *flags);
/* Whether path's file name is name. */
bool life_is_file(const char *path, const char *name);
/* Index of the first frame whose function is fn, or -1. */
int life_find(const struct life_sample *s, const char *fn);

#endif
