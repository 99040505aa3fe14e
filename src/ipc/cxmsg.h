/* The connector's messages (docs/service.md "The connector"): what a supervisor sends to
 * sonded's connector socket to hand over a connected producer or consumer socket, and
 * the reply. Each message is one SOCK_SEQPACKET datagram holding a small protobuf; the
 * file descriptors ride on it as SCM_RIGHTS. Shared by the service and the client
 * library. Internal to libsonde. */
#ifndef SONDE_IPC_CXMSG_H
#define SONDE_IPC_CXMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum {
	CX_MAX_MSG = 512, /* bytes; larger requests are refused with EMSGSIZE */
	CX_MAX_TEXT = 160,
};

enum cx_kind { CX_KIND_PRODUCER = 1, CX_KIND_CONSUMER = 2 };
enum cx_buffer { CX_BUFFER_NONE = 0, CX_BUFFER_PROVIDED = 1, CX_BUFFER_FROM_SERVICE = 2 };

/* Field numbers. ConnectorRequest: */
enum {
	CX_REQ_ID = 1,		/* varint, echoed in the reply */
	CX_REQ_KIND = 2,	/* varint, enum cx_kind */
	CX_REQ_BUFFER = 3,	/* varint, enum cx_buffer */
	CX_REQ_PAGE_SIZE = 4,	/* varint, bytes */
	CX_REQ_BUFFER_SIZE = 5, /* varint, bytes (FROM_SERVICE) */
	CX_REQ_UID = 6,		/* varint, identity to grant (see the trust model) */
	CX_REQ_GID = 7,		/* varint */
};
/* ConnectorReply: */
enum {
	CX_REP_ID = 1,
	CX_REP_STATUS = 2,	/* varint: 0, or a positive errno value */
	CX_REP_MESSAGE = 3,	/* string: why, for a human */
	CX_REP_PAGE_SIZE = 4,	/* varint: the buffer's geometry, when there is one */
	CX_REP_BUFFER_SIZE = 5, /* varint */
};

struct cx_request {
	uint64_t id;
	uint32_t kind, buffer;
	uint32_t page_size, buffer_size; /* 0: not given */
	bool has_uid, has_gid;
	uint32_t uid, gid;
};

struct cx_reply {
	uint64_t id;
	uint32_t status;
	char message[CX_MAX_TEXT]; /* NUL-terminated, possibly truncated */
	uint32_t page_size, buffer_size;
};

/* Decode untrusted bytes. Unknown fields are skipped; a repeated field keeps its last
 * value. Returns 0 or -SONDE_E_FORMAT (malformed protobuf, a wrong wire type for a known
 * field, a value that does not fit its field). Range checks of values are the caller's. */
int sonde__cx_request_decode(const void *buf, size_t len, struct cx_request *r);
int sonde__cx_reply_decode(const void *buf, size_t len, struct cx_reply *r);
/* Append the encoding to b (check buf_error). */
void sonde__cx_request_encode(const struct cx_request *r, struct buf *b);
void sonde__cx_reply_encode(const struct cx_reply *r, struct buf *b);

#endif
