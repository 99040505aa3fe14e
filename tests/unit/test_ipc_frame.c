/* The IPC frame codec and channel: byte-exact encoding, decoding of every variant,
 * reassembly across arbitrary splits, fd passing bound to its frame, the size limit. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../test.h"
#include "ipc/frame.h"
#include "ipc/smb.h"

static const char *const producer_methods[] = {"InitializeConnection", "RegisterDataSource",
					       "UnregisterDataSource"};

TEST(ipc_frame_bind_service_bytes_match_spec)
{
	/* the worked example of perfetto-wire.md §1.7 */
	static const uint8_t want[] = {0x12, 0x00, 0x00, 0x00, 0x10, 0x01, 0x1A, 0x0E,
				       0x0A, 0x0C, 'P',	 'r',  'o',  'd',  'u',	 'c',
				       'e',  'r',  'P',	 'o',  'r',  't'};
	struct ipc_frame f = {.request_id = 1, .msg = IPC_MSG_BIND_SERVICE};
	struct buf b = BUF_INIT;

	f.name = "ProducerPort";
	f.name_len = 12;
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_UINT(b.len, ==, sizeof(want));
	ASSERT_MEM_EQ(b.data, want, sizeof(want));
	sonde__buf_free(&b);
}

TEST(ipc_frame_roundtrip_all_variants)
{
	struct buf b = BUF_INIT;
	struct ipc_frame f, g;
	struct ipc_method m;
	size_t it = 0;

	f = (struct ipc_frame){.request_id = 7,
			       .msg = IPC_MSG_BIND_SERVICE_REPLY,
			       .success = true,
			       .service_id = 1,
			       .method_names = producer_methods,
			       .n_methods = 3};
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_OK(sonde__ipc_frame_decode(b.data + 4, b.len - 4, &g));
	ASSERT_UINT(g.msg, ==, IPC_MSG_BIND_SERVICE_REPLY);
	ASSERT(g.success);
	ASSERT_UINT(g.request_id, ==, 7);
	ASSERT_INT(sonde__ipc_methods_next(&g, &it, &m), ==, 1);
	ASSERT_UINT(m.id, ==, 1);
	ASSERT_UINT(m.name_len, ==, strlen("InitializeConnection"));
	ASSERT_UINT(sonde__ipc_method_id(&g, "UnregisterDataSource"), ==, 3);
	ASSERT_UINT(sonde__ipc_method_id(&g, "Nope"), ==, 0);

	sonde__buf_reset(&b);
	f = (struct ipc_frame){.request_id = 300,
			       .msg = IPC_MSG_INVOKE_METHOD,
			       .service_id = 1,
			       .method_id = 4,
			       .data = (const uint8_t *)"\x08\x01",
			       .data_len = 2,
			       .drop_reply = true};
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_OK(sonde__ipc_frame_decode(b.data + 4, b.len - 4, &g));
	ASSERT_UINT(g.msg, ==, IPC_MSG_INVOKE_METHOD);
	ASSERT_UINT(g.request_id, ==, 300);
	ASSERT_UINT(g.method_id, ==, 4);
	ASSERT(g.drop_reply);
	ASSERT_UINT(g.data_len, ==, 2);
	ASSERT_MEM_EQ(g.data, "\x08\x01", 2);

	sonde__buf_reset(&b);
	f = (struct ipc_frame){.request_id = 9,
			       .msg = IPC_MSG_INVOKE_METHOD_REPLY,
			       .success = true,
			       .has_more = true,
			       .data = (const uint8_t *)"",
			       .data_len = 0};
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_OK(sonde__ipc_frame_decode(b.data + 4, b.len - 4, &g));
	ASSERT(g.success && g.has_more);
	ASSERT(g.data != NULL);

	sonde__buf_reset(&b);
	f = (struct ipc_frame){.request_id = 5,
			       .msg = IPC_MSG_REQUEST_ERROR,
			       .name = "unknown request",
			       .name_len = 15};
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_OK(sonde__ipc_frame_decode(b.data + 4, b.len - 4, &g));
	ASSERT_UINT(g.msg, ==, IPC_MSG_REQUEST_ERROR);
	ASSERT_UINT(g.name_len, ==, 15);
	sonde__buf_free(&b);
}

