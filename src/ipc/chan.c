/* The nonblocking IPC channel declared in ipc/frame.h. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

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

int ipc_chan_init(struct ipc_chan *c, int fd)
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

void ipc_chan_close(struct ipc_chan *c)
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
	buf_free(&c->rx);
	buf_free(&c->tx);
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

static void take_cmsg_fd(struct ipc_chan *c, struct msghdr *mh, uint64_t pos, uint64_t end)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(sizeof(int)))
			continue;
		int fd;
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
		if (c->n_rx_fds == IPC_CHAN_MAX_RX_FDS)
			drop_rx_fd(c, 0);
		c->rx_fds[c->n_rx_fds].pos = pos;
		c->rx_fds[c->n_rx_fds].end = end;
		c->rx_fds[c->n_rx_fds].fd = fd;
		c->n_rx_fds++;
	}
}

int ipc_chan_read(struct ipc_chan *c)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;

	while (c->rx.len - c->rx_off < RX_MAX_BUFFERED) {
		rx_compact(c);
		if (c->rx.cap - c->rx.len < RX_MIN_ROOM && buf_reserve(&c->rx, RX_READ_SIZE) < 0)
			return -ENOMEM;
		struct iovec iov = {c->rx.data + c->rx.len, c->rx.cap - c->rx.len};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		}
		uint64_t pos = c->rx_base + c->rx.len;
		if (mh.msg_controllen > 0)
			take_cmsg_fd(c, &mh, pos, pos + (uint64_t)n);
		if (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
			return -SONDE_E_PROTOCOL;
		if (n == 0) {
			c->eof = true;
			return -ECONNRESET;
		}
		c->rx.len += (size_t)n;
		if (mh.msg_controllen > 0)
			break; /* let the caller take the frame that claims this fd */
	}
	return 0;
}

/* Hands out the fd that arrived with the frame [start, end), or -1.
 *
 * A sender attaches the fd to the sendmsg that begins its frame, and the kernel ends a
 * read right after an skb that carried fds (it may, however, glue earlier fd-less bytes
 * in front of it). So the fd belongs to the frame holding the read's last byte, provided
 * that frame began within the read. Fds that no frame claims are closed. */
static int claim_fd(struct ipc_chan *c, uint64_t start, uint64_t end)
{
	while (c->n_rx_fds) {
		if (start >= c->rx_fds[0].end) {
			drop_rx_fd(c, 0); /* its frame was never completed as expected */
			continue;
		}
		if (start >= c->rx_fds[0].pos && end >= c->rx_fds[0].end) {
			int fd = c->rx_fds[0].fd;
			memmove(&c->rx_fds[0], &c->rx_fds[1],
				(c->n_rx_fds - 1) * sizeof(c->rx_fds[0]));
			c->n_rx_fds--;
			return fd;
		}
		break;
	}
	return -1;
}

int ipc_chan_next(struct ipc_chan *c, struct ipc_frame *f, int *fd)
{
	for (;;) {
		size_t avail = c->rx.len - c->rx_off;
		uint32_t len;

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
		int got = claim_fd(c, start, start + IPC_HEADER_SIZE + len);
		c->rx_off += IPC_HEADER_SIZE + len;
		if (len > 0 && ipc_frame_decode(payload, len, f) == 0) {
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

static ssize_t send_some(struct ipc_chan *c)
{
	uint64_t pos = c->tx_base + c->tx_off;
	size_t n = c->tx.len - c->tx_off;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int fd = -1;

	if (c->n_tx_fds) {
		/* bytes before an fd-carrying frame go out alone, so that the fd rides on
		 * the sendmsg that begins its frame */
		if (c->tx_fds[0].pos > pos) {
			if (c->tx_fds[0].pos - pos < n)
				n = (size_t)(c->tx_fds[0].pos - pos);
		} else {
			fd = c->tx_fds[0].fd;
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &fd, sizeof(int));
			if (c->n_tx_fds > 1 && c->tx_fds[1].pos - pos < n)
				n = (size_t)(c->tx_fds[1].pos - pos);
		}
	}
	iov.iov_base = c->tx.data + c->tx_off;
	iov.iov_len = n;
	ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w > 0 && fd >= 0) {
		close(fd);
		memmove(&c->tx_fds[0], &c->tx_fds[1], (c->n_tx_fds - 1) * sizeof(c->tx_fds[0]));
		c->n_tx_fds--;
	}
	return w;
}

int ipc_chan_flush(struct ipc_chan *c)
{
	bool progress = false;

	while (c->tx_off < c->tx.len) {
		ssize_t w = send_some(c);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -errno;
		}
		c->tx_off += (size_t)w;
		if (w > 0)
			progress = true;
	}
	tx_compact(c);
	if (c->tx_off < c->tx.len) {
		/* the send timeout counts from the last bytes the peer took: a consumer that
		 * keeps reading a trace longer than the timeout is slow, not stalled */
		if (!c->tx_stalled_ns || progress)
			c->tx_stalled_ns = mono_ns();
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

int ipc_chan_send(struct ipc_chan *c, const struct ipc_frame *f, int fd)
{
	size_t off = c->tx.len;
	int rc;

	if (c->fd < 0)
		return -EPIPE;
	rc = ipc_frame_encode(&c->tx, f);
	if (rc < 0)
		return rc;
	rc = queue_fd(c, off, fd);
	if (rc < 0) {
		c->tx.len = off;
		return rc;
	}
	rc = ipc_chan_flush(c);
	return rc < 0 ? rc : 0;
}

int ipc_chan_send_raw(struct ipc_chan *c, const void *frame, size_t len, int fd)
{
	size_t off = c->tx.len;
	int rc;

	if (c->fd < 0)
		return -EPIPE;
	if (len > IPC_BUFFER_SIZE)
		return -SONDE_E_LIMIT;
	buf_append(&c->tx, frame, len);
	if (buf_error(&c->tx) < 0) {
		c->tx.len = off;
		c->tx.failed = false;
		return -ENOMEM;
	}
	rc = queue_fd(c, off, fd);
	if (rc < 0) {
		c->tx.len = off;
		return rc;
	}
	rc = ipc_chan_flush(c);
	return rc < 0 ? rc : 0;
}
