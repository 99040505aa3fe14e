/* Perfetto IPC framing (perfetto-wire.md §1.2-§1.6): the IPCFrame codec and a nonblocking
 * stream channel with a reassembly buffer and SCM_RIGHTS fd passing. Internal to
 * libsonde; used by the service host and the client library alike.
 *
 * A frame on the stream is  u32 LE payload_len | payload_len bytes of IPCFrame.
 * The whole frame, header included, is at most IPC_BUFFER_SIZE (128 KiB).
 *
 * Call order for a channel:
 *   sonde__ipc_chan_init(c, fd)                      adopts a connected nonblocking socket
 *   on readable:  sonde__ipc_chan_read(c), then sonde__ipc_chan_next(c, &f, &fd) until it returns 0
 *   to send:      sonde__ipc_chan_send(c, &f, fd)    encodes into the tx queue and writes
 *   on writable:  sonde__ipc_chan_flush(c)           (watch for writability while
 *                                             ipc_chan_tx_pending(c) is non-zero)
 *   sonde__ipc_chan_close(c)                         closes the socket and any fds it holds
 */
#ifndef SONDE_IPC_FRAME_H
#define SONDE_IPC_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/pb.h"

enum {
	IPC_BUFFER_SIZE = 131072, /* kIPCBufferSize, header included */
	IPC_HEADER_SIZE = 4,
	IPC_MAX_PAYLOAD = IPC_BUFFER_SIZE - IPC_HEADER_SIZE,
	IPC_SEND_TIMEOUT_MS = 10000,
	/* SetPeerIdentity's strings: a boot id is 36 bytes, a machine name a short label */
	IPC_MAX_PEER_STRING = 256,
};

/* The IPCFrame oneof `msg` (its values are the IPCFrame field numbers). */
enum ipc_msg {
	IPC_MSG_NONE = 0,
	IPC_MSG_BIND_SERVICE = 3,
	IPC_MSG_BIND_SERVICE_REPLY = 4,
	IPC_MSG_INVOKE_METHOD = 5,
	IPC_MSG_INVOKE_METHOD_REPLY = 6,
	IPC_MSG_REQUEST_ERROR = 7,
	IPC_MSG_SET_PEER_IDENTITY = 8,
};

/* A decoded or to-be-encoded IPCFrame. Which members matter depends on `msg`:
 *   BIND_SERVICE        name
 *   BIND_SERVICE_REPLY  success, service_id, and the methods: when decoding, methods_pb
 *                       holds the raw BindServiceReply bytes (iterate with
 *                       sonde__ipc_methods_next); when encoding, method_names[i] is listed with
 *                       id i + 1; NULL entries (unimplemented methods) are left out
 *   INVOKE_METHOD       service_id, method_id, data (args_proto), drop_reply
 *   INVOKE_METHOD_REPLY success, has_more, data (reply_proto; encoded only when set)
 *   REQUEST_ERROR       name (the error string)
 *   SET_PEER_IDENTITY   peer_pid, peer_uid (each only with has_peer_pid/has_peer_uid: an
 *                       absent uid is not uid 0), machine_id_hint, machine_name (NULL
 *                       when absent; each at most IPC_MAX_PEER_STRING bytes, a longer
 *                       one fails the decoding)
 * Decoded pointers point into the buffer that was decoded. */
struct ipc_frame {
	uint64_t request_id;
	enum ipc_msg msg;
	bool success;
	bool has_more;
	bool drop_reply;
	uint32_t service_id;
	uint32_t method_id;
	const char *name; /* not NUL-terminated when decoded: use name_len */
	size_t name_len;
	const uint8_t *data;
	size_t data_len;
	const uint8_t *methods_pb;
	size_t methods_pb_len;
	const char *const *method_names;
	size_t n_methods;
	int32_t peer_pid, peer_uid;
	bool has_peer_pid, has_peer_uid;
	const char *machine_id_hint; /* not NUL-terminated when decoded */
	size_t machine_id_hint_len;
	const char *machine_name; /* not NUL-terminated when decoded */
	size_t machine_name_len;
	const uint8_t *raw; /* decoding only: the whole payload that was decoded */
	size_t raw_len;
};

struct ipc_method {
	uint32_t id;
	const char *name; /* not NUL-terminated */
	size_t name_len;
};

/* Decodes an IPCFrame payload (without the 4-byte header). Unknown fields are skipped; a
 * frame with no recognised msg decodes with msg == IPC_MSG_NONE. Returns 0 or
 * -SONDE_E_FORMAT. */
int sonde__ipc_frame_decode(const void *buf, size_t len, struct ipc_frame *f);
/* Iterates the MethodInfo entries of a decoded BindServiceReply: *it must start zeroed.
 * Returns 1 with *m filled, 0 at the end, -SONDE_E_FORMAT on malformed bytes. */
int sonde__ipc_methods_next(const struct ipc_frame *f, size_t *it, struct ipc_method *m);
/* Finds a method id by name in a decoded BindServiceReply; 0 when absent. */
uint32_t sonde__ipc_method_id(const struct ipc_frame *f, const char *name);

/* Appends the frame, header included, to b. Returns 0, -ENOMEM, or -SONDE_E_LIMIT if the
 * frame would exceed IPC_BUFFER_SIZE (b is then left unchanged). */
