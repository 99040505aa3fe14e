/* Fuzz target: arbitrary bytes as a socket name, and as a comma-separated list of them.
 * Checked: a parse succeeds or is -EINVAL; a network address has a family and length that
 * match its kind; a parsed TCP address formats back (inet_ntop) and parses to the same
 * sockaddr; the list walk covers only bytes of the input, in order. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one(const char *s, size_t n)
{
	struct ipc_addr a, b;
	char host[INET6_ADDRSTRLEN], again[INET6_ADDRSTRLEN + 16];
	int rc = sonde__ipc_addr_parse(s, n, &a);

	if (rc != 0 && rc != -EINVAL)
		abort();
	if (rc < 0 || a.kind == IPC_ADDR_UNIX)
		return;
	if (a.kind == IPC_ADDR_VSOCK) {
		if (a.sa.ss_family != AF_VSOCK || a.sa_len != sizeof(struct sockaddr_vm))
			abort();
		return;
	}
	if (a.sa.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a.sa;
		if (a.sa_len != sizeof(*in) || !in->sin_port ||
		    !inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)))
			abort();
		snprintf(again, sizeof(again), "%s:%u", host, ntohs(in->sin_port));
	} else if (a.sa.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a.sa;
		if (a.sa_len != sizeof(*in6) || !in6->sin6_port ||
		    !inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)))
			abort();
		snprintf(again, sizeof(again), "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		abort();
	}
	if (sonde__ipc_addr_parse(again, strlen(again), &b) != 0 || b.kind != IPC_ADDR_TCP ||
	    b.sa_len != a.sa_len || memcmp(&a.sa, &b.sa, a.sa_len) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	const char *name;
	size_t pos = 0, n, last = 0;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	check_one(s, size); /* the whole input, NULs and all: (buf, len) */
	while (sonde__ipc_addr_list_next(s, &pos, &name, &n)) {
		if (name < s + last || name + n > s + strlen(s) || n == 0 || memchr(name, ',', n))
			abort();
		last = (size_t)(name - s) + n;
		check_one(name, n);
	}
	free(s);
	return 0;
}
