#include "base/pb.h"

#include "../test.h"

TEST(pb_varint_roundtrip_and_limits)
{
	static const uint64_t values[] = {0, 1, 127, 128, 300, 16383, 16384, UINT32_MAX,
					  (1ULL << 63) - 1, UINT64_MAX};
	uint8_t out[PB_VARINT_MAX];
	uint64_t v;

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		size_t n = sonde__pb_varint_encode(out, values[i]);
		ASSERT_UINT(sonde__pb_varint_decode(out, out + n, &v), ==, n);
		ASSERT_UINT(v, ==, values[i]);
		/* one byte short is truncated */
		ASSERT_UINT(sonde__pb_varint_decode(out, out + n - 1, &v), ==, 0);
	}
	uint8_t eleven[11];
	memset(eleven, 0xff, sizeof(eleven));
	ASSERT_UINT(sonde__pb_varint_decode(eleven, eleven + 11, &v), ==, 0);
	ASSERT_INT(pb_unzigzag(pb_zigzag(-5)), ==, -5);
	ASSERT_UINT(pb_zigzag(-1), ==, 1);
}

TEST(pb_writer_matches_reference_bytes)
{
	struct buf b = BUF_INIT;

	/* The IPC BindService frame payload of the wire spec's worked example. */
	sonde__pb_put_varint(&b, 2, 1);
	size_t m = sonde__pb_begin(&b, 3);
	sonde__pb_put_string(&b, 1, "ProducerPort");
	sonde__pb_end(&b, m);
	static const uint8_t expect[] = {0x10, 0x01, 0x1a, 0x8e, 0x80, 0x80, 0x00, 0x0a, 0x0c,
					 'P',  'r',  'o',  'd',	 'u',  'c',  'e',  'r',	 'P',
					 'o',  'r',  't'};
	ASSERT_UINT(b.len, ==, sizeof(expect));
	ASSERT_MEM_EQ(b.data, expect, sizeof(expect));

	struct pb_reader r = pb_reader_init(b.data, b.len);
	struct pb_field f;
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
	ASSERT_UINT(f.num, ==, 2);
	ASSERT_UINT(f.u, ==, 1);
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
	ASSERT_UINT(f.num, ==, 3);
	ASSERT_UINT(f.len, ==, 14);
	struct pb_reader sub = pb_sub(&f);
	ASSERT_INT(sonde__pb_next(&sub, &f), ==, 1);
	ASSERT_UINT(f.len, ==, 12);
	ASSERT_MEM_EQ(f.ptr, "ProducerPort", 12);
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 0);
	sonde__buf_free(&b);
}

TEST(pb_reader_rejects_malformed)
{
	struct pb_field f;
	/* length past the end */
	static const uint8_t overlong[] = {0x0a, 0x05, 'a'};
	struct pb_reader r = pb_reader_init(overlong, sizeof(overlong));
	ASSERT_ERR(sonde__pb_next(&r, &f), -SONDE_E_FORMAT);
	/* field number 0 */
	static const uint8_t zero[] = {0x00, 0x01};
	r = pb_reader_init(zero, sizeof(zero));
	ASSERT_ERR(sonde__pb_next(&r, &f), -SONDE_E_FORMAT);
	/* group wire type */
	static const uint8_t group[] = {0x0b};
	r = pb_reader_init(group, sizeof(group));
	ASSERT_ERR(sonde__pb_next(&r, &f), -SONDE_E_FORMAT);
	/* truncated fixed64 */
	static const uint8_t fixed[] = {0x09, 1, 2, 3};
	r = pb_reader_init(fixed, sizeof(fixed));
	ASSERT_ERR(sonde__pb_next(&r, &f), -SONDE_E_FORMAT);
	/* fixed32 and double round trip */
	struct buf b = BUF_INIT;
	sonde__pb_put_fixed32(&b, 7, 0xdeadbeef);
	sonde__pb_put_double(&b, 8, 2.5);
	r = pb_reader_init(b.data, b.len);
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
	ASSERT_UINT(f.u, ==, 0xdeadbeef);
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 1);
	double d;
	memcpy(&d, &f.u, 8);
	ASSERT_DOUBLE_NEAR(d, 2.5, 0);
	sonde__buf_free(&b);
	/* an empty buffer that never had storage (an empty field's bytes) reads as empty
	 * (under UBSan, NULL + 0 is undefined) */
	r = pb_reader_init(NULL, 0);
	ASSERT_INT(sonde__pb_next(&r, &f), ==, 0);
}
