#include <string.h>

#include <sonde/error.h>

#include "base/pb.h"
#include "ipc/cxmsg.h"

static int get_u32(const struct pb_field *f, uint32_t *out)
{
	if (f->wire != PB_VARINT || f->u > UINT32_MAX)
		return -SONDE_E_FORMAT;
	*out = (uint32_t)f->u;
	return 0;
}

int sonde__cx_request_decode(const void *buf, size_t len, struct cx_request *r)
{
	struct pb_reader rd = pb_reader_init(buf, len);
	struct pb_field f;
	int rc;

	memset(r, 0, sizeof(*r));
	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		switch (f.num) {
		case CX_REQ_ID:
			if (f.wire != PB_VARINT)
				return -SONDE_E_FORMAT;
			r->id = f.u;
			break;
		case CX_REQ_KIND:
			rc = get_u32(&f, &r->kind);
			break;
		case CX_REQ_BUFFER:
			rc = get_u32(&f, &r->buffer);
			break;
		case CX_REQ_PAGE_SIZE:
			rc = get_u32(&f, &r->page_size);
			break;
		case CX_REQ_BUFFER_SIZE:
			rc = get_u32(&f, &r->buffer_size);
			break;
		case CX_REQ_UID:
			rc = get_u32(&f, &r->uid);
			r->has_uid = true;
			break;
		case CX_REQ_GID:
			rc = get_u32(&f, &r->gid);
			r->has_gid = true;
			break;
		default:
			break;
		}
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

int sonde__cx_reply_decode(const void *buf, size_t len, struct cx_reply *r)
{
	struct pb_reader rd = pb_reader_init(buf, len);
	struct pb_field f;
	int rc;

	memset(r, 0, sizeof(*r));
	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		switch (f.num) {
		case CX_REP_ID:
			if (f.wire != PB_VARINT)
				return -SONDE_E_FORMAT;
			r->id = f.u;
			break;
		case CX_REP_STATUS:
			rc = get_u32(&f, &r->status);
			break;
		case CX_REP_MESSAGE: {
			if (f.wire != PB_LEN)
				return -SONDE_E_FORMAT;
			size_t n = f.len < CX_MAX_TEXT - 1 ? f.len : CX_MAX_TEXT - 1;
			memcpy(r->message, f.ptr, n);
			r->message[n] = '\0';
			break;
		}
		case CX_REP_PAGE_SIZE:
			rc = get_u32(&f, &r->page_size);
			break;
		case CX_REP_BUFFER_SIZE:
			rc = get_u32(&f, &r->buffer_size);
			break;
		default:
			break;
		}
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

void sonde__cx_request_encode(const struct cx_request *r, struct buf *b)
{
	sonde__pb_put_varint(b, CX_REQ_ID, r->id);
	sonde__pb_put_varint(b, CX_REQ_KIND, r->kind);
	if (r->buffer)
		sonde__pb_put_varint(b, CX_REQ_BUFFER, r->buffer);
	if (r->page_size)
		sonde__pb_put_varint(b, CX_REQ_PAGE_SIZE, r->page_size);
	if (r->buffer_size)
		sonde__pb_put_varint(b, CX_REQ_BUFFER_SIZE, r->buffer_size);
	if (r->has_uid)
		sonde__pb_put_varint(b, CX_REQ_UID, r->uid);
	if (r->has_gid)
		sonde__pb_put_varint(b, CX_REQ_GID, r->gid);
}

void sonde__cx_reply_encode(const struct cx_reply *r, struct buf *b)
{
	sonde__pb_put_varint(b, CX_REP_ID, r->id);
	sonde__pb_put_varint(b, CX_REP_STATUS, r->status);
	if (r->message[0])
		sonde__pb_put_string(b, CX_REP_MESSAGE, r->message);
	if (r->page_size)
		sonde__pb_put_varint(b, CX_REP_PAGE_SIZE, r->page_size);
	if (r->buffer_size)
		sonde__pb_put_varint(b, CX_REP_BUFFER_SIZE, r->buffer_size);
}
