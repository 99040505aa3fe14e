#include <arpa/inet.h>
#include <errno.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ipc/addr.h"

/* A decimal number of at most 10 digits in s[0, n), no sign, no leading '+'. */
static bool parse_u32(const char *s, size_t n, uint32_t max, uint32_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 10)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > max)
		return false;
	*out = (uint32_t)v;
	return true;
}

static int parse_vsock(const char *s, size_t len, struct ipc_addr *out)
{
	const char *colon = memchr(s, ':', len);
	uint32_t cid, port;

	if (!colon || !parse_u32(s, (size_t)(colon - s), UINT32_MAX, &cid) ||
	    !parse_u32(colon + 1, len - (size_t)(colon - s) - 1, UINT32_MAX, &port))
		return -EINVAL;
	struct sockaddr_vm *vm = (struct sockaddr_vm *)&out->sa;
	vm->svm_family = AF_VSOCK;
	vm->svm_cid = cid;
	vm->svm_port = port;
	out->sa_len = sizeof(*vm);
	out->kind = IPC_ADDR_VSOCK;
	return 0;
}

static int parse_tcp(const char *s, size_t len, struct ipc_addr *out)
{
	char host[INET6_ADDRSTRLEN];
	const char *colon, *h = s;
	size_t hn;
	uint32_t port;
	bool v6 = len > 0 && s[0] == '[';

	if (v6) {
		const char *end = memchr(s, ']', len);
		if (!end || (size_t)(end - s) + 1 >= len || end[1] != ':')
			return -EINVAL;
		h = s + 1;
		hn = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = memchr(s, ':', len);
		if (!colon)
			return -EINVAL;
		hn = (size_t)(colon - s);
		if (memchr(colon + 1, ':', len - hn - 1))
			return -EINVAL; /* a bare IPv6 address: Perfetto wants it in brackets */
	}
	if (hn == 0 || hn >= sizeof(host) ||
	    !parse_u32(colon + 1, len - (size_t)(colon - s) - 1, 65535, &port) || port == 0)
		return -EINVAL;
	memcpy(host, h, hn);
	host[hn] = '\0';
	if (memchr(host, '\0', hn))
		return -EINVAL;
	if (!v6 && strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1"); /* the one name taken without a resolver */
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->sa;
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		out->sa_len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&out->sa;
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		out->sa_len = sizeof(*a);
	}
	out->kind = IPC_ADDR_TCP;
	return 0;
}

int sonde__ipc_addr_parse(const char *s, size_t len, struct ipc_addr *out)
{
	static const char vsock[] = "vsock://";

	memset(out, 0, sizeof(*out));
	out->kind = IPC_ADDR_UNIX;
	if (len >= sizeof(vsock) - 1 && memcmp(s, vsock, sizeof(vsock) - 1) == 0)
		return parse_vsock(s + sizeof(vsock) - 1, len - (sizeof(vsock) - 1), out);
	/* Perfetto's rule: a name ending in ":DIGITS" is a network address, anything else a
	 * Unix one; an abstract name or a path (with a '/') stays Unix whatever it ends in */
	if (len == 0 || s[0] == '@' || memchr(s, '/', len))
		return 0;
	size_t c = len;
	while (c > 0 && s[c - 1] != ':')
		c--;
	if (c == 0 || c == len)
		return 0;
	for (size_t i = c; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return parse_tcp(s, len, out);
}

int sonde__ipc_addr_list_next(const char *s, size_t *pos, const char **name, size_t *len)
{
	size_t n = strlen(s), i = *pos;

	while (i < n && s[i] == ',')
		i++;
	if (i >= n)
		return 0;
	const char *end = memchr(s + i, ',', n - i);
	size_t j = end ? (size_t)(end - s) : n;
	*name = s + i;
	*len = j - i;
	*pos = j;
	return 1;
}
