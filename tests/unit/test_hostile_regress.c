/* Regressions found by fuzzing the producer packet validator (fuzz/packet_valid.c) and the
 * hostile shared memory buffer (fuzz/commit_hostile.c). */
#include "../test.h"
#include "ipc/smb.h"
#include "service/tbuf.h"

/* A tag varint of 2^32 or more: its low 32 bits are the tag of trusted_uid (field 3,
 * varint), which a reader that truncates tags to 32 bits would take as a forged
 * trusted_uid. It is not a valid protobuf field and must be dropped. */
TEST(hostile_validator_rejects_tags_above_32_bits)
{
	static const uint8_t forged[] = {0x40, 0x05, 0x98, 0x80, 0x80, 0x80, 0x10, 0x07};
	/* the largest legal field number, 2^29 - 1, varint: tag 0xFFFFFFF8 */
	static const uint8_t max_field[] = {0x40, 0x05, 0xf8, 0xff, 0xff, 0xff, 0x0f, 0x07};
	/* field 2^29 (tag 2^32): one past it */
	static const uint8_t past_max[] = {0x40, 0x05, 0x80, 0x80, 0x80, 0x80, 0x10, 0x07};

	ASSERT(!sonde__tbuf_packet_valid(forged, sizeof(forged)));
	ASSERT(sonde__tbuf_packet_valid(max_field, sizeof(max_field)));
	ASSERT(!sonde__tbuf_packet_valid(past_max, sizeof(past_max)));
	ASSERT(sonde__tbuf_packet_valid(forged, 2)); /* the timestamp alone is fine */
}

/* The producer re-partitions a page while the service holds one of its chunks: releasing
 * the chunk must not write state bits that belong to no chunk of the new layout. */
TEST(hostile_release_after_relayout_leaves_page_alone)
{
	static uint8_t smb[4096] __attribute__((aligned(4096)));
	uint32_t *bm = smb_page_bitmap(smb, sizeof(smb), 0);
	struct smb_chunk_info ci;

	ASSERT(smb_try_partition(smb, sizeof(smb), 0, SMB_LAYOUT_DIV4));
	ASSERT_NOT_NULL(smb_acquire_for_writing(smb, sizeof(smb), 0, 2));
	ASSERT(smb_mark_complete(smb, sizeof(smb), 0, 2));
	uint8_t *c = ASSERT_NOT_NULL(smb_acquire_for_reading(smb, sizeof(smb), 0, 2, &ci));
	/* Div2 has chunks 0 and 1 only; chunk 2's bits still read BeingRead */
	uint32_t hostile = (smb_bitmap_load(bm) & ~SMB_LAYOUT_MASK) | (uint32_t)SMB_LAYOUT_DIV2
									      << SMB_LAYOUT_SHIFT;
	__atomic_store_n(bm, hostile, __ATOMIC_RELEASE);
	smb_release_read_chunk(smb, sizeof(smb), 0, 2, c);
	ASSERT_UINT(smb_bitmap_load(bm), ==, hostile);
}
