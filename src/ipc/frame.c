#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "ipc/frame.h"
#include "ipc/protos.h"

/* ---------------------------------------------------------------- decoding */

static int decode_bind(struct pb_reader r, struct ipc_frame *f)
{
	struct pb_field fl;
	int rc;

	while ((rc = sonde__pb_next(&r, &fl)) > 0)
		if (fl.num == PF_BIND_SERVICE_SERVICE_NAME && fl.wire == PB_LEN) {
			f->name = (const char *)fl.ptr;
			f->name_len = fl.len;
		}
	return rc;
}

static int decode_bind_reply(struct pb_reader r, struct ipc_frame *f)
{
	struct pb_field fl;
	int rc;

	f->methods_pb = r.p;
	f->methods_pb_len = (size_t)(r.end - r.p);
	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.wire != PB_VARINT)
			continue;
		if (fl.num == PF_BIND_SERVICE_REPLY_SUCCESS)
			f->success = fl.u != 0;
		else if (fl.num == PF_BIND_SERVICE_REPLY_SERVICE_ID)
			f->service_id = (uint32_t)fl.u;
	}
	return rc;
}

static int decode_invoke(struct pb_reader r, struct ipc_frame *f)
{
	struct pb_field fl;
	int rc;

	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.num == PF_INVOKE_METHOD_ARGS_PROTO && fl.wire == PB_LEN) {
			f->data = fl.ptr;
			f->data_len = fl.len;
		} else if (fl.wire != PB_VARINT) {
			continue;
		} else if (fl.num == PF_INVOKE_METHOD_SERVICE_ID) {
			f->service_id = (uint32_t)fl.u;
		} else if (fl.num == PF_INVOKE_METHOD_METHOD_ID) {
			f->method_id = (uint32_t)fl.u;
		} else if (fl.num == PF_INVOKE_METHOD_DROP_REPLY) {
			f->drop_reply = fl.u != 0;
		}
	}
	return rc;
}

static int decode_reply(struct pb_reader r, struct ipc_frame *f)
{
	struct pb_field fl;
	int rc;

	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.num == PF_INVOKE_METHOD_REPLY_REPLY_PROTO && fl.wire == PB_LEN) {
			f->data = fl.ptr;
			f->data_len = fl.len;
		} else if (fl.wire != PB_VARINT) {
			continue;
		} else if (fl.num == PF_INVOKE_METHOD_REPLY_SUCCESS) {
			f->success = fl.u != 0;
		} else if (fl.num == PF_INVOKE_METHOD_REPLY_HAS_MORE) {
			f->has_more = fl.u != 0;
		}
	}
	return rc;
}

static int peer_string(const struct pb_field *fl, const char **s, size_t *len)
{
	if (fl->wire != PB_LEN || fl->len > IPC_MAX_PEER_STRING)
		return -SONDE_E_FORMAT;
	*s = (const char *)fl->ptr;
	*len = fl->len;
	return 0;
}

static int decode_peer_identity(struct pb_reader r, struct ipc_frame *f)
{
	struct pb_field fl;
	int rc;

	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.num == PF_SET_PEER_IDENTITY_MACHINE_ID_HINT) {
			if (peer_string(&fl, &f->machine_id_hint, &f->machine_id_hint_len) < 0)
				return -SONDE_E_FORMAT;
		} else if (fl.num == PF_SET_PEER_IDENTITY_MACHINE_NAME) {
			if (peer_string(&fl, &f->machine_name, &f->machine_name_len) < 0)
				return -SONDE_E_FORMAT;
		} else if (fl.wire != PB_VARINT) {
			continue;
		} else if (fl.num == PF_SET_PEER_IDENTITY_PID) {
			f->peer_pid = (int32_t)fl.u;
			f->has_peer_pid = true;
		} else if (fl.num == PF_SET_PEER_IDENTITY_UID) {
			f->peer_uid = (int32_t)fl.u;
			f->has_peer_uid = true;
		}
	}
	return rc;
}

