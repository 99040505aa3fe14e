/* Interned strings and functions (base/strtab.h). */
#include <errno.h>
#include <string.h>

#include "base/strtab.h"

int sonde__strtab_init(struct strtab *t)
{
	*t = (struct strtab){0};
	uint32_t *off = ARR_PUSH(t->offs);
	buf_put_u8(&t->chars, 0);
	if (!off || buf_error(&t->chars)) {
		sonde__strtab_free(t);
		return -ENOMEM;
	}
	return 0;
}

struct str_key {
	const char *s;
	size_t len;
};

static bool str_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct str_key *k = key;
	const char *s = strtab_str(ctx, id);

	return strncmp(s, k->s, k->len) == 0 && s[k->len] == 0;
}

int64_t sonde__strtab_intern(struct strtab *t, const char *s)
{
	if (!s || !*s)
		return 0;
	struct str_key k = {s, strlen(s)};
	uint32_t h = (uint32_t)idmap_hash_bytes(s, k.len);
	int64_t id = sonde__idmap_find(&t->index, h, str_eq, t, &k);
	if (id >= 0)
		return id;
	if (t->chars.len + k.len + 1 > UINT32_MAX)
		return -ENOMEM;
	uint32_t *off = ARR_PUSH(t->offs);
	if (!off)
		return -ENOMEM;
	*off = (uint32_t)t->chars.len;
	sonde__buf_append(&t->chars, s, k.len + 1);
	if (buf_error(&t->chars) || sonde__idmap_insert(&t->index, h, t->offs.n - 1) < 0) {
		t->offs.n--;
		return -ENOMEM;
	}
	return t->offs.n - 1;
}

void sonde__strtab_free(struct strtab *t)
{
	sonde__buf_free(&t->chars);
	ARR_FREE(t->offs);
	sonde__idmap_free(&t->index);
}

int sonde__functab_init(struct functab *t)
{
	*t = (struct functab){0};
	if (!ARR_PUSH(*t))
		return -ENOMEM;
	return 0;
}

static bool func_eq(const void *ctx, uint32_t id, const void *key)
{
	const struct tab_func *a = &((const struct functab *)ctx)->v[id];
	const struct tab_func *b = key;

	return a->name == b->name && a->file == b->file && a->module == b->module &&
	       a->kind == b->kind;
}

int64_t sonde__functab_intern(struct functab *t, const struct tab_func *f)
{
	uint32_t h = (uint32_t)u64_hash(((uint64_t)f->name << 32 | f->file) ^
					u64_hash((uint64_t)f->module << 8 | f->kind));
	int64_t id = sonde__idmap_find(&t->index, h, func_eq, t, f);
	if (id >= 0)
		return id;
	struct tab_func *nf = ARR_PUSH(*t);
	if (!nf)
		return -ENOMEM;
	*nf = *f;
	if (sonde__idmap_insert(&t->index, h, t->n - 1) < 0) {
		t->n--;
		return -ENOMEM;
	}
	return t->n - 1;
}

void sonde__functab_free(struct functab *t)
{
	ARR_FREE(*t);
	sonde__idmap_free(&t->index);
}