TEST(ipc_frame_encode_rejects_oversize)
{
	static uint8_t big[IPC_MAX_PAYLOAD];
	struct ipc_frame f = {.request_id = 1,
			      .msg = IPC_MSG_INVOKE_METHOD_REPLY,
			      .data = big,
			      .data_len = sizeof(big)};
	struct buf b = BUF_INIT;

	ASSERT_ERR(sonde__ipc_frame_encode(&b, &f), -SONDE_E_LIMIT);
	ASSERT_UINT(b.len, ==, 0);
	f.data_len = IPC_MAX_PAYLOAD - 16;
	ASSERT_OK(sonde__ipc_frame_encode(&b, &f));
	ASSERT_UINT(b.len, <=, IPC_BUFFER_SIZE);
	sonde__buf_free(&b);
}

static void chan_pair(struct ipc_chan *a, struct ipc_chan *b)
{
	int sv[2];

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	ASSERT_OK(sonde__ipc_chan_init(a, sv[0]));
	ASSERT_OK(sonde__ipc_chan_init(b, sv[1]));
	ASSERT_INT(a->peer_pid, ==, getpid());
	ASSERT_UINT(a->peer_uid, ==, getuid());
}

TEST(ipc_chan_reassembles_byte_by_byte)
{
	struct ipc_chan a, b;
	struct ipc_frame f = {.request_id = 1,
			      .msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = 1,
			      .method_id = 2,
			      .data = (const uint8_t *)"abc",
			      .data_len = 3};
	struct buf enc = BUF_INIT;
	int fd, got = 0;

	chan_pair(&a, &b);
	for (int i = 0; i < 3; i++) {
		f.request_id = (uint64_t)i + 1;
		ASSERT_OK(sonde__ipc_frame_encode(&enc, &f));
	}
	/* an empty frame and an unparsable one in the middle are skipped */
	sonde__buf_append(&enc, "\0\0\0\0\2\0\0\0\xff\xff", 10);
	f.request_id = 4;
	ASSERT_OK(sonde__ipc_frame_encode(&enc, &f));
	for (size_t i = 0; i < enc.len; i++) {
		ASSERT_INT(write(a.fd, enc.data + i, 1), ==, 1);
		ASSERT_OK(sonde__ipc_chan_read(&b));
		struct ipc_frame g;
		while (sonde__ipc_chan_next(&b, &g, &fd) > 0) {
			got++;
			ASSERT_UINT(g.request_id, ==, (uint64_t)got);
			ASSERT_INT(fd, ==, -1);
			ASSERT_MEM_EQ(g.data, "abc", 3);
		}
	}
	ASSERT_INT(got, ==, 4);
	sonde__buf_free(&enc);
	sonde__ipc_chan_close(&a);
	ASSERT_ERR(sonde__ipc_chan_read(&b), -ECONNRESET);
	sonde__ipc_chan_close(&b);
	sonde__ipc_chan_close(&b);
}

TEST(ipc_chan_passes_fd_with_its_frame)
{
	struct ipc_chan a, b;
	struct ipc_frame f = {.msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = 1,
			      .method_id = 1,
			      .data = (const uint8_t *)"",
			      .data_len = 0};
	int mfd = memfd_create("t", MFD_CLOEXEC), fd;
	struct stat st;

	ASSERT(mfd >= 0);
	ASSERT_OK(ftruncate(mfd, 12288));
	chan_pair(&a, &b);
	/* frames before and after the fd frame, all queued before the peer reads */
	f.request_id = 1;
	ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
	f.request_id = 2;
	ASSERT_OK(sonde__ipc_chan_send(&a, &f, mfd));
	f.request_id = 3;
	ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
	close(mfd);
	for (int want = 1; want <= 3;) {
		ASSERT_OK(sonde__ipc_chan_read(&b));
		struct ipc_frame g;
		while (sonde__ipc_chan_next(&b, &g, &fd) > 0) {
			ASSERT_UINT(g.request_id, ==, (uint64_t)want);
			if (want == 2) {
				ASSERT(fd >= 0);
				ASSERT_OK(fstat(fd, &st));
				ASSERT_INT(st.st_size, ==, 12288);
				ASSERT_INT(fcntl(fd, F_GETFD) & FD_CLOEXEC, ==, FD_CLOEXEC);
				close(fd);
			} else {
				ASSERT_INT(fd, ==, -1);
			}
			want++;
		}
	}
	sonde__ipc_chan_close(&a);
	sonde__ipc_chan_close(&b);
}