int sonde__ipc_frame_encode(struct buf *b, const struct ipc_frame *f);
/* An InvokeMethod frame whose args_proto (f->data_len bytes; f->data is not read) the
 * caller writes itself, from wherever they are: appends to b the frame's bytes before them,
 * and puts in tail[0..*tail_len) those after them (drop_reply). Returns 0, -ENOMEM or
 * -SONDE_E_LIMIT (b then unchanged). */
int sonde__ipc_frame_encode_invoke_head(struct buf *b, const struct ipc_frame *f, uint8_t tail[2],
					size_t *tail_len);

/* ---- channel ---- */

enum { IPC_CHAN_MAX_TX_FDS = 16, IPC_CHAN_MAX_RX_FDS = 4 };

struct ipc_chan {
	int fd;
	/* reassembly: bytes [rx_off, rx.len) are received but not yet consumed */
	struct buf rx;
	size_t rx_off;
	uint64_t rx_base; /* stream offset of rx.data[0] */
	struct {
		uint64_t pos, end; /* stream offsets of the bytes of the read it came with */
		int fd;
	} rx_fds[IPC_CHAN_MAX_RX_FDS]; /* received fds not yet handed out */
	unsigned n_rx_fds;
	/* transmit queue: bytes [tx_off, tx.len) are still to be written */
	struct buf tx;
	size_t tx_off;
	uint64_t tx_base; /* stream offset of tx.data[0] */
	struct {
		uint64_t pos; /* stream offset of the frame's first byte */
		int fd;
	} tx_fds[IPC_CHAN_MAX_TX_FDS];
	unsigned n_tx_fds;
	uint64_t tx_stalled_ns; /* the clock's time of the last progress while bytes wait */
	/* the clock of tx_stalled_ns: CLOCK_MONOTONIC unless the owner sets one after
	 * sonde__ipc_chan_init (the service gives its loop's, which tests advance by hand) */
	uint64_t (*now_ns)(void *ctx);
	void *now_ctx;
	/* peer identity from SO_PEERCRED (-1 when unknown) */
	pid_t peer_pid;
	uid_t peer_uid;
	bool eof;
};

/* Adopts fd (a connected stream socket, made nonblocking here) and reads SO_PEERCRED.
 * Returns 0 or -errno; the channel owns fd from then on, even on error. */
int sonde__ipc_chan_init(struct ipc_chan *c, int fd);
/* Closes the socket and every fd still queued or received. Safe after any sonde__ipc_chan_init
 * (even a failed one) and when called twice. */
void sonde__ipc_chan_close(struct ipc_chan *c);

/* Reads what the socket has, up to a read that comes back short (what arrives later
 * leaves the socket readable for the caller's next poll). Returns 0 (possibly with no
 * data), -ECONNRESET at EOF (frames already received can still be taken with
 * sonde__ipc_chan_next), -SONDE_E_PROTOCOL if more than one fd arrived with one read or
 * ancillary data was truncated (every fd that arrived is closed then), or -errno. */
int sonde__ipc_chan_read(struct ipc_chan *c);
/* Takes the next complete frame. Returns 1 with *f filled (pointers valid until the next
 * sonde__ipc_chan_read or sonde__ipc_chan_next), 0 when no complete frame is buffered, or
 * -SONDE_E_PROTOCOL when a header announces more than IPC_MAX_PAYLOAD or an fd arrived
 * in the middle of a frame rather than with its first bytes (the stream is then
 * unusable). Empty and unparsable payloads are skipped, as the spec requires, and an fd
 * that came with one is closed. If an fd arrived with the frame's bytes, *fd receives it
 * (the caller owns it), else -1; fd may be NULL, then such an fd is closed. */
int sonde__ipc_chan_next(struct ipc_chan *c, struct ipc_frame *f, int *fd);
/* How many complete frames are buffered and not yet taken, counting up to max. */
size_t sonde__ipc_chan_queued(const struct ipc_chan *c, size_t max);

/* Encodes f into the tx queue, attaching fd (>= 0; not taken: it is dup'ed) to the
 * frame's first sendmsg, then writes what the socket accepts. Returns 0, -SONDE_E_LIMIT
 * for an oversize frame, -ENOMEM, -EMFILE if too many fds are queued, or -errno of a
 * broken connection. */
int sonde__ipc_chan_send(struct ipc_chan *c, const struct ipc_frame *f, int fd);
/* Same with an already encoded frame (header included). */
int sonde__ipc_chan_send_raw(struct ipc_chan *c, const void *frame, size_t len, int fd);
/* Sends an InvokeMethod frame whose args_proto is the n_args pieces of args (f->data_len
 * bytes in all, f->data not read), without copying them first: when nothing is queued they
 * go to the socket straight from where they are, and only what the socket does not take
 * is queued (copied). When it returns, the pieces may be reused. At most
 * IPC_CHAN_MAX_IOV pieces. Returns 0 or -errno as sonde__ipc_chan_send. */
enum { IPC_CHAN_MAX_IOV = 128 };
struct iovec;
int sonde__ipc_chan_send_iov(struct ipc_chan *c, const struct ipc_frame *f,
			     const struct iovec *args, int n_args);
/* Writes queued bytes until the socket would block. Returns 0 when the queue is empty,
 * 1 while bytes remain (wait for writability), or -errno (e.g. -EPIPE). */
int sonde__ipc_chan_flush(struct ipc_chan *c);
/* Bytes queued and not yet written. */
static inline size_t ipc_chan_tx_pending(const struct ipc_chan *c)
{
	return c->tx.len - c->tx_off;
}

#endif