static int decode_msg(const struct pb_field *fl, struct ipc_frame *f)
{
	struct pb_reader r = pb_sub(fl);

	/* oneof: the last msg field wins, so reset what an earlier one may have set */
	const uint64_t id = f->request_id;
	memset(f, 0, sizeof(*f));
	f->request_id = id;
	f->msg = (enum ipc_msg)fl->num;
	switch (fl->num) {
	case PF_IPC_FRAME_BIND_SERVICE:
		return decode_bind(r, f);
	case PF_IPC_FRAME_BIND_SERVICE_REPLY:
		return decode_bind_reply(r, f);
	case PF_IPC_FRAME_INVOKE_METHOD:
		return decode_invoke(r, f);
	case PF_IPC_FRAME_INVOKE_METHOD_REPLY:
		return decode_reply(r, f);
	case PF_IPC_FRAME_REQUEST_ERROR:
		return decode_bind(r, f); /* {1: string}, same shape as BindService */
	default:
		return decode_peer_identity(r, f);
	}
}

int sonde__ipc_frame_decode(const void *buf, size_t len, struct ipc_frame *f)
{
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field fl;
	uint64_t request_id = 0;
	int rc;

	memset(f, 0, sizeof(*f));
	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.num == PF_IPC_FRAME_REQUEST_ID && fl.wire == PB_VARINT) {
			request_id = fl.u;
		} else if (fl.num >= PF_IPC_FRAME_BIND_SERVICE &&
			   fl.num <= PF_IPC_FRAME_SET_PEER_IDENTITY && fl.wire == PB_LEN) {
			if (decode_msg(&fl, f) < 0)
				return -SONDE_E_FORMAT;
		}
	}
	f->request_id = request_id;
	f->raw = buf;
	f->raw_len = len;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

