/* Fuzz target: what the relay parses (src/relay/xlate.c): a local producer's CommitData
 * against its SMB, which it may rewrite while the relay reads it, its
 * InitializeConnectionRequest, and the host's GetAsyncCommandResponse.
 *
 * Input: [u8 flags][u16 len of CommitData args][args][u16 len of init args][init args]
 * [u16 len of command][command][SMB bytes ...][mutation schedule at the tail: what is left
 * after SMB_BYTES]. The SMB is laid out from the input (any bitmap, headers, payloads);
 * at every access point of the relay's reads the next mutation rewrites one byte of it.
 *
 * Invariants checked (abort on violation), besides ASan/UBSan's:
 *   - every request emitted is well-formed protobuf no larger than the frame allows, and
 *     every inline chunk the relay built is at most a page;
 *   - without mutations, a chunk the relay took (BeingRead) is released before commit
 *     returns: no chunk is left BeingRead that was not so before;
 *   - a malformed request emits nothing;
 *   - the rewritten InitializeConnectionRequest has no producer_provided_shmem, and a
 *     rewritten command parses, with setup_tracing's page size the relay's own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

#include "base/pb.h"
#include "ipc/frame.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "relay/relay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { PAGE = 4096, NPAGES = 4, SMB_BYTES = PAGE * NPAGES };

static uint8_t smb[SMB_BYTES] __attribute__((aligned(64)));
static const uint8_t *mut, *mut_end;
static size_t emitted, input_len;

void smb_access_hook(enum smb_access_point at, const void *ptr, size_t len)
{
	const uint8_t *p = ptr;

	if (p < smb || p + len > smb + SMB_BYTES)
		abort();
	if (mut + 3 > mut_end)
		return;
	size_t off = ((size_t)mut[0] | (size_t)mut[1] << 8) % SMB_BYTES;
	smb[off] = mut[2];
	mut += 3;
}

static void check_pb(const uint8_t *p, size_t n)
{
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f, g;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num != PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE || f.wire != PB_LEN)
			continue;
		struct pb_reader mr = pb_sub(&f);
		while ((rc = sonde__pb_next(&mr, &g)) > 0)
			/* one the relay built is at most a page; one the producer sent
			 * inline went through unchanged, from the input */
			if (g.num == PF_CHUNKS_TO_MOVE_DATA && g.wire == PB_LEN && g.len > PAGE &&
			    g.len > input_len)
				abort();
		if (rc < 0)
			abort();
	}
	if (rc < 0)
		abort();
}

static int emit(void *ctx, const uint8_t *args, size_t len, bool last)
{
	if (len > IPC_MAX_PAYLOAD - 64)
		abort();
	check_pb(args, len);
	emitted++;
	return 0;
}

static size_t take16(const uint8_t **p, const uint8_t *end)
{
	if (end - *p < 2)
		return 0;
	size_t n = (size_t)(*p)[0] | (size_t)(*p)[1] << 8;
	*p += 2;
	return n;
}

static void part(const uint8_t **p, const uint8_t *end, const uint8_t **out, size_t *n)
{
	size_t k = take16(p, end);

	if (k > (size_t)(end - *p))
		k = (size_t)(end - *p);
	*out = *p;
	*n = k;
	*p += k;
}

static unsigned being_read(void)
{
	unsigned n = 0;

	for (size_t pg = 0; pg < NPAGES; pg++) {
		uint32_t bm = smb_bitmap_load(smb_page_bitmap(smb, PAGE, pg));
		for (unsigned c = 0; c < smb_layout_nchunks(smb_bitmap_layout(bm)); c++)
			n += smb_bitmap_state(bm, c) == SMB_CHUNK_BEING_READ;
	}
	return n;
}

static void check_init(const uint8_t *a, size_t n)
{
	struct relay_init ri;
	struct buf out = BUF_INIT;

	if (sonde__relay_init_req(a, n, &ri, &out) == 0) {
		struct pb_reader r = pb_reader_init(out.data, out.len);
		struct pb_field f;
		int rc;
		while ((rc = sonde__pb_next(&r, &f)) > 0)
			if (f.num == PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM)
				abort();
		if (rc < 0)
			abort();
		size_t sz, pg;
		sonde__relay_smb_geometry(ri.page_hint / 1024, &ri, 1u << 20, &sz, &pg);
		if (!smb_geometry_svc_ok(sz, pg) || sz > (1u << 20))
			abort();
	}
	sonde__buf_free(&out);
}

static void check_cmd(const uint8_t *c, size_t n, uint32_t page_kb)
{
	struct buf out = BUF_INIT;
	uint32_t host_kb;

	if (sonde__relay_cmd(c, n, page_kb, &host_kb, &out) == 1) {
		struct pb_reader r = pb_reader_init(out.data, out.len);
		struct pb_field f, g;
		int rc;
		while ((rc = sonde__pb_next(&r, &f)) > 0) {
			if (f.num != PF_ASYNC_CMD_SETUP_TRACING || f.wire != PB_LEN)
				continue;
			struct pb_reader s = pb_sub(&f);
			uint64_t kb = 0;
			while (sonde__pb_next(&s, &g) > 0)
				if (g.num == PF_SETUP_TRACING_PAGE_SIZE_KB)
					kb = g.u;
			if (kb != page_kb)
				abort();
		}
		if (rc < 0)
			abort();
	} else if (out.len) {
		abort(); /* nothing written unless rewritten */
	}
	sonde__buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size, *args, *init, *cmd;
	size_t nargs, ninit, ncmd;
	struct buf scratch = BUF_INIT;

	if (size < 1)
		return 0;
	uint8_t flags = *p++;
	part(&p, end, &args, &nargs);
	part(&p, end, &init, &ninit);
	part(&p, end, &cmd, &ncmd);
	size_t nsmb = (size_t)(end - p) < SMB_BYTES ? (size_t)(end - p) : SMB_BYTES;
	memset(smb, 0, sizeof(smb));
	memcpy(smb, p, nsmb);
	p += nsmb;
	mut = (flags & 1) ? p : end;
	mut_end = end;
	struct relay_smb rs = {smb, SMB_BYTES, PAGE, NPAGES};
	if (flags & 2)
		rs.base = NULL; /* no SMB yet: every move is dropped */
	unsigned before = being_read();
	emitted = 0;
	input_len = size;
	int rc = sonde__relay_commit(&rs, args, nargs, &scratch, emit, NULL);
	if (rc == -SONDE_E_FORMAT && emitted)
		abort();
	if (!(flags & 1) && being_read() > before)
		abort();
	sonde__buf_free(&scratch);
	check_init(init, ninit);
	check_cmd(cmd, ncmd, (flags & 4) ? 0 : 4);
	return 0;
}
