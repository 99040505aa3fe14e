/* Regressions found by fuzzing the producer packet validator (fuzz/packet_valid.c) and the
 * hostile shared memory buffer (fuzz/commit_hostile.c). */
#include "../test.h"
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

	ASSERT(!tbuf_packet_valid(forged, sizeof(forged)));
	ASSERT(tbuf_packet_valid(max_field, sizeof(max_field)));
	ASSERT(!tbuf_packet_valid(past_max, sizeof(past_max)));
	ASSERT(tbuf_packet_valid(forged, 2)); /* the timestamp alone is fine */
}
