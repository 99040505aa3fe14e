/* The nonblocking IPC channel declared in ipc/frame.h. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "ipc/fdpass.h"
#include "ipc/frame.h"

enum {
	RX_READ_SIZE = 65536,
	/* Stop reading once this much is buffered; level-triggered polling brings the
	 * caller back after it has consumed frames, so a flooding peer costs bounded
	 * memory. */
	RX_MAX_BUFFERED = 2 * IPC_BUFFER_SIZE,
	/* Grow the buffer (by RX_READ_SIZE) only when less room than this is left. Reserving
	 * a whole RX_READ_SIZE before every read doubled a 64 KiB buffer holding one small
	 * frame to 128 KiB, and the copy made 64 KiB of it resident: per connection, more
	 * than everything else a producer costs the service. */
	RX_MIN_ROOM = 4096,
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int sonde__ipc_chan_init(struct ipc_chan *c, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fl;

	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->peer_pid = -1;
	c->peer_uid = (uid_t)-1;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred)) {
		c->peer_pid = cred.pid;
		c->peer_uid = cred.uid;
	}
	return 0;
}

void sonde__ipc_chan_close(struct ipc_chan *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	for (unsigned i = 0; i < c->n_rx_fds; i++)
		close(c->rx_fds[i].fd);
	c->n_rx_fds = 0;
	for (unsigned i = 0; i < c->n_tx_fds; i++)
		close(c->tx_fds[i].fd);
	c->n_tx_fds = 0;
	sonde__buf_free(&c->rx);
	sonde__buf_free(&c->tx);
	c->rx_off = c->tx_off = 0;
}

/* Drops consumed bytes from the front of rx. */
static void rx_compact(struct ipc_chan *c)
{
	if (c->rx_off == 0)
		return;
	memmove(c->rx.data, c->rx.data + c->rx_off, c->rx.len - c->rx_off);
	c->rx.len -= c->rx_off;
	c->rx_base += c->rx_off;
	c->rx_off = 0;
}

static void drop_rx_fd(struct ipc_chan *c, unsigned i)
{
	close(c->rx_fds[i].fd);
	memmove(&c->rx_fds[i], &c->rx_fds[i + 1], (c->n_rx_fds - i - 1) * sizeof(c->rx_fds[0]));
	c->n_rx_fds--;
}

/* Keeps the fd of a read covering stream bytes [pos, end) until its frame is taken. */
static void keep_rx_fd(struct ipc_chan *c, int fd, uint64_t pos, uint64_t end)
{
	if (c->n_rx_fds == IPC_CHAN_MAX_RX_FDS)
		drop_rx_fd(c, 0);
	c->rx_fds[c->n_rx_fds].pos = pos;
	c->rx_fds[c->n_rx_fds].end = end;
	c->rx_fds[c->n_rx_fds].fd = fd;
	c->n_rx_fds++;
}

/* Bytes still to come of the frame at rx_off, once its header is in (else 0). */
static size_t rx_frame_missing(const struct ipc_chan *c)
{
	size_t avail = c->rx.len - c->rx_off;
	uint32_t len;

	if (avail < IPC_HEADER_SIZE)
		return 0;
	memcpy(&len, c->rx.data + c->rx_off, sizeof(len));
	if (len > IPC_MAX_PAYLOAD)
		return 0; /* sonde__ipc_chan_next refuses it */
	return IPC_HEADER_SIZE + (size_t)len > avail ? IPC_HEADER_SIZE + (size_t)len - avail : 0;
}

