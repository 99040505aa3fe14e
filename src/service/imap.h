/* A u64 -> u32 open-addressing hash map (linear probing, backward-shift deletion).
 * Internal to the service: indexes chunks in the central buffers. Allocates only when it
 * grows, never per lookup, insert or delete once warm. */
#ifndef SONDE_SERVICE_IMAP_H
#define SONDE_SERVICE_IMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct imap_slot {
	uint64_t key;
	uint32_t val;
	uint32_t used;
};

struct imap {
	struct imap_slot *slots;
	size_t cap; /* power of two, or 0 */
	size_t n;
};

/* Reserves room for n entries without growing later. Returns 0 or -ENOMEM. */
int imap_init(struct imap *m, size_t n);
void imap_free(struct imap *m);
/* Pointer to the value for key, or NULL. Valid until the next put/del. */
uint32_t *imap_get(const struct imap *m, uint64_t key);
/* Inserts or replaces. Returns 0 or -ENOMEM. */
int imap_put(struct imap *m, uint64_t key, uint32_t val);
/* Removes key if present; returns whether it was. */
bool imap_del(struct imap *m, uint64_t key);
void imap_clear(struct imap *m);

#endif
