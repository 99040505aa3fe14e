/* sonde top's helpers. The window of samples is the library's live view of the tail
 * (include/sonde/view_source.h): it filters, names functions (the outermost, non-inlined
 * symbol of each frame, named once per frame until the tail reports the frame's process
 * invalidated) and processes (after their main thread, as report names them), and
 * aggregates, sorts and cuts the rows.
 */
#ifndef SONDE_TOP_H
#define SONDE_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The FUNCTION column's width. */
enum { NAME_COLUMN = 40 };

/* name as the FUNCTION column shows it: template arguments and parameter lists elided
 * ("std::map<...>::find(...)"; operator< and "(anonymous namespace)" kept), then cut to
 * cap - 1 characters ending in "..." when still longer. Returns out. */
const char *top_short_name(const char *name, char *out, size_t cap);

#endif
