/* What makes a recording observable while it runs: spool bytes pushed to the file at a
 * bounded interval, and the one tail (include/sonde/tail.h) that reads the recording in
 * this process, which borrows the images the recorder holds (images.c). Internal.
 */
#ifndef SONDE_RECORD_LIVE_H
#define SONDE_RECORD_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sonde_recorder;
struct sonde_tail;

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
/* A descriptor of the exact image of the file (dev, inode) that the recorder holds while the
 * recording runs (sonde__rec_image_hold, images.c), borrowed until the next call into the
 * recorder, or -1. A build id, when given, must match the one the recorder read. */
int sonde__rec_image_fd(struct sonde_recorder *r, uint64_t dev, uint64_t inode, const uint8_t *build_id,
		 size_t build_id_len);
/* The tail was freed. */
void sonde__rec_tail_gone(struct sonde_recorder *r);

#endif
