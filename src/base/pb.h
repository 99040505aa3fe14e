/* Protobuf wire format: a writer into a struct buf and a bounds-checked reader.
 * Internal to libsonde.
 *
 * Hand-written rather than generated (protobuf-c): sonde needs to read untrusted bytes
 * without allocating, to skip unknown fields in place, and to write nested messages with
 * the fixed 4-byte length prefixes that Perfetto's patching protocol depends on; a
 * generated object model would allocate per message and hide the bytes.
 */
#ifndef SONDE_BASE_PB_H
#define SONDE_BASE_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum pb_wire {
	PB_VARINT = 0,
	PB_FIXED64 = 1,
	PB_LEN = 2,
	PB_FIXED32 = 5,
};

/* Longest varint (u64): 10 bytes. */
enum { PB_VARINT_MAX = 10, PB_NESTED_LEN_SIZE = 4 };

/* --- raw varints (also used outside protobuf, e.g. by the spool) --- */

/* Writes v as LEB128 into out (at least PB_VARINT_MAX bytes); returns bytes written. */
size_t sonde__pb_varint_encode(uint8_t *out, uint64_t v);
/* Decodes a varint from [p, end). Returns bytes consumed, or 0 if truncated or longer
 * than 10 bytes. */
size_t sonde__pb_varint_decode(const uint8_t *p, const uint8_t *end, uint64_t *v);
static inline uint64_t pb_zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline int64_t pb_unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* --- writer --- */

void sonde__pb_put_varint_raw(struct buf *b, uint64_t v);
void sonde__pb_put_tag(struct buf *b, uint32_t field, enum pb_wire wire);
void sonde__pb_put_varint(struct buf *b, uint32_t field, uint64_t v);
void sonde__pb_put_sint(struct buf *b, uint32_t field, int64_t v); /* zigzag */
void sonde__pb_put_bool(struct buf *b, uint32_t field, bool v);
void sonde__pb_put_fixed32(struct buf *b, uint32_t field, uint32_t v);
void sonde__pb_put_fixed64(struct buf *b, uint32_t field, uint64_t v);
void sonde__pb_put_double(struct buf *b, uint32_t field, double v);
void sonde__pb_put_bytes(struct buf *b, uint32_t field, const void *p, size_t n);
void sonde__pb_put_string(struct buf *b, uint32_t field, const char *s); /* NULL writes nothing */

/* Nested messages: begin writes the tag and reserves a 4-byte redundant varint length
 * (0x80 0x80 0x80 0x00 style, as Perfetto's writers do), end fills it in. Returns the
 * offset of the reserved length, to pass to sonde__pb_end. Messages above 2^28-1 bytes cannot be
 * expressed in 4 bytes: sonde__pb_end then marks the buffer failed. */
size_t sonde__pb_begin(struct buf *b, uint32_t field);
void sonde__pb_end(struct buf *b, size_t mark);
/* Writes n as a 4-byte redundant varint at out (the patching format). n < 2^28. */
void sonde__pb_write_redundant_len(uint8_t out[4], uint32_t n);

/* --- reader --- */

struct pb_reader {
	const uint8_t *p;
	const uint8_t *end;
};

struct pb_field {
	uint32_t num;
	enum pb_wire wire;
	uint64_t u;	    /* PB_VARINT, PB_FIXED32, PB_FIXED64 */
	const uint8_t *ptr; /* PB_LEN: bytes inside the reader's buffer */
	size_t len;
};

static inline struct pb_reader pb_reader_init(const void *p, size_t n)
{
	const uint8_t *b = p;

	/* an empty field may come as NULL, and NULL + 0 is undefined in C */
	return (struct pb_reader){b, b ? b + n : b};
}

/* Reads the next field. Returns 1 with *f filled, 0 at the clean end of the buffer, or
 * -SONDE_E_FORMAT for malformed input (bad wire type, field 0, truncated). Groups
 * (wire types 3 and 4) are rejected as malformed. */
int sonde__pb_next(struct pb_reader *r, struct pb_field *f);
/* A reader over a PB_LEN field's bytes. */
static inline struct pb_reader pb_sub(const struct pb_field *f)
{
	return pb_reader_init(f->ptr, f->len);
}
static inline int64_t pb_field_sint(const struct pb_field *f)
{
	return pb_unzigzag(f->u);
}
/* Iterates a packed repeated varint field: returns 1 and *v, 0 at end, <0 malformed. */
int sonde__pb_packed_next(struct pb_reader *r, uint64_t *v);

#endif
