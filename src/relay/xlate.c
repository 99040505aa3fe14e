/* The relay's shared-memory translation (relay/relay.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <sonde/error.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "relay/relay.h"

/* A field's bytes as they came, tag included: [start, r->p) after sonde__pb_next. */
static void put_raw(struct buf *b, const uint8_t *start, const struct pb_reader *r)
{
	sonde__buf_append(b, start, (size_t)(r->p - start));
}

struct move {
	uint64_t page, chunk, target;
	bool inline_data;
};

static int parse_move(const struct pb_field *e, struct move *m)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	int rc;

	*m = (struct move){.page = UINT64_MAX, .chunk = UINT64_MAX};
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num == PF_CHUNKS_TO_MOVE_DATA && f.wire == PB_LEN)
			m->inline_data = true;
		else if (f.wire != PB_VARINT)
			continue;
		else if (f.num == PF_CHUNKS_TO_MOVE_PAGE)
			m->page = f.u;
		else if (f.num == PF_CHUNKS_TO_MOVE_CHUNK)
			m->chunk = f.u;
		else if (f.num == PF_CHUNKS_TO_MOVE_TARGET_BUFFER)
			m->target = f.u;
	}
	return rc;
}

/* Takes the chunk out of the SMB into out as an inline ChunksToMove. False when the chunk
 * is not there to take. */
static bool put_inline(const struct relay_smb *smb, const struct move *m, struct buf *out)
{
	struct smb_chunk_info ci;
	struct smb_chunk_hdr h;
	uint8_t *ch;

	if (!smb->base || m->page >= smb->num_pages || m->chunk >= SMB_MAX_CHUNKS_PER_PAGE)
		return false;
	ch = smb_acquire_for_reading(smb->base, smb->page_size, m->page, (unsigned)m->chunk, &ci);
	if (!ch)
		return false;
	/* the header as acquired, not as the producer may have rewritten it since */
	h = (struct smb_chunk_hdr){ci.chunk_id, ci.writer_id, smb_packets_word(ci.count, ci.flags)};
	size_t mk = sonde__pb_begin(out, PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE);
	sonde__pb_put_varint(out, PF_CHUNKS_TO_MOVE_PAGE, m->page);
	sonde__pb_put_varint(out, PF_CHUNKS_TO_MOVE_CHUNK, m->chunk);
	sonde__pb_put_varint(out, PF_CHUNKS_TO_MOVE_TARGET_BUFFER, m->target);
	sonde__pb_put_tag(out, PF_CHUNKS_TO_MOVE_DATA, PB_LEN);
	sonde__pb_put_varint_raw(out, ci.size);
	sonde__buf_append(out, &h, sizeof(h));
	const uint8_t *payload = ch + SMB_CHUNK_HDR_SIZE;
	size_t plen = ci.size - SMB_CHUNK_HDR_SIZE;
	smb_access(SMB_AT_COPY, payload, plen);
	sonde__buf_append(out, payload, plen);
	smb_access(SMB_AT_COPIED, payload, plen);
	sonde__pb_end(out, mk);
	smb_release_read_chunk(smb->base, smb->page_size, m->page, (unsigned)m->chunk, ch);
	return true;
}

/* Validates the whole request before anything leaves the SMB: a malformed one is refused
 * whole, with every chunk still in place. */
static int validate_commit(const uint8_t *args, size_t len)
{
	struct pb_reader r = pb_reader_init(args, len);
	struct pb_field f;
	struct move m;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0)
		if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE && f.wire == PB_LEN &&
		    parse_move(&f, &m) < 0)
			return -SONDE_E_FORMAT;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

int sonde__relay_commit(const struct relay_smb *smb, const uint8_t *args, size_t len,
			struct buf *scratch, relay_emit_fn emit, void *ctx)
{
	struct pb_reader r = pb_reader_init(args, len);
	struct pb_field f;
	uint64_t flush_id = 0;
	bool has_flush = false;
	int rc;

	if (validate_commit(args, len) < 0)
		return -SONDE_E_FORMAT;
	sonde__buf_reset(scratch);
	for (;;) {
		const uint8_t *start = r.p;
		if (sonde__pb_next(&r, &f) <= 0)
			break;
		size_t elen = (size_t)(r.p - start);
		struct move m;
		bool smb_move = f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE && f.wire == PB_LEN &&
				parse_move(&f, &m) >= 0 && !m.inline_data;
		if (smb_move)
			elen = smb->page_size + 32;
		if (f.num == PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID && f.wire == PB_VARINT) {
			flush_id = f.u, has_flush = true;
			continue;
		}
		if (scratch->len && scratch->len + elen > RELAY_COMMIT_SOFT_MAX) {
			if (buf_error(scratch) < 0)
				return -ENOMEM;
			if ((rc = emit(ctx, scratch->data, scratch->len, false)) < 0)
				return rc;
			sonde__buf_reset(scratch);
		}
		if (smb_move)
			put_inline(smb, &m, scratch);
		else
			put_raw(scratch, start, &r);
	}
	if (has_flush)
		sonde__pb_put_varint(scratch, PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID, flush_id);
	if (buf_error(scratch) < 0)
		return -ENOMEM;
	return emit(ctx, scratch->data, scratch->len, true);
}