int sonde__ipc_methods_next(const struct ipc_frame *f, size_t *it, struct ipc_method *m)
{
	struct pb_reader r;
	struct pb_field fl, sub;
	int rc;

	if (f->msg != IPC_MSG_BIND_SERVICE_REPLY || *it > f->methods_pb_len)
		return 0;
	r = pb_reader_init(f->methods_pb + *it, f->methods_pb_len - *it);
	while ((rc = sonde__pb_next(&r, &fl)) > 0) {
		if (fl.num != PF_BIND_SERVICE_REPLY_METHODS || fl.wire != PB_LEN)
			continue;
		struct pb_reader mr = pb_sub(&fl);
		memset(m, 0, sizeof(*m));
		while ((rc = sonde__pb_next(&mr, &sub)) > 0) {
			if (sub.num == PF_METHOD_INFO_ID && sub.wire == PB_VARINT) {
				m->id = (uint32_t)sub.u;
			} else if (sub.num == PF_METHOD_INFO_NAME && sub.wire == PB_LEN) {
				m->name = (const char *)sub.ptr;
				m->name_len = sub.len;
			}
		}
		if (rc < 0)
			return -SONDE_E_FORMAT;
		*it = (size_t)(r.p - f->methods_pb);
		return 1;
	}
	*it = f->methods_pb_len;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

uint32_t sonde__ipc_method_id(const struct ipc_frame *f, const char *name)
{
	struct ipc_method m;
	size_t it = 0, n = strlen(name);

	while (sonde__ipc_methods_next(f, &it, &m) > 0)
		if (m.id && m.name_len == n && memcmp(m.name, name, n) == 0)
			return m.id;
	return 0;
}

/* ---------------------------------------------------------------- encoding */

/* The body of the msg submessage is sized first, so the frame is written once, in place,
 * with minimal varints (reply payloads run up to 128 KiB and are not worth moving). */

static size_t vlen(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static size_t len_field(size_t n)
{
	return 1 + vlen(n) + n;
}

static size_t method_info_len(size_t id, const char *name)
{
	return 1 + vlen(id) + len_field(strlen(name));
}

static size_t body_len(const struct ipc_frame *f)
{
	size_t n = 0;

	switch (f->msg) {
	case IPC_MSG_BIND_SERVICE:
	case IPC_MSG_REQUEST_ERROR:
		return len_field(f->name_len);
	case IPC_MSG_BIND_SERVICE_REPLY:
		n = (f->success ? 2 : 0) + 1 + vlen(f->service_id);
		for (size_t i = 0; i < f->n_methods; i++)
			if (f->method_names[i])
				n += len_field(method_info_len(i + 1, f->method_names[i]));
		return n;
	case IPC_MSG_INVOKE_METHOD:
		return 1 + vlen(f->service_id) + 1 + vlen(f->method_id) + len_field(f->data_len) +
		       (f->drop_reply ? 2 : 0);
	case IPC_MSG_INVOKE_METHOD_REPLY:
		return (f->success ? 2 : 0) + (f->has_more ? 2 : 0) +
		       (f->data ? len_field(f->data_len) : 0);
	case IPC_MSG_SET_PEER_IDENTITY:
		return (f->has_peer_pid ? 1 + vlen((uint32_t)f->peer_pid) : 0) +
		       (f->has_peer_uid ? 1 + vlen((uint32_t)f->peer_uid) : 0) +
		       (f->machine_id_hint ? len_field(f->machine_id_hint_len) : 0) +
		       (f->machine_name ? len_field(f->machine_name_len) : 0);
	default:
		return 0;
	}
}

static void put_body(struct buf *b, const struct ipc_frame *f)
{
	switch (f->msg) {
	case IPC_MSG_BIND_SERVICE:
	case IPC_MSG_REQUEST_ERROR:
		sonde__pb_put_bytes(b, 1, f->name, f->name_len);
		break;
	case IPC_MSG_BIND_SERVICE_REPLY:
		if (f->success)
			sonde__pb_put_bool(b, PF_BIND_SERVICE_REPLY_SUCCESS, true);
		sonde__pb_put_varint(b, PF_BIND_SERVICE_REPLY_SERVICE_ID, f->service_id);
		for (size_t i = 0; i < f->n_methods; i++) {
			if (!f->method_names[i])
				continue;
			sonde__pb_put_tag(b, PF_BIND_SERVICE_REPLY_METHODS, PB_LEN);
			sonde__pb_put_varint_raw(b, method_info_len(i + 1, f->method_names[i]));
			sonde__pb_put_varint(b, PF_METHOD_INFO_ID, i + 1);
			sonde__pb_put_string(b, PF_METHOD_INFO_NAME, f->method_names[i]);
		}
		break;
	case IPC_MSG_INVOKE_METHOD:
		sonde__pb_put_varint(b, PF_INVOKE_METHOD_SERVICE_ID, f->service_id);
		sonde__pb_put_varint(b, PF_INVOKE_METHOD_METHOD_ID, f->method_id);
		sonde__pb_put_bytes(b, PF_INVOKE_METHOD_ARGS_PROTO, f->data, f->data_len);
		if (f->drop_reply)
			sonde__pb_put_bool(b, PF_INVOKE_METHOD_DROP_REPLY, true);
		break;
	case IPC_MSG_INVOKE_METHOD_REPLY:
		if (f->success)
			sonde__pb_put_bool(b, PF_INVOKE_METHOD_REPLY_SUCCESS, true);
		if (f->has_more)
			sonde__pb_put_bool(b, PF_INVOKE_METHOD_REPLY_HAS_MORE, true);
		if (f->data)
			sonde__pb_put_bytes(b, PF_INVOKE_METHOD_REPLY_REPLY_PROTO, f->data,
					    f->data_len);
		break;
	case IPC_MSG_SET_PEER_IDENTITY:
		if (f->has_peer_pid)
			sonde__pb_put_varint(b, PF_SET_PEER_IDENTITY_PID, (uint32_t)f->peer_pid);
		if (f->has_peer_uid)
			sonde__pb_put_varint(b, PF_SET_PEER_IDENTITY_UID, (uint32_t)f->peer_uid);
		if (f->machine_id_hint)
			sonde__pb_put_bytes(b, PF_SET_PEER_IDENTITY_MACHINE_ID_HINT,
					    f->machine_id_hint, f->machine_id_hint_len);
		if (f->machine_name)
			sonde__pb_put_bytes(b, PF_SET_PEER_IDENTITY_MACHINE_NAME, f->machine_name,
					    f->machine_name_len);
		break;
	default:
		break;
	}
}

int sonde__ipc_frame_encode(struct buf *b, const struct ipc_frame *f)
{
	size_t start = b->len, body = body_len(f);
	size_t payload = 1 + vlen(f->request_id);
	uint32_t hdr;

	if (f->msg != IPC_MSG_NONE)
		payload += 1 + vlen(body) + body;
	if (payload > IPC_MAX_PAYLOAD)
		return -SONDE_E_LIMIT;
	if (sonde__buf_reserve(b, IPC_HEADER_SIZE + payload) < 0)
		return -ENOMEM;
	hdr = (uint32_t)payload; /* little-endian host (§0) */
	sonde__buf_append(b, &hdr, sizeof(hdr));
	sonde__pb_put_varint(b, PF_IPC_FRAME_REQUEST_ID, f->request_id);
	if (f->msg != IPC_MSG_NONE) {
		sonde__pb_put_tag(b, (uint32_t)f->msg, PB_LEN);
		sonde__pb_put_varint_raw(b, body);
		put_body(b, f);
	}
	if (buf_error(b) < 0)
		return -ENOMEM;
	if (b->len - start != IPC_HEADER_SIZE + payload) { /* sizing bug: never send it */
		b->len = start;
		return -SONDE_E_FORMAT;
	}
	return 0;
}

int sonde__ipc_frame_encode_invoke_head(struct buf *b, const struct ipc_frame *f, uint8_t tail[2],
					size_t *tail_len)
{
	size_t start = b->len, body = body_len(f);
	size_t payload = 1 + vlen(f->request_id) + 1 + vlen(body) + body;
	uint32_t hdr;

	if (f->msg != IPC_MSG_INVOKE_METHOD)
		return -EINVAL;
	if (payload > IPC_MAX_PAYLOAD)
		return -SONDE_E_LIMIT;
	hdr = (uint32_t)payload; /* little-endian host (§0) */
	sonde__buf_append(b, &hdr, sizeof(hdr));
	sonde__pb_put_varint(b, PF_IPC_FRAME_REQUEST_ID, f->request_id);
	sonde__pb_put_tag(b, (uint32_t)f->msg, PB_LEN);
	sonde__pb_put_varint_raw(b, body);
	sonde__pb_put_varint(b, PF_INVOKE_METHOD_SERVICE_ID, f->service_id);
	sonde__pb_put_varint(b, PF_INVOKE_METHOD_METHOD_ID, f->method_id);
	sonde__pb_put_tag(b, PF_INVOKE_METHOD_ARGS_PROTO, PB_LEN);
	sonde__pb_put_varint_raw(b, f->data_len);
	*tail_len = 0;
	if (f->drop_reply) { /* as sonde__pb_put_bool writes it: the tag, then 1 */
		tail[0] = (uint8_t)(PF_INVOKE_METHOD_DROP_REPLY << 3 | PB_VARINT);
		tail[1] = 1;
		*tail_len = 2;
	}
	if (buf_error(b) < 0) {
		b->len = start;
		b->failed = false;
		return -ENOMEM;
	}
	if (b->len - start + f->data_len + *tail_len != IPC_HEADER_SIZE + payload) {
		b->len = start; /* sizing bug: never send it */
		return -SONDE_E_FORMAT;
	}
	return 0;
}