int sonde__ipc_chan_read(struct ipc_chan *c)
{
	struct ipc_fds in;
	int mflags;

	while (c->rx.len - c->rx_off < RX_MAX_BUFFERED) {
		size_t missing = rx_frame_missing(c), want = missing ? missing : RX_MIN_ROOM;
		/* what was consumed is dropped from the front only when nothing is left after
		 * it or the rest of the frame does not fit behind: moving a partial frame to
		 * the front before every read copied a stream of large frames (emulated
		 * producers' CommitData) a third time */
		if (c->rx_off == c->rx.len || (c->rx_off && c->rx.cap - c->rx.len < want))
			rx_compact(c);
		if (c->rx.cap - c->rx.len < want &&
		    sonde__buf_reserve(&c->rx, want > RX_READ_SIZE ? want : RX_READ_SIZE) < 0)
			return -ENOMEM;
		size_t room = c->rx.cap - c->rx.len;
		/* the rest of a large frame is read alone: the read ends where the frame does,
		 * the next frame starts at the next read, and nothing is left to move */
		if (missing >= RX_MIN_ROOM && missing < room)
			room = missing;
		ssize_t n = sonde__ipc_fdpass_recv(c->fd, c->rx.data + c->rx.len, room,
						   MSG_DONTWAIT, &in, &mflags);
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return 0;
		if (n < 0)
			return (int)n;
		/* a frame carries at most one fd (§1.6): more, or truncated ancillary data, is
		 * a broken peer; whatever arrived is closed before the connection goes */
		if (in.n > 1 || (mflags & (MSG_CTRUNC | MSG_TRUNC))) {
			sonde__ipc_fds_close(&in);
			return -SONDE_E_PROTOCOL;
		}
		uint64_t pos = c->rx_base + c->rx.len;
		if (in.n == 1)
			keep_rx_fd(c, in.fd[0], pos, pos + (uint64_t)n);
		if (n == 0) {
			c->eof = true;
			return -ECONNRESET;
		}
		c->rx.len += (size_t)n;
		if (in.n)
			break; /* let the caller take the frame that claims this fd */
		/* a short read took all the socket had: a read more would only say EAGAIN
		 * (one system call in three of a service's wakeup), and what comes later
		 * makes the socket readable again for the caller's level-triggered wait */
		if ((size_t)n < room)
			break;
	}
	return 0;
}

/* Hands out in *fd the fd that arrived with the frame [start, end), or -1.
 *
 * A sender attaches the fd to the sendmsg that begins its frame, and the kernel ends a
 * read right after an skb that carried fds (it may, however, glue earlier fd-less bytes
 * in front of it). So the fd belongs to the frame holding the read's last byte, provided
 * that frame began within the read. An fd that no frame can claim rode on the middle of
 * a frame: -SONDE_E_PROTOCOL (the fd is closed). */
static int claim_fd(struct ipc_chan *c, uint64_t start, uint64_t end, int *fd)
{
	*fd = -1;
	if (!c->n_rx_fds)
		return 0;
	if (start >= c->rx_fds[0].end) {
		drop_rx_fd(c, 0);
		return -SONDE_E_PROTOCOL;
	}
	if (start >= c->rx_fds[0].pos && end >= c->rx_fds[0].end) {
		*fd = c->rx_fds[0].fd;
		memmove(&c->rx_fds[0], &c->rx_fds[1], (c->n_rx_fds - 1) * sizeof(c->rx_fds[0]));
		c->n_rx_fds--;
	}
	return 0;
}

int sonde__ipc_chan_next(struct ipc_chan *c, struct ipc_frame *f, int *fd)
{
	for (;;) {
		size_t avail = c->rx.len - c->rx_off;
		uint32_t len;
		int got;

		if (fd)
			*fd = -1;
		if (avail < IPC_HEADER_SIZE)
			return 0;
		memcpy(&len, c->rx.data + c->rx_off, sizeof(len));
		if (len > IPC_MAX_PAYLOAD)
			return -SONDE_E_PROTOCOL;
		if (avail < IPC_HEADER_SIZE + (size_t)len)
			return 0;
		const uint8_t *payload = c->rx.data + c->rx_off + IPC_HEADER_SIZE;
		uint64_t start = c->rx_base + c->rx_off;
		if (claim_fd(c, start, start + IPC_HEADER_SIZE + len, &got) < 0)
			return -SONDE_E_PROTOCOL;
		c->rx_off += IPC_HEADER_SIZE + len;
		if (len > 0 && sonde__ipc_frame_decode(payload, len, f) == 0) {
			if (fd)
				*fd = got;
			else if (got >= 0)
				close(got);
			return 1;
		}
		if (got >= 0) /* an fd riding on an empty or unparsable frame is dropped */
			close(got);
	}
}

