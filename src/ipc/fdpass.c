/* SCM_RIGHTS send and receive (ipc/fdpass.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/fdpass.h"

union fd_ctl {
	char buf[CMSG_SPACE(IPC_FDPASS_MAX * sizeof(int))];
	struct cmsghdr align;
};

static void collect(struct msghdr *mh, struct ipc_fds *fds)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (fds->n < IPC_FDPASS_MAX)
				fds->fd[fds->n++] = fd;
			else
				close(fd); /* cannot happen: the buffer holds no more */
		}
	}
}

ssize_t sonde__ipc_fdpass_recv(int sock, void *buf, size_t len, int flags, struct ipc_fds *fds,
			int *msg_flags)
{
	union fd_ctl ctl;
	struct iovec iov = {buf, len};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	ssize_t n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);

	fds->n = 0;
	*msg_flags = 0;
	if (n < 0)
		return -errno;
	*msg_flags = mh.msg_flags;
	if (mh.msg_controllen > 0)
		collect(&mh, fds);
	return n;
}

void sonde__ipc_fds_close(struct ipc_fds *fds)
{
	for (unsigned i = 0; i < fds->n; i++)
		if (fds->fd[i] >= 0)
			close(fds->fd[i]);
	fds->n = 0;
}

ssize_t sonde__ipc_fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n, int flags)
{
	union fd_ctl ctl;
	struct iovec iov = {(void *)buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (n > IPC_FDPASS_MAX)
		return -EINVAL;
	if (n > 0) {
		memset(ctl.buf, 0, CMSG_SPACE(n * sizeof(int)));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	}
	ssize_t w = sendmsg(sock, &mh, flags);
	return w < 0 ? -errno : w;
}
