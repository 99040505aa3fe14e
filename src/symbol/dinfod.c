#include <elfutils/debuginfod.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/log.h>

#include "symbol/dinfod.h"

/* One query may not hold a report up for long: an unreachable server would otherwise
 * cost libdebuginfod's default of 90 s per build id. */
enum { DINFOD_QUERY_SECONDS = 20 };

struct dinfod {
	debuginfod_client *client;
	char *urls; /* from the options, or NULL */
	struct timespec deadline;
};

static int dinfod_progress(debuginfod_client *c, long done, long total)
{
	struct dinfod *d = debuginfod_get_user_data(c);
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	/* nonzero aborts the transfer */
	return now.tv_sec > d->deadline.tv_sec ||
	       (now.tv_sec == d->deadline.tv_sec && now.tv_nsec > d->deadline.tv_nsec);
}

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
	debuginfod_set_user_data(d->client, d);
	debuginfod_set_progressfn(d->client, dinfod_progress);
	return d;
}

int dinfod_find_debuginfo(struct dinfod *d, const uint8_t *id, size_t len, struct elfimg *out)
{
	const char *prev = getenv("DEBUGINFOD_URLS");
	char *saved = prev ? strdup(prev) : NULL;
	int fd, r;

	if (prev && !saved)
		return -ENOMEM;
	clock_gettime(CLOCK_MONOTONIC, &d->deadline);
	d->deadline.tv_sec += DINFOD_QUERY_SECONDS;
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
