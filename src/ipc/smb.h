/* The shared memory buffer (SMB) ABI between a producer and the service (perfetto-wire.md
 * §4). Internal to libsonde; used by the producer (writes) and the service (reads).
 *
 * Layout of page p at offset p * page_size:
 *   [u32 header_bitmap (atomic)][u32 reserved][chunk 0][chunk 1]...[unused tail]
 * header_bitmap: bits 30..28 the page layout (0 = not partitioned), bits 2i+1..2i the
 * state of chunk i. A chunk starts with an 8-byte header {u32 chunk_id, u16 writer_id,
 * u16 packets = count:10 | flags:6} followed by (chunk_size - 8) payload bytes holding
 * fragments [varint size][bytes]...
 *
 * Both processes touch these words concurrently, so every access of the bitmap and of the
 * chunk header goes through the helpers below, with the orderings the ABI prescribes:
 * bitmap loads acquire, bitmap CAS acq_rel, the packets store release. The other side may
 * be malicious: helpers never trust the layout bits beyond bounds checks on indices, and
 * every address they compute stays inside [base, base + size) for any bitmap value.
 */
#ifndef SONDE_IPC_SMB_H
#define SONDE_IPC_SMB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
	SMB_PAGE_HDR_SIZE = 8,
	SMB_CHUNK_HDR_SIZE = 8,
	SMB_MAX_CHUNKS_PER_PAGE = 14,
	SMB_MIN_PAGE_SIZE = 4096,
	SMB_MAX_PAGE_SIZE = 65536,     /* ABI limit */
	SMB_SVC_MAX_PAGE_SIZE = 32768, /* service limit (central buffer chunk cap) */
	SMB_DEFAULT_PAGE_SIZE = 4096,
	SMB_DEFAULT_SIZE = 262144,
	SMB_SVC_MAX_SIZE = 32 * 1024 * 1024,
	SMB_MAX_WRITER_ID = 1023,
	SMB_MAX_PACKET_COUNT = 1023,
	SMB_CAS_ATTEMPTS = 64,
};

/* Fragment size meaning "the writer abandoned this packet" (kPacketSizeDropPacket). */
#define SMB_PACKET_SIZE_DROP 0x0FFFFFFFu
/* Bytes of a fragment's size prefix as producers write it (redundant varint). */
#define SMB_PACKET_HDR_SIZE 4u

enum smb_chunk_state {
	SMB_CHUNK_FREE = 0,
	SMB_CHUNK_BEING_WRITTEN = 1,
	SMB_CHUNK_BEING_READ = 2,
	SMB_CHUNK_COMPLETE = 3,
};

enum smb_page_layout {
	SMB_LAYOUT_NOT_PARTITIONED = 0,
	SMB_LAYOUT_DIV1 = 1,
	SMB_LAYOUT_DIV2 = 2,
	SMB_LAYOUT_DIV4 = 3,
	SMB_LAYOUT_DIV7 = 4,
	SMB_LAYOUT_DIV14 = 5,
	/* 6 and 7 are reserved: zero chunks */
};

enum smb_chunk_flags {
	SMB_FLAG_FIRST_PACKET_CONTINUES = 1 << 0, /* fragment 0 continues chunk_id - 1 */
	SMB_FLAG_LAST_PACKET_CONTINUES = 1 << 1,  /* last fragment continues in chunk_id + 1 */
	SMB_FLAG_NEEDS_PATCHING = 1 << 2,
};

/* Points where the service touches shared memory that a hostile producer can rewrite at
 * any moment (see smb_access_hook). */
enum smb_access_point {
	SMB_AT_CAS,	 /* before a CAS on a bitmap word (ptr: the word) */
	SMB_AT_ACQUIRED, /* chunk taken Complete->BeingRead, header not read yet (ptr: chunk) */
	SMB_AT_COPY,	 /* before the payload is copied out (ptr, len: the payload) */
	SMB_AT_COPIED,	 /* the payload has been copied out (ptr, len: the payload) */
	SMB_AT_RELEASE,	 /* header cleared, before the CAS to Free (ptr: chunk) */
	SMB_AT_SCRAPE,	 /* scraping, after the bitmap load, before the header (ptr: chunk) */
};

/* A test seam, not an API: a program that defines this function (the hostile-SMB fuzz
 * target does) has it called at each smb_access_point, from the thread that is about to
 * touch the SMB, and may rewrite any byte of the SMB there, as a concurrent malicious
 * producer could. Elsewhere the symbol stays undefined (weak), which costs one predictable
 * branch per access point. */
