/* The tail's internal constructor and its image provider. Internal to libsonde.
 *
 * A tail made by sonde_recorder__tail gets the exact image of each module it sees from the
 * recorder through a provider callback, so the tail knows nothing of the recorder above
 * it; the provider is told when the tail goes away, and drops itself when it goes first.
 */
#ifndef SONDE_TAIL_TAIL_H
#define SONDE_TAIL_TAIL_H

#include <sonde/spool.h>
#include <sonde/symbolize.h>
#include <sonde/tail.h>

/* Where a tail gets module images. image_fd returns a descriptor of the exact image of
 * module m, borrowed until the next call into the provider, or -1; gone is called when
 * the tail is freed. */
struct tail_image_provider {
	int (*image_fd)(void *ctx, const struct sonde_spool_module_def *m);
	void (*gone)(void *ctx);
	void *ctx;
};

/* A tail reading fd (taken over in every case: closed on failure), with images from
 * images (copied; NULL: none). NULL and errno. */
struct sonde_tail *sonde__tail_new_fd(int fd, const struct sonde_tail_opts *opts,
				      const struct tail_image_provider *images);
/* The provider goes away: the tail keeps working without its images. */
void sonde__tail_drop_images(struct sonde_tail *t);
/* The one conversion of a spool module definition into the symbolizer's module, for the
 * tail and the exporters: out borrows d's path and build id. */
void sonde__tail_sym_module(const struct sonde_spool_module_def *d, struct sonde_sym_module *out);

#endif
