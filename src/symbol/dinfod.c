#include <elfutils/debuginfod.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sonde/log.h>

#include "symbol/dinfod.h"

struct dinfod {
	debuginfod_client *client;
	char *urls; /* from the options, or NULL */
};

struct dinfod *dinfod_new(const char *urls)
{
	const char *env = getenv("DEBUGINFOD_URLS");
	struct dinfod *d;

	if (!urls)
		urls = env;
	if (!urls || !urls[strspn(urls, " \t")])
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->urls = strdup(urls);
	d->client = debuginfod_begin();
	if (!d->urls || !d->client) {
		dinfod_free(d);
		return NULL;
	}
	return d;
}

int dinfod_find_debuginfo(struct dinfod *d, const uint8_t *id, size_t len, struct elfimg *out)
{
	const char *prev = getenv("DEBUGINFOD_URLS");
	char *saved = prev ? strdup(prev) : NULL;
	int fd, r;

	if (prev && !saved)
		return -ENOMEM;
	setenv("DEBUGINFOD_URLS", d->urls, 1);
	fd = debuginfod_find_debuginfo(d->client, id, (int)len, NULL);
	if (saved)
		setenv("DEBUGINFOD_URLS", saved, 1);
	else
		unsetenv("DEBUGINFOD_URLS");
	free(saved);
	if (fd < 0) {
		sonde_debug("symbolize: debuginfod: %s", strerror(-fd));
		return fd;
	}
	r = elfimg_open_fd(out, fd);
	close(fd);
	return r;
}

void dinfod_free(struct dinfod *d)
{
	if (!d)
		return;
	if (d->client)
		debuginfod_end(d->client);
	free(d->urls);
	free(d);
}