extern void smb_access_hook(enum smb_access_point at, const void *ptr, size_t len)
	__attribute__((weak, visibility("default")));

static inline void smb_access(enum smb_access_point at, const void *ptr, size_t len)
{
	if (smb_access_hook)
		smb_access_hook(at, ptr, len);
}

#define SMB_LAYOUT_SHIFT	28
#define SMB_LAYOUT_MASK		(7u << SMB_LAYOUT_SHIFT)
#define SMB_STATES_MASK		((1u << (2 * SMB_MAX_CHUNKS_PER_PAGE)) - 1)
#define SMB_PACKETS_COUNT_MASK	0x3ffu
#define SMB_PACKETS_FLAGS_SHIFT 10

/* The 8-byte chunk header as it sits in shared memory. Access only via the helpers. */
struct smb_chunk_hdr {
	uint32_t chunk_id;
	uint16_t writer_id;
	uint16_t packets;
};

/* A snapshot of a chunk header, taken after the chunk was acquired. */
struct smb_chunk_info {
	uint32_t chunk_id;
	uint16_t writer_id;
	uint16_t count; /* fragments */
	uint8_t flags;	/* enum smb_chunk_flags */
	uint32_t size;	/* whole chunk size, header included (set by smb_acquire_for_reading) */
};

/* ---- geometry ---- */

static inline unsigned smb_layout_nchunks(unsigned layout)
{
	static const uint8_t n[8] = {0, 1, 2, 4, 7, 14, 0, 0};
	return n[layout & 7];
}

/* Whole-chunk size (header included) for a layout; 0 for layouts without chunks. */
static inline size_t smb_chunk_size(size_t page_size, unsigned layout)
{
	unsigned n = smb_layout_nchunks(layout);
	return n ? ((page_size - SMB_PAGE_HDR_SIZE) / n) & ~(size_t)3 : 0;
}

/* ABI validity of a geometry (§4.1): page 4..64 KiB in 4 KiB steps, size a positive
 * multiple of the page. The service applies the stricter smb_geometry_svc_ok. */
static inline bool smb_geometry_abi_ok(size_t size, size_t page_size)
{
	return page_size >= SMB_MIN_PAGE_SIZE && page_size <= SMB_MAX_PAGE_SIZE &&
	       page_size % 4096 == 0 && size >= page_size && size % page_size == 0;
}

/* Service rule (§2.3): page = 4 KiB * 2^k <= 32 KiB, size <= 32 MiB, size % page == 0. */
static inline bool smb_geometry_svc_ok(size_t size, size_t page_size)
{
	return page_size >= SMB_MIN_PAGE_SIZE && page_size <= SMB_SVC_MAX_PAGE_SIZE &&
	       (page_size & (page_size - 1)) == 0 && size >= page_size &&
	       size <= SMB_SVC_MAX_SIZE && size % page_size == 0;
}

static inline uint32_t *smb_page_bitmap(void *base, size_t page_size, size_t page)
{
	return (uint32_t *)((uint8_t *)base + page * page_size);
}

/* Chunk address; chunk must be < smb_layout_nchunks(layout), which keeps it in the page. */
static inline uint8_t *smb_chunk_ptr(void *base, size_t page_size, size_t page, unsigned layout,
				     unsigned chunk)
{
	return (uint8_t *)base + page * page_size + SMB_PAGE_HDR_SIZE +
	       (size_t)chunk * smb_chunk_size(page_size, layout);
}

/* ---- bitmap words ---- */

static inline uint32_t smb_bitmap_load(const uint32_t *bm)
{
	return __atomic_load_n(bm, __ATOMIC_ACQUIRE);
}

static inline unsigned smb_bitmap_layout(uint32_t bitmap)
{
	return (bitmap & SMB_LAYOUT_MASK) >> SMB_LAYOUT_SHIFT;
}

static inline enum smb_chunk_state smb_bitmap_state(uint32_t bitmap, unsigned chunk)
{
	return (enum smb_chunk_state)((bitmap >> (2 * chunk)) & 3);
}

static inline uint32_t smb_bitmap_with_state(uint32_t bitmap, unsigned chunk,
					     enum smb_chunk_state s)
{
	return (bitmap & ~(3u << (2 * chunk))) | ((uint32_t)s << (2 * chunk));
}

/* True when every chunk of the bitmap's layout is Free. */
static inline bool smb_bitmap_all_free(uint32_t bitmap)
{
	unsigned n = smb_layout_nchunks(smb_bitmap_layout(bitmap));
	for (unsigned i = 0; i < n; i++)
		if (smb_bitmap_state(bitmap, i) != SMB_CHUNK_FREE)
			return false;
	return true;
}

