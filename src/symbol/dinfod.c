#include <dlfcn.h>
#include <elfutils/debuginfod.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/log.h>

#include "base/alloc.h"
#include "symbol/dinfod.h"

/* One query may not hold a report up for long: an unreachable server would otherwise
 * cost libdebuginfod's default of 90 s per build id. */
enum { DINFOD_QUERY_SECONDS = 20 };

struct dinfod {
	debuginfod_client *client;
	char *urls; /* from the options, or NULL */
	struct timespec deadline;
};

/* libdebuginfod is loaded on first use instead of being linked: it brings libcurl with its
 * TLS, Kerberos and LDAP libraries, whose loading and initialization alone were two thirds
 * of an idle sonded's memory (RSS 8.1 MB instead of 2.5), in every process that links
 * libsonde, while a debuginfod server is rarely configured. */
static struct {
	__typeof__(debuginfod_begin) *begin;
	__typeof__(debuginfod_end) *end;
	__typeof__(debuginfod_find_debuginfo) *find_debuginfo;
	__typeof__(debuginfod_get_user_data) *get_user_data;
	__typeof__(debuginfod_set_user_data) *set_user_data;
	__typeof__(debuginfod_set_progressfn) *set_progressfn;
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static bool lib_ok;

static void lib_load(void)
{
	void *h = dlopen("libdebuginfod.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		sonde_warn("symbolize: cannot load libdebuginfod: %s", dlerror());
		return;
	}
	lib.begin = (__typeof__(lib.begin))dlsym(h, "debuginfod_begin");
	lib.end = (__typeof__(lib.end))dlsym(h, "debuginfod_end");
	lib.find_debuginfo = (__typeof__(lib.find_debuginfo))dlsym(h, "debuginfod_find_debuginfo");
	lib.get_user_data = (__typeof__(lib.get_user_data))dlsym(h, "debuginfod_get_user_data");
	lib.set_user_data = (__typeof__(lib.set_user_data))dlsym(h, "debuginfod_set_user_data");
	lib.set_progressfn = (__typeof__(lib.set_progressfn))dlsym(h, "debuginfod_set_progressfn");
	lib_ok = lib.begin && lib.end && lib.find_debuginfo && lib.get_user_data &&
		 lib.set_user_data && lib.set_progressfn;
	if (!lib_ok)
		sonde_warn("symbolize: libdebuginfod lacks a function sonde needs");
	/* never unloaded: libcurl does not support it */
}

static int dinfod_progress(debuginfod_client *c, long done, long total)
{
	struct dinfod *d = lib.get_user_data(c);
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	/* nonzero aborts the transfer */
	return now.tv_sec > d->deadline.tv_sec ||
	       (now.tv_sec == d->deadline.tv_sec && now.tv_nsec > d->deadline.tv_nsec);
}

struct dinfod *sonde__dinfod_new(const char *urls)
{
	const char *env = getenv("DEBUGINFOD_URLS");
	struct dinfod *d;

	if (!urls)
		urls = env;
	if (!urls || !urls[strspn(urls, " \t")])
		return NULL;
	pthread_once(&lib_once, lib_load);
	if (!lib_ok)
		return NULL;
	d = sonde__calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->urls = sonde__strdup(urls);
	d->client = lib.begin();
	if (!d->urls || !d->client) {
		sonde__dinfod_free(d);
		return NULL;
	}
	lib.set_user_data(d->client, d);
	lib.set_progressfn(d->client, dinfod_progress);
	return d;
}

int sonde__dinfod_find_debuginfo(struct dinfod *d, const uint8_t *id, size_t len, struct elfimg *out)
{
	const char *prev = getenv("DEBUGINFOD_URLS");
	char *saved = prev ? sonde__strdup(prev) : NULL;
	int fd, r;

	if (prev && !saved)
		return -ENOMEM;
	clock_gettime(CLOCK_MONOTONIC, &d->deadline);
	d->deadline.tv_sec += DINFOD_QUERY_SECONDS;
	setenv("DEBUGINFOD_URLS", d->urls, 1);
	fd = lib.find_debuginfo(d->client, id, (int)len, NULL);
	if (saved)
		setenv("DEBUGINFOD_URLS", saved, 1);
	else
		unsetenv("DEBUGINFOD_URLS");
	sonde__free(saved);
	if (fd < 0) {
		sonde_debug("symbolize: debuginfod: %s", strerror(-fd));
		return fd;
	}
	r = sonde__elfimg_open_fd(out, fd);
	close(fd);
	return r;
}

void sonde__dinfod_free(struct dinfod *d)
{
	if (!d)
		return;
	if (d->client)
		lib.end(d->client);
	sonde__free(d->urls);
	sonde__free(d);
}
