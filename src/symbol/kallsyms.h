/* Kernel symbols from /proc/kallsyms ("ADDR TYPE NAME [MODULE]" per line). Internal.
 *
 * Only text symbols (t, T) are kept. A symbol reaches to the next one; the last one
 * reaches 1 MiB at most. Without privilege the kernel shows every address as 0: such
 * lines are dropped, and the table ends up empty.
 */
#ifndef SONDE_SYMBOL_KALLSYMS_H
#define SONDE_SYMBOL_KALLSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/regfile.h"
#include "symbol/strpool.h"

/* A kernel with every module loaded has a few tens of MiB of kallsyms. */
#define KALLSYMS_MAX_BYTES (256u << 20)

struct ksym {
	uint64_t addr;
	const char *name;
	const char *module; /* "[kernel.kallsyms]" or "[name]" */
};

struct kallsyms {
	struct strpool pool;
	struct ksym *v;
	size_t n, cap;
};

/* Parses a whole kallsyms text. 0 or -ENOMEM (malformed lines are skipped). */
int sonde__kallsyms_parse(struct kallsyms *k, const char *buf, size_t len);
/* Reads and parses a file: a regular file (as /proc/kallsyms is), of which at most
 * KALLSYMS_MAX_BYTES are read (procfs reports size 0, so the cap is on what is read).
 * 0 or -errno (-EFBIG past the cap). */
int sonde__kallsyms_load(struct kallsyms *k, const char *path, struct regfile_refusals *refusals);
const struct ksym *sonde__kallsyms_find(const struct kallsyms *k, uint64_t addr);
void sonde__kallsyms_free(struct kallsyms *k);

#endif
