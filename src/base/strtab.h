/* Interned strings and functions: each distinct string or function stored once and
 * numbered densely, id 0 being "" or no function. Internal to libsonde.
 *
 * The one interning of the library's models: the exporters' profile
 * (src/export/profile.h) and the readers' view (src/view/view.c) both keep their names
 * and functions here. Strings live back to back in one buffer, so an id costs four bytes
 * and a lookup one hash of the string; a function is four small ids.
 */
#ifndef SONDE_BASE_STRTAB_H
#define SONDE_BASE_STRTAB_H

#include <stdint.h>

#include "base/array.h"
#include "base/buf.h"
#include "base/idmap.h"

struct strtab {
	struct buf chars;   /* NUL-terminated strings, back to back */
	ARR(uint32_t) offs; /* string id -> offset in chars */
	struct idmap index;
};

/* Makes t an empty table holding string 0, "". 0 or -ENOMEM (t is then freed). */
int sonde__strtab_init(struct strtab *t);
/* The id of s, added when new (NULL and "" are string 0); -ENOMEM when memory, or the
 * table's 4 GiB of text, runs out. */
int64_t sonde__strtab_intern(struct strtab *t, const char *s);
/* Frees the table's memory (a zeroed or freed table is fine). */
void sonde__strtab_free(struct strtab *t);

/* String id, valid until the next intern (which may move the text). */
static inline const char *strtab_str(const struct strtab *t, uint32_t id)
{
	return (const char *)t->chars.data + t->offs.v[id];
}

/* How many strings the table holds, "" included: ids are below it. */
static inline uint32_t strtab_count(const struct strtab *t)
{
	return t->offs.n;
}

/* A function: string ids of a strtab. Identified by (name, file, module, kind); origin is
 * carried along (the first interned wins). */
struct tab_func {
	uint32_t name, file, module; /* module: the module path, or what the model calls it */
	uint8_t kind, origin;	     /* enum sonde_sym_kind, enum sonde_sym_origin */
};

/* A function table: v[1..n) are the functions (v[0] a placeholder: id 0 means none), laid
 * out as base/array.h's ARR so that models index it directly. */
struct functab {
	struct tab_func *v;
	uint32_t n;
	size_t cap;
	struct idmap index;
};

/* Makes t an empty table with the placeholder. 0 or -ENOMEM (t is then freed). */
int sonde__functab_init(struct functab *t);
/* The id (1 and up) of function f, added when new; -ENOMEM. */
int64_t sonde__functab_intern(struct functab *t, const struct tab_func *f);
void sonde__functab_free(struct functab *t);

#endif