TEST(ipc_chan_rejects_oversize_header)
{
	struct ipc_chan a, b;
	struct ipc_frame g;
	uint32_t hdr = IPC_MAX_PAYLOAD + 1;

	chan_pair(&a, &b);
	ASSERT_INT(write(a.fd, &hdr, 4), ==, 4);
	ASSERT_OK(sonde__ipc_chan_read(&b));
	ASSERT_ERR(sonde__ipc_chan_next(&b, &g, NULL), -SONDE_E_PROTOCOL);
	sonde__ipc_chan_close(&a);
	sonde__ipc_chan_close(&b);
}

TEST(ipc_chan_large_frames_flow_through_a_full_socket)
{
	static uint8_t payload[100000];
	struct ipc_chan a, b;
	struct ipc_frame f = {.msg = IPC_MSG_INVOKE_METHOD_REPLY,
			      .success = true,
			      .data = payload,
			      .data_len = sizeof(payload)};
	int got = 0;

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	chan_pair(&a, &b);
	for (int i = 0; i < 40; i++) {
		f.request_id = (uint64_t)i + 1;
		ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
	}
	ASSERT(ipc_chan_tx_pending(&a) > 0); /* a socket buffer holds far less than 4 MB */
	while (got < 40) {
		ASSERT_OK(sonde__ipc_chan_flush(&a));
		ASSERT_OK(sonde__ipc_chan_read(&b));
		struct ipc_frame g;
		while (sonde__ipc_chan_next(&b, &g, NULL) > 0) {
			ASSERT_UINT(g.request_id, ==, (uint64_t)++got);
			ASSERT_UINT(g.data_len, ==, sizeof(payload));
			ASSERT_MEM_EQ(g.data, payload, sizeof(payload));
		}
	}
	ASSERT_UINT(ipc_chan_tx_pending(&a), ==, 0);
	sonde__ipc_chan_close(&a);
	sonde__ipc_chan_close(&b);
}

/* One read call takes what the socket holds: its reads go on while they come back full and
 * end at the first that comes back short (it took everything; no read is made only to hear
 * EAGAIN). A 100 KB frame, larger than a first read, between two small ones is taken
 * whole; a frame written after the call waits for the next one, and the end of the
 * stream for the one after. */
TEST(ipc_chan_read_takes_what_the_socket_holds_in_one_call)
{
	static uint8_t payload[100000];
	struct ipc_chan a, b;
	struct ipc_frame f = {.msg = IPC_MSG_INVOKE_METHOD_REPLY, .success = true}, g;

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13);
	chan_pair(&a, &b);
	for (uint64_t id = 1; id <= 3; id++) {
		f.request_id = id;
		f.data = id == 2 ? payload : (const uint8_t *)"abc";
		f.data_len = id == 2 ? sizeof(payload) : 3;
		ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
	}
	ASSERT_UINT(ipc_chan_tx_pending(&a), ==, 0);
	ASSERT_OK(sonde__ipc_chan_read(&b));
	for (uint64_t id = 1; id <= 3; id++) {
		ASSERT_INT(sonde__ipc_chan_next(&b, &g, NULL), ==, 1);
		ASSERT_UINT(g.request_id, ==, id);
		ASSERT_UINT(g.data_len, ==, id == 2 ? sizeof(payload) : 3);
		if (id == 2)
			ASSERT_MEM_EQ(g.data, payload, sizeof(payload));
	}
	ASSERT_INT(sonde__ipc_chan_next(&b, &g, NULL), ==, 0);

	f.request_id = 4;
	ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
	ASSERT_OK(sonde__ipc_chan_read(&b));
	ASSERT_INT(sonde__ipc_chan_next(&b, &g, NULL), ==, 1);
	ASSERT_UINT(g.request_id, ==, 4);
	sonde__ipc_chan_close(&a);
	ASSERT_ERR(sonde__ipc_chan_read(&b), -ECONNRESET);
	sonde__ipc_chan_close(&b);
}

/* An InvokeMethod sent in pieces (shared-memory emulation's inline chunks) is the same
 * bytes as one encoded whole, also when the socket takes only part of a frame and the rest
 * is queued behind it, and frames sent whole and in pieces keep their order. */
