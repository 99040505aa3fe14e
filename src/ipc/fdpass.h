/* SCM_RIGHTS descriptor passing over AF_UNIX sockets: the one receive and send path of
 * the IPC channel (ipc/chan.c) and of both ends of the connector. Internal to libsonde.
 *
 * Every descriptor the kernel installs on receive is handed to the caller, which must
 * take or close each one: an fd left unaccounted for would stay open in the receiver for
 * as long as it runs. The control buffer has room for SCM_MAX_FD descriptors, the most
 * one sendmsg can carry, so no descriptor is ever installed and then lost to the loop
 * that collects them. */
#ifndef SONDE_IPC_FDPASS_H
#define SONDE_IPC_FDPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

enum { IPC_FDPASS_MAX = 253 /* SCM_MAX_FD */ };

/* The descriptors that came with one message, close-on-exec, owned by the holder. */
struct ipc_fds {
	int fd[IPC_FDPASS_MAX];
	unsigned n;
};

/* recvmsg(sock) into buf with flags | MSG_CMSG_CLOEXEC, collecting the descriptors of
 * every SCM_RIGHTS message into *fds (even on MSG_CTRUNC: the kernel installs the ones
 * that fit and drops the rest, and those installed are still the caller's). *msg_flags
 * gets the message's flags (MSG_TRUNC, MSG_CTRUNC). Returns the byte count (0 at EOF or
 * for a message with no bytes) or -errno, with fds->n == 0 then. */
ssize_t sonde__ipc_fdpass_recv(int sock, void *buf, size_t len, int flags, struct ipc_fds *fds,
			int *msg_flags);
/* Closes every descriptor held; fds->n is 0 afterwards. */
void sonde__ipc_fds_close(struct ipc_fds *fds);
/* sendmsg(sock, buf, flags) with fds[0..n) attached (none if n is 0; n at most
 * IPC_FDPASS_MAX). The fds are not taken. Returns the byte count or -errno. */
ssize_t sonde__ipc_fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n, int flags);

#endif
