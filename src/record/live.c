/* The live side of a recording: periodic pushes of spool bytes, and the tail of this
 * process with its view of the images the recorder holds (src/record/live.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/opts.h"
#include "record/recorder.h"
#include "tail/tail.h"

void sonde__rec_live_free(struct sonde_recorder *r)
{
	if (r->live.tail)
		sonde__tail_drop_images(r->live.tail);
	r->live.tail = NULL;
}

int sonde__rec_live_push(struct sonde_recorder *r)
{
	uint64_t now = sonde__rec_now(r);

	if (now - r->live.last_push_ns < REC_PUSH_INTERVAL_NS)
		return 0;
	r->live.last_push_ns = now;
	int err = sonde__rec_offcpu_switches_push(r);
	return err ? err : sonde_spool_writer__flush(r->spool);
}

/* The tail's image provider: a descriptor of the exact image of the file (dev, inode) that
 * the recorder holds while the recording runs (sonde__rec_image_hold, images.c), borrowed
 * until the next call into the recorder, or -1. A build id in the definition must match
 * the one the recorder read. */
static int tail_image_fd(void *ctx, const struct sonde_spool_module_def *m)
{
	struct sonde_recorder *r = ctx;

	return sonde__rec_image_fd(r, m->dev, m->inode, m->build_id, m->build_id_len);
}

static void tail_gone(void *ctx)
{
	struct sonde_recorder *r = ctx;

	r->live.tail = NULL;
}

struct sonde_tail *sonde_recorder__tail(struct sonde_recorder *r, const struct sonde_tail_opts *opts)
{
	char path[64];

	const char *why = r->live.tail_made ? "this recorder already made its tail"
			  : r->finished	    ? "the recording is finished"
			  : r->out_fd < 0   ? "the recorder writes to a write function, not a file"
					    : NULL;

	if (why) {
		sonde_error("tail: %s", why);
		errno = EINVAL;
		return NULL;
	}
	int err = sonde_spool_writer__flush(r->spool);
	if (err) {
		sonde_error("tail: cannot flush the spool: %s", sonde_strerror(err));
		errno = err <= -SONDE_E_BASE ? EIO : -err;
		return NULL;
	}
	bool punch = OPTS_GET(opts, punch_holes, 0);
	/* A descriptor of its own (reopened, not dup'ed: the recorder's is write-only and its
	 * offset must not move), reachable even when the file was unlinked. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", r->out_fd);
	int fd = open(path, (punch ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		sonde_error("tail: cannot reopen the spool: %s", strerror(e));
		errno = e;
		return NULL;
	}
	struct tail_image_provider images = {tail_image_fd, tail_gone, r};
	struct sonde_tail *t = sonde__tail_new_fd(fd, opts, &images);
	if (!t)
		return NULL;
	r->live.tail = t;
	r->live.tail_made = true;
	return t;
}
