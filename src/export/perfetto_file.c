/* A spool converted into a standalone Perfetto trace file (sonde convert --format perfetto,
 * sonde record -o x.pftrace): the packets of export/perfetto.c, each framed as a Trace
 * record with the trusted fields the service would have added. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/profile.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/opts.h"
#include "base/out.h"
#include "export/perfetto.h"

enum { READ_CHUNK = 1 << 20 };

struct file_sink {
	struct out o;
	struct buf b;
	int32_t uid;
};

static int file_sink(void *ctx, const uint8_t *pkt, size_t len)
{
	struct file_sink *fs = ctx;

	sonde__buf_reset(&fs->b);
	if (sonde__pf_frame_standalone(&fs->b, pkt, len, fs->uid, PF_STANDALONE_SEQUENCE_ID) < 0)
		return -ENOMEM;
	sonde__out_write(&fs->o, fs->b.data, fs->b.len);
	return fs->o.err;
}

/* Feeds the whole file to the encoder; a record cut by the end of the file is the tail
 * of a recording that did not finish: left out, and said. */
static int feed_file(struct pf_enc *e, int in, const char *path)
{
	uint8_t *chunk = sonde__malloc(READ_CHUNK);
	uint64_t total = 0;
	int err = 0;

	if (!chunk)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(in, chunk, READ_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		err = sonde__pf_enc_feed(e, chunk, (size_t)n);
		if (err)
			break;
	}
	sonde__free(chunk);
	if (!err && total == 0)
		err = -SONDE_E_MAGIC;
	if (!err && !sonde__pf_enc_ended(e))
		sonde_warn("%s is truncated (a recording that did not finish): using the records "
			   "before the cut",
			   path);
	return err;
}

int sonde_profile__spool_to_perfetto(const char *path, int fd,
				     const struct sonde_profile_spool_opts *opts)
{
	struct file_sink fs = {.b = BUF_INIT, .uid = (int32_t)getuid()};
	struct sonde_symbolizer *sym = NULL;
	struct pf_enc *e = NULL;
	int in = -1, err;

	if (!path || fd < 0 || !OPTS_VALID(opts, sonde_profile_spool_opts))
		return -EINVAL;
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (!OPTS_GET(opts, no_symbolize, false)) {
		sym = sonde_symbolizer__new(OPTS_GET(opts, sym, NULL));
		if (!sym) {
			err = -errno;
			goto out;
		}
	}
	sonde__out_init(&fs.o, fd);
	/* the filters, as the opts' caller sized them (a shorter struct has none) */
	struct sonde_profile_spool_opts sel = {
		.sz = sizeof(sel),
		.pids = OPTS_GET(opts, pids, NULL),
		.n_pids = OPTS_GET(opts, n_pids, 0),
		.tids = OPTS_GET(opts, tids, NULL),
		.n_tids = OPTS_GET(opts, n_tids, 0),
		.comms = OPTS_GET(opts, comms, NULL),
		.n_comms = OPTS_GET(opts, n_comms, 0),
		.cpus = OPTS_GET(opts, cpus, NULL),
		.n_cpus = OPTS_GET(opts, n_cpus, 0),
		.time_range = OPTS_GET(opts, time_range, 0),
		.time_from_s = OPTS_GET(opts, time_from_s, 0),
		.time_to_s = OPTS_GET(opts, time_to_s, 0),
	};
	bool selecting = sel.n_pids || sel.n_tids || sel.n_comms || sel.n_cpus || sel.time_range;
	struct pf_enc_opts eo = {.sink = file_sink,
				 .ctx = &fs,
				 .sym = sym,
				 .clock_snapshot = true,
				 .select = selecting ? &sel : NULL};
	e = sonde__pf_enc_new(&eo);
	if (!e) {
		err = -errno;
		goto out_close;
	}
	err = feed_file(e, in, path);
	if (!err)
		err = sonde__pf_enc_flush(e);
out_close:
	sonde__pf_enc_free(e);
	{
		int cerr = sonde__out_close(&fs.o);
		if (!err)
			err = cerr;
	}
out:
	sonde__buf_free(&fs.b);
	sonde_symbolizer__free(sym);
	close(in);
	return err;
}