size_t sonde__ipc_chan_queued(const struct ipc_chan *c, size_t max)
{
	size_t off = c->rx_off, n = 0;
	uint32_t len;

	while (n < max && c->rx.len - off >= IPC_HEADER_SIZE) {
		memcpy(&len, c->rx.data + off, sizeof(len));
		if (len > IPC_MAX_PAYLOAD || c->rx.len - off - IPC_HEADER_SIZE < len)
			break;
		off += IPC_HEADER_SIZE + len;
		n++;
	}
	return n;
}

/* ---------------------------------------------------------------- transmit */

static void tx_compact(struct ipc_chan *c)
{
	if (c->tx_off == c->tx.len) {
		c->tx_base += c->tx_off;
		c->tx.len = c->tx_off = 0;
	} else if (c->tx_off > c->tx.cap / 2) {
		memmove(c->tx.data, c->tx.data + c->tx_off, c->tx.len - c->tx_off);
		c->tx.len -= c->tx_off;
		c->tx_base += c->tx_off;
		c->tx_off = 0;
	}
}

/* Writes some of the queue; the byte count or -errno. */
static ssize_t send_some(struct ipc_chan *c)
{
	uint64_t pos = c->tx_base + c->tx_off;
	size_t n = c->tx.len - c->tx_off;
	int fd = -1;

	if (c->n_tx_fds) {
		/* bytes before an fd-carrying frame go out alone, so that the fd rides on
		 * the sendmsg that begins its frame */
		if (c->tx_fds[0].pos > pos) {
			if (c->tx_fds[0].pos - pos < n)
				n = (size_t)(c->tx_fds[0].pos - pos);
		} else {
			fd = c->tx_fds[0].fd;
			if (c->n_tx_fds > 1 && c->tx_fds[1].pos - pos < n)
				n = (size_t)(c->tx_fds[1].pos - pos);
		}
	}
	ssize_t w = sonde__ipc_fdpass_send(c->fd, c->tx.data + c->tx_off, n, &fd, fd >= 0,
				    MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w > 0 && fd >= 0) {
		close(fd);
		memmove(&c->tx_fds[0], &c->tx_fds[1], (c->n_tx_fds - 1) * sizeof(c->tx_fds[0]));
		c->n_tx_fds--;
	}
	return w;
}

int sonde__ipc_chan_flush(struct ipc_chan *c)
{
	bool progress = false;

	while (c->tx_off < c->tx.len) {
		ssize_t w = send_some(c);
		if (w == -EINTR)
			continue;
		if (w == -EAGAIN || w == -EWOULDBLOCK)
			break;
		if (w < 0)
			return (int)w;
		c->tx_off += (size_t)w;
		if (w > 0)
			progress = true;
	}
	tx_compact(c);
	if (c->tx_off < c->tx.len) {
		/* the send timeout counts from the last bytes the peer took: a consumer that
		 * keeps reading a trace longer than the timeout is slow, not stalled */
		if (!c->tx_stalled_ns || progress)
			c->tx_stalled_ns = c->now_ns ? c->now_ns(c->now_ctx) : mono_ns();
		return 1;
	}
	c->tx_stalled_ns = 0;
	return 0;
}

