/* What makes a recording observable while it runs: spool bytes pushed to the file at a
 * bounded interval, and the one tail (include/sonde/tail.h) that reads the recording in
 * this process, which borrows the images the recorder holds (images.c) through the
 * tail's image provider (tail/tail.h). Internal.
 */
#ifndef SONDE_RECORD_LIVE_H
#define SONDE_RECORD_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sonde_recorder;
struct sonde_tail;

enum {
	/* A tail in another process sees a sample at most this long (by the recorder's clock)
	 * after a poll processed it (plus the tail's own polling interval). One write per
	 * interval costs little. */
	REC_PUSH_INTERVAL_NS = 100 * 1000 * 1000,
};

struct rec_live {
	struct sonde_tail *tail;
	bool tail_made;	       /* a recorder makes one tail in its life */
	uint64_t last_push_ns; /* when buffered spool bytes were last pushed to the writer */
};

/* Unlinks the tail, which keeps working without the recorder's images. */
void sonde__rec_live_free(struct sonde_recorder *r);
/* Pushes buffered spool bytes when the last push is older than the live interval, so a
 * reader of the file sees samples promptly even when the writer's buffer is far from full.
 * 0 or the writer's error. */
int sonde__rec_live_push(struct sonde_recorder *r);

#endif
