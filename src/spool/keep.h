/* Owned copies of what spool records define, for readers that keep definitions past the
 * record (the whole-file reader and the tail). */
#ifndef SONDE_SPOOL_KEEP_H
#define SONDE_SPOOL_KEEP_H

#include <stddef.h>

#include <sonde/spool_reader.h>

/* A NUL-terminated copy of the n bytes at s, or NULL. */
char *sonde__spool_dup_str(const char *s, size_t n);

/* The module a MODULE record defines, with its path and build id copied (both freed by
 * the caller). 0 or -ENOMEM. */
int sonde__spool_keep_module(const struct sonde_spool_record *rec, struct sonde_spool_module *out);

#endif