int sonde__relay_init_req(const uint8_t *args, size_t len, struct relay_init *ri, struct buf *out)
{
	struct pb_reader r = pb_reader_init(args, len);
	struct pb_field f;
	int rc;

	*ri = (struct relay_init){0};
	for (;;) {
		const uint8_t *start = r.p;
		if ((rc = sonde__pb_next(&r, &f)) <= 0)
			break;
		/* left out whatever its wire type: the host must not hear of an SMB */
		if (f.num == PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM) {
			ri->provided |= f.wire == PB_VARINT && f.u != 0;
			continue;
		}
		if (f.wire == PB_VARINT && f.num == PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES)
			ri->page_hint = f.u > UINT32_MAX ? 0 : (uint32_t)f.u;
		else if (f.wire == PB_VARINT && f.num == PF_INIT_CONN_REQ_SIZE_HINT_BYTES)
			ri->size_hint = f.u > UINT32_MAX ? 0 : (uint32_t)f.u;
		put_raw(out, start, &r);
	}
	if (rc < 0)
		return -SONDE_E_FORMAT;
	return buf_error(out) < 0 ? -ENOMEM : 0;
}

void sonde__relay_init_resp(struct buf *out, bool adopted)
{
	/* no direct_smb_patching_supported: the relay copies a chunk out when it is
	 * committed, so a patch the producer wrote into the SMB afterwards would be lost;
	 * patches go in CommitData, which the relay forwards */
	if (adopted)
		sonde__pb_put_bool(out, PF_INIT_CONN_RESP_USING_SHMEM_PROVIDED_BY_PRODUCER, true);
}

static int setup_page_kb(const struct pb_field *e, uint32_t *kb)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	int rc;

	*kb = 0;
	while ((rc = sonde__pb_next(&r, &f)) > 0)
		if (f.num == PF_SETUP_TRACING_PAGE_SIZE_KB && f.wire == PB_VARINT)
			*kb = f.u > UINT32_MAX ? 0 : (uint32_t)f.u;
	return rc;
}

int sonde__relay_cmd(const uint8_t *data, size_t len, uint32_t page_kb, uint32_t *host_page_kb,
		     struct buf *out)
{
	struct pb_reader r = pb_reader_init(data, len);
	struct pb_field f;
	size_t start_len = out->len;
	bool setup = false;
	int rc;

	*host_page_kb = 0;
	for (;;) {
		const uint8_t *start = r.p;
		if ((rc = sonde__pb_next(&r, &f)) <= 0)
			break;
		if (f.num != PF_ASYNC_CMD_SETUP_TRACING || f.wire != PB_LEN) {
			put_raw(out, start, &r);
			continue;
		}
		if (setup_page_kb(&f, host_page_kb) < 0)
			rc = -1;
		setup = true;
		size_t m = sonde__pb_begin(out, PF_ASYNC_CMD_SETUP_TRACING);
		if (page_kb)
			sonde__pb_put_varint(out, PF_SETUP_TRACING_PAGE_SIZE_KB, page_kb);
		sonde__pb_end(out, m);
	}
	if (rc < 0 || !setup) {
		out->len = start_len;
		return rc < 0 ? -SONDE_E_FORMAT : 0;
	}
	return buf_error(out) < 0 ? -ENOMEM : 1;
}

void sonde__relay_smb_geometry(uint32_t host_page_kb, const struct relay_init *ri, size_t max_bytes,
			       size_t *size, size_t *page)
{
	size_t p = (size_t)host_page_kb * 1024, s = ri->size_hint;

	if (!smb_geometry_svc_ok(p, p))
		p = ri->page_hint;
	if (!smb_geometry_svc_ok(p, p))
		p = SMB_DEFAULT_PAGE_SIZE;
	if (!s)
		s = SMB_DEFAULT_SIZE;
	if (s > max_bytes)
		s = max_bytes;
	s = s / p * p;
	if (!smb_geometry_svc_ok(s, p))
		s = p * (SMB_DEFAULT_SIZE / SMB_DEFAULT_PAGE_SIZE) <= max_bytes
			    ? p * (SMB_DEFAULT_SIZE / SMB_DEFAULT_PAGE_SIZE)
			    : p;
	*size = s;
	*page = p;
}

int sonde__relay_check_smb(int fd, size_t page, size_t max_bytes, size_t *size)
{
	const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	const int forbid = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
	int seals = fcntl(fd, F_GET_SEALS), fl = fcntl(fd, F_GETFL);
	struct stat st;

	/* unsealed, the producer could shrink the file and make the relay fault */
	if (seals < 0 || fl < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -EBADF;
	if ((seals & need) != need || (seals & forbid))
		return -EPERM;
	if ((fl & O_ACCMODE) != O_RDWR)
		return -EACCES;
	if (st.st_size <= 0 || (uint64_t)st.st_size > max_bytes)
		return -EFBIG;
	if (!smb_geometry_svc_ok((size_t)st.st_size, page))
		return -EINVAL;
	*size = (size_t)st.st_size;
	return 0;
}