static int queue_fd(struct ipc_chan *c, size_t frame_off, int fd)
{
	int dup_fd;

	if (fd < 0)
		return 0;
	if (c->n_tx_fds == IPC_CHAN_MAX_TX_FDS)
		return -EMFILE;
	dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return -errno;
	c->tx_fds[c->n_tx_fds].pos = c->tx_base + frame_off;
	c->tx_fds[c->n_tx_fds].fd = dup_fd;
	c->n_tx_fds++;
	return 0;
}

/* The frame queued at frame_off goes with fd (if any), then out as far as the socket
 * takes it; a frame whose fd cannot go is taken back. 0 or -errno. */
static int send_queued(struct ipc_chan *c, size_t frame_off, int fd)
{
	int rc = queue_fd(c, frame_off, fd);

	if (rc < 0) {
		c->tx.len = frame_off;
		return rc;
	}
	rc = sonde__ipc_chan_flush(c);
	return rc < 0 ? rc : 0;
}

int sonde__ipc_chan_send(struct ipc_chan *c, const struct ipc_frame *f, int fd)
{
	size_t off = c->tx.len;
	int rc;

	if (c->fd < 0)
		return -EPIPE;
	rc = sonde__ipc_frame_encode(&c->tx, f);
	return rc < 0 ? rc : send_queued(c, off, fd);
}

int sonde__ipc_chan_send_raw(struct ipc_chan *c, const void *frame, size_t len, int fd)
{
	size_t off = c->tx.len;

	if (c->fd < 0)
		return -EPIPE;
	if (len > IPC_BUFFER_SIZE)
		return -SONDE_E_LIMIT;
	sonde__buf_append(&c->tx, frame, len);
	if (buf_error(&c->tx) < 0) {
		c->tx.len = off;
		c->tx.failed = false;
		return -ENOMEM;
	}
	return send_queued(c, off, fd);
}

int sonde__ipc_chan_send_iov(struct ipc_chan *c, const struct ipc_frame *f,
			     const struct iovec *args, int n_args)
{
	struct iovec v[IPC_CHAN_MAX_IOV + 2];
	size_t off = c->tx.len, head, tail_len, skip;
	uint8_t tail[2];
	int rc, n = 0;

	if (c->fd < 0)
		return -EPIPE;
	if (n_args < 0 || n_args > IPC_CHAN_MAX_IOV)
		return -EINVAL;
	rc = sonde__ipc_frame_encode_invoke_head(&c->tx, f, tail, &tail_len);
	if (rc < 0)
		return rc;
	head = c->tx.len - off;
	skip = 0;
	if (c->tx_off == off && !c->n_tx_fds) {
		/* nothing queued ahead: the frame goes out from where its pieces are */
		struct msghdr mh = {.msg_iov = v};
		v[n++] = (struct iovec){c->tx.data + off, head};
		for (int i = 0; i < n_args; i++)
			v[n++] = args[i];
		if (tail_len)
			v[n++] = (struct iovec){tail, tail_len};
		mh.msg_iovlen = (size_t)n;
		ssize_t w;
		do
			w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (w < 0 && errno == EINTR);
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			rc = -errno;
			c->tx.len = off;
			return rc;
		}
		skip = w < 0 ? 0 : (size_t)w;
		if (skip >= head) { /* the head went: it leaves the queue */
			c->tx_off += head;
			skip -= head;
		} else {
			c->tx_off += skip;
			skip = 0;
		}
	}
	/* the rest, past what the socket took, is queued */
	for (int i = 0; i < n_args; i++) {
		size_t len = args[i].iov_len;
		if (skip >= len) {
			skip -= len;
			continue;
		}
		sonde__buf_append(&c->tx, (const uint8_t *)args[i].iov_base + skip, len - skip);
		skip = 0;
	}
	if (skip < tail_len)
		sonde__buf_append(&c->tx, tail + skip, tail_len - skip);
	if (buf_error(&c->tx) < 0)
		return -ENOMEM; /* part of the frame may be gone: the channel cannot go on */
	rc = sonde__ipc_chan_flush(c);
	return rc < 0 ? rc : 0;
}