/* CAS with acq_rel success ordering; on failure *expected receives the current value. */
static inline bool smb_bitmap_cas(uint32_t *bm, uint32_t *expected, uint32_t desired)
{
	return __atomic_compare_exchange_n(bm, expected, desired, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

/* Moves chunk from state `from` to `to` with up to SMB_CAS_ATTEMPTS CAS retries (the other
 * side may be flipping other chunks of the page concurrently). Fails, returning false, as
 * soon as the layout lacks that chunk or the chunk is not in `from`. */
static inline bool smb_chunk_transition(uint32_t *bm, unsigned chunk, enum smb_chunk_state from,
					enum smb_chunk_state to, unsigned *layout_out)
{
	uint32_t cur = smb_bitmap_load(bm);

	for (int i = 0; i < SMB_CAS_ATTEMPTS; i++) {
		unsigned layout = smb_bitmap_layout(cur);
		if (chunk >= smb_layout_nchunks(layout) || smb_bitmap_state(cur, chunk) != from)
			return false;
		smb_access(SMB_AT_CAS, bm, sizeof(*bm));
		if (smb_bitmap_cas(bm, &cur, smb_bitmap_with_state(cur, chunk, to))) {
			if (layout_out)
				*layout_out = layout;
			return true;
		}
	}
	return false;
}

/* ---- chunk header ---- */

static inline struct smb_chunk_hdr *smb_chunk_hdr(uint8_t *chunk)
{
	return (struct smb_chunk_hdr *)(void *)chunk;
}

/* Reads the header (relaxed: the caller already acquired the chunk through the bitmap, or
 * is scraping and tolerates torn values, which are all bounds-checked later). */
static inline struct smb_chunk_info smb_chunk_read_hdr(uint8_t *chunk)
{
	struct smb_chunk_hdr *h = smb_chunk_hdr(chunk);
	struct smb_chunk_info ci;
	uint16_t packets = __atomic_load_n(&h->packets, __ATOMIC_ACQUIRE);

	ci.chunk_id = __atomic_load_n(&h->chunk_id, __ATOMIC_RELAXED);
	ci.writer_id = __atomic_load_n(&h->writer_id, __ATOMIC_RELAXED);
	ci.count = packets & SMB_PACKETS_COUNT_MASK;
	ci.flags = (uint8_t)(packets >> SMB_PACKETS_FLAGS_SHIFT);
	ci.size = 0;
	return ci;
}

/* The same from a chunk that is not in shared memory (an emulated chunk sent inline, at
 * any alignment): plain unaligned reads. */
static inline struct smb_chunk_info smb_chunk_parse_hdr(const uint8_t *chunk)
{
	struct smb_chunk_hdr h;
	struct smb_chunk_info ci;

	memcpy(&h, chunk, sizeof(h));
	ci.chunk_id = h.chunk_id;
	ci.writer_id = h.writer_id;
	ci.count = h.packets & SMB_PACKETS_COUNT_MASK;
	ci.flags = (uint8_t)(h.packets >> SMB_PACKETS_FLAGS_SHIFT);
	ci.size = 0;
	return ci;
}

static inline uint16_t smb_packets_word(unsigned count, unsigned flags)
{
	return (uint16_t)((count & SMB_PACKETS_COUNT_MASK) | (flags << SMB_PACKETS_FLAGS_SHIFT));
}

/* Producer: publishes the fragment count and flags (release, so the bytes written before
 * are visible to a reader that sees the new count). */
static inline void smb_chunk_set_packets(uint8_t *chunk, unsigned count, unsigned flags)
{
	__atomic_store_n(&smb_chunk_hdr(chunk)->packets, smb_packets_word(count, flags),
			 __ATOMIC_RELEASE);
}

/* Producer: writes the header of a chunk it has just moved to BeingWritten. */
static inline void smb_chunk_init_hdr(uint8_t *chunk, uint32_t chunk_id, uint16_t writer_id,
				      unsigned flags)
{
	struct smb_chunk_hdr *h = smb_chunk_hdr(chunk);

	__atomic_store_n(&h->chunk_id, chunk_id, __ATOMIC_RELAXED);
	__atomic_store_n(&h->writer_id, writer_id, __ATOMIC_RELAXED);
	__atomic_store_n(&h->packets, smb_packets_word(0, flags), __ATOMIC_RELEASE);
}

/* ---- the service's side ---- */

/* Complete -> BeingRead. On success returns the chunk address and its header snapshot. */
static inline uint8_t *smb_acquire_for_reading(void *base, size_t page_size, size_t page,
					       unsigned chunk, struct smb_chunk_info *ci)
{
	unsigned layout;
	uint8_t *c;

	if (!smb_chunk_transition(smb_page_bitmap(base, page_size, page), chunk, SMB_CHUNK_COMPLETE,
				  SMB_CHUNK_BEING_READ, &layout))
		return NULL;
	c = smb_chunk_ptr(base, page_size, page, layout, chunk);
	smb_access(SMB_AT_ACQUIRED, c, smb_chunk_size(page_size, layout));
	*ci = smb_chunk_read_hdr(c);
	ci->size = (uint32_t)smb_chunk_size(page_size, layout);
	return c;
}

/* BeingRead -> Free: clears the header first, then flips the state; when the whole page is
 * Free afterwards, writes 0 to the bitmap so the producer can re-partition it. */
static inline void smb_release_read_chunk(void *base, size_t page_size, size_t page, unsigned chunk,
					  uint8_t *c)
{
	uint32_t *bm = smb_page_bitmap(base, page_size, page);
	struct smb_chunk_hdr *h = smb_chunk_hdr(c);
	uint32_t cur, next;

	__atomic_store_n(&h->writer_id, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->chunk_id, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->packets, 0, __ATOMIC_RELEASE);
	smb_access(SMB_AT_RELEASE, c, SMB_CHUNK_HDR_SIZE);
	cur = smb_bitmap_load(bm);
	for (int i = 0; i < SMB_CAS_ATTEMPTS; i++) {
		/* the producer re-partitioned the page or flipped the state: it broke the
		 * protocol, so leave the page alone rather than write bits of another layout */
		if (chunk >= smb_layout_nchunks(smb_bitmap_layout(cur)) ||
		    smb_bitmap_state(cur, chunk) != SMB_CHUNK_BEING_READ)
			return;
		next = smb_bitmap_with_state(cur, chunk, SMB_CHUNK_FREE);
		if (smb_bitmap_all_free(next))
			next = 0;
		smb_access(SMB_AT_CAS, bm, sizeof(*bm));
		if (smb_bitmap_cas(bm, &cur, next))
			return;
	}
}

/* ---- the producer's side ---- */

/* Partitions a free page (bitmap exactly 0) with layout. */
static inline bool smb_try_partition(void *base, size_t page_size, size_t page, unsigned layout)
{
	uint32_t expected = 0;
	return smb_bitmap_cas(smb_page_bitmap(base, page_size, page), &expected,
			      (uint32_t)layout << SMB_LAYOUT_SHIFT);
}

/* Free -> BeingWritten; returns the chunk address or NULL. */
static inline uint8_t *smb_acquire_for_writing(void *base, size_t page_size, size_t page,
					       unsigned chunk)
{
	unsigned layout;

	if (!smb_chunk_transition(smb_page_bitmap(base, page_size, page), chunk, SMB_CHUNK_FREE,
				  SMB_CHUNK_BEING_WRITTEN, &layout))
		return NULL;
	return smb_chunk_ptr(base, page_size, page, layout, chunk);
}

/* BeingWritten -> Complete, before listing the chunk in CommitData. */
static inline bool smb_mark_complete(void *base, size_t page_size, size_t page, unsigned chunk)
{
	return smb_chunk_transition(smb_page_bitmap(base, page_size, page), chunk,
				    SMB_CHUNK_BEING_WRITTEN, SMB_CHUNK_COMPLETE, NULL);
}

/* ---- fragments ---- */

/* Decodes a fragment size prefix (a varint of 1..4 bytes) at [p, end). Returns the prefix
 * length, or 0 if it is truncated or longer than 4 bytes. */
static inline size_t smb_frag_size(const uint8_t *p, const uint8_t *end, uint32_t *size)
{
	uint32_t v = 0;

	for (size_t i = 0; i < 4 && p + i < end; i++) {
		v |= (uint32_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*size = v;
			return i + 1;
		}
	}
	return 0;
}

/* A peer's SMB fd as every side that maps one requires it (smb.c): a regular file sealed
 * against shrinking, growing and resealing, not against writes, opened read-write, not
 * empty. 0 with *size its length; -EBADF (not a sealable file), -EPERM (seals), -EACCES
 * (not read-write), -EINVAL (empty). */
int sonde__smb_check_fd(int fd, size_t *size);
/* A memfd of size bytes sealed as sonde__smb_check_fd wants it (the service's SMBs, and a
 * producer's own). The fd or -errno. */
int sonde__smb_create(size_t size);

#endif
