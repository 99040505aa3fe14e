/* Owned copies of what spool records define, for readers that keep definitions past the
 * record (the whole-file reader and the tail). */
#ifndef SONDE_SPOOL_KEEP_H
#define SONDE_SPOOL_KEEP_H

#include <stdbool.h>
#include <stddef.h>

#include <sonde/spool_reader.h>

/* A NUL-terminated copy of the n bytes at s, or NULL. */
char *sonde__spool_dup_str(const char *s, size_t n);

/* The module a MODULE record defines, with its path and build id copied (both freed by
 * the caller). 0 or -ENOMEM. */
int sonde__spool_keep_module(const struct sonde_spool_record *rec, struct sonde_spool_module *out);

/* One CPU's switches as a reader follows them (SWITCHES records, docs/spool.md): when its
 * last switch was and which task it brought in. Zero-initialized: no switch yet. */
struct sonde_spool_chain {
	bool seen;
	uint32_t last_next; /* the task the last switch brought in (0: the idle task) */
	uint64_t last_ns;
};

/* Follows c, CPU cpu's chain, over its next switch sw (gap: sw is the first of a run
 * flagged SONDE_SWITCHES_GAP), which the decoder checked is not older than the CPU's
 * previous one. Returns true with *run the stay sw ends: its task, from the CPU's previous
 * switch (0 when sw is the CPU's first) to sw, and how it left; false when sw ends none
 * (the idle task leaves, or records were lost since the CPU's previous switch, so who ran
 * is not known). */
bool sonde__spool_chain_step(struct sonde_spool_chain *c, uint32_t cpu,
			     const struct sonde_spool_switch *sw, bool gap,
			     struct sonde_spool_run *run);

#endif
