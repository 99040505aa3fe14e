/* Socket names as Perfetto spells them (perfetto-wire.md §1.1): a Unix socket path or
 * '@'-abstract name, "HOST:PORT" and "[V6]:PORT" for TCP, "vsock://CID:PORT" for vsock.
 * Internal to libsonde. */
#ifndef SONDE_IPC_ADDR_H
#define SONDE_IPC_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

enum ipc_addr_kind { IPC_ADDR_UNIX, IPC_ADDR_TCP, IPC_ADDR_VSOCK };

struct ipc_addr {
	enum ipc_addr_kind kind;
	struct sockaddr_storage sa; /* TCP (AF_INET, AF_INET6) and vsock (AF_VSOCK) only */
	socklen_t sa_len;
};

/* Parses the name s[0, len) (no NUL needed). "vsock://CID:PORT" (decimal, below 2^32) is
 * vsock; as in Perfetto, a name ending in ":DIGITS" is TCP, "[V6]:PORT" or "V4:PORT" with
 * a numeric IPv4 address or "localhost" (no resolver: a listener binds exactly what it is
 * given) and PORT 1..65535; an ill-formed one of these is -EINVAL. Anything else, and any
 * name with a '/' or a leading '@', is a Unix name (out->kind IPC_ADDR_UNIX; the caller
 * uses the string). Returns 0 or -EINVAL. */
int sonde__ipc_addr_parse(const char *s, size_t len, struct ipc_addr *out);

/* Walks the comma-separated list s (Perfetto's producer socket list) from *pos (start
 * at 0): sets *name and *len to the next name and returns 1, or 0 past the last one.
 * Empty names are skipped. */
int sonde__ipc_addr_list_next(const char *s, size_t *pos, const char **name, size_t *len);

#endif
