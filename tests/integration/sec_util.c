#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "ipc/sock.h"
#include "sec_util.h"

void sec_require_root(void)
{
	if (geteuid() != 0)
		SKIP("needs root to act as another uid");
}

static void send_fd(int sock, int fd, int err)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&err, sizeof(err)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	(void)!sendmsg(sock, &mh, 0);
}

int sec_connect_as(uid_t uid, const char *path)
{
	int sv[2], err = 0, fd = -1, st;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&err, sizeof(err)};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};

	sec_require_root();
	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	pid_t pid = fork();
	ASSERT(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		if (setgroups(0, NULL) < 0 || setgid(SEC_NOBODY) < 0 || setuid(uid) < 0) {
			send_fd(sv[1], -1, errno);
			_exit(1);
		}
		int c = sonde__ipc_connect(path);
		send_fd(sv[1], c, c < 0 ? -c : 0);
		_exit(0);
	}
	close(sv[1]);
	ssize_t n = recvmsg(sv[0], &mh, MSG_CMSG_CLOEXEC);
	struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	close(sv[0]);
	waitpid(pid, &st, 0);
	if (fd < 0)
		FAIL("connecting to %s as uid %u: %s", path, (unsigned)uid, strerror(err));
	return fd;
}