TEST(ipc_chan_send_iov_is_byte_for_byte_a_whole_frame)
{
	static uint8_t payload[90000];
	struct ipc_chan a, b;
	struct ipc_frame f = {.msg = IPC_MSG_INVOKE_METHOD,
			      .service_id = 3,
			      .method_id = 9,
			      .data = payload,
			      .data_len = sizeof(payload),
			      .drop_reply = true};
	struct buf whole = BUF_INIT, split = BUF_INIT;
	uint8_t tail[2];
	size_t tail_len;
	int got = 0;

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13);
	f.request_id = 77;
	ASSERT_OK(sonde__ipc_frame_encode(&whole, &f));
	ASSERT_OK(sonde__ipc_frame_encode_invoke_head(&split, &f, tail, &tail_len));
	sonde__buf_append(&split, payload, sizeof(payload));
	sonde__buf_append(&split, tail, tail_len);
	ASSERT_UINT(split.len, ==, whole.len);
	ASSERT_MEM_EQ(split.data, whole.data, whole.len);

	chan_pair(&a, &b);
	for (int i = 0; i < 40; i++) {
		struct iovec v[3] = {
			{payload, 10}, {payload + 10, 50000}, {payload + 50010, 39990}};
		f.request_id = (uint64_t)i + 1;
		f.drop_reply = i % 3 == 0;
		if (i % 2)
			ASSERT_OK(sonde__ipc_chan_send(&a, &f, -1));
		else
			ASSERT_OK(sonde__ipc_chan_send_iov(&a, &f, v, 3));
	}
	ASSERT(ipc_chan_tx_pending(&a) > 0); /* a socket buffer holds far less than 3.6 MB */
	while (got < 40) {
		ASSERT_OK(sonde__ipc_chan_flush(&a));
		ASSERT_OK(sonde__ipc_chan_read(&b));
		struct ipc_frame g;
		while (sonde__ipc_chan_next(&b, &g, NULL) > 0) {
			ASSERT_UINT(g.request_id, ==, (uint64_t)++got);
			ASSERT_UINT(g.msg, ==, IPC_MSG_INVOKE_METHOD);
			ASSERT_UINT(g.method_id, ==, 9);
			ASSERT(g.drop_reply == ((got - 1) % 3 == 0));
			ASSERT_UINT(g.data_len, ==, sizeof(payload));
			ASSERT_MEM_EQ(g.data, payload, sizeof(payload));
		}
	}
	ASSERT_UINT(ipc_chan_tx_pending(&a), ==, 0);
	sonde__ipc_chan_close(&a);
	sonde__ipc_chan_close(&b);
	sonde__buf_free(&whole);
	sonde__buf_free(&split);
}

TEST(ipc_smb_geometry_and_chunk_states)
{
	static const size_t want_4k[] = {0, 4088, 2044, 1020, 584, 292, 0, 0};
	size_t page = 4096;
	uint8_t *smb = aligned_alloc(4096, 2 * page);
	struct smb_chunk_info ci;

	for (unsigned l = 0; l < 8; l++)
		ASSERT_UINT(smb_chunk_size(page, l), ==, want_4k[l]);
	ASSERT(smb_geometry_svc_ok(262144, 4096));
	ASSERT(!smb_geometry_svc_ok(262144, 12288)); /* not 4 KiB * 2^k */
	ASSERT(smb_geometry_abi_ok(12288 * 4, 12288));
	ASSERT(!smb_geometry_abi_ok(4096 * 3 + 1, 4096));
	memset(smb, 0, 2 * page);
	ASSERT(smb_try_partition(smb, page, 1, SMB_LAYOUT_DIV4));
	ASSERT(!smb_try_partition(smb, page, 1, SMB_LAYOUT_DIV1));
	uint8_t *c = smb_acquire_for_writing(smb, page, 1, 2);
	ASSERT(c == smb + page + 8 + 2 * 1020);
	ASSERT(smb_acquire_for_writing(smb, page, 1, 4) == NULL);      /* out of layout */
	ASSERT(smb_acquire_for_reading(smb, page, 1, 2, &ci) == NULL); /* not complete yet */
	smb_chunk_init_hdr(c, 77, 5, 0);
	smb_chunk_set_packets(c, 3, SMB_FLAG_LAST_PACKET_CONTINUES);
	ASSERT(smb_mark_complete(smb, page, 1, 2));
	ASSERT(smb_acquire_for_reading(smb, page, 1, 2, &ci) == c);
	ASSERT_UINT(ci.chunk_id, ==, 77);
	ASSERT_UINT(ci.writer_id, ==, 5);
	ASSERT_UINT(ci.count, ==, 3);
	ASSERT_UINT(ci.flags, ==, SMB_FLAG_LAST_PACKET_CONTINUES);
	smb_release_read_chunk(smb, page, 1, 2, c);
	/* the only used chunk was freed: the page is un-partitioned */
	ASSERT_UINT(smb_bitmap_load(smb_page_bitmap(smb, page, 1)), ==, 0);
	ASSERT_UINT(smb_chunk_read_hdr(c).writer_id, ==, 0);
	free(smb);
}
