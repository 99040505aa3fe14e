/* Fuzz target: the tail reader following a growing file whose bytes are arbitrary.
 *
 * Input: one control byte, then the file's bytes. The control byte seeds the split points
 * (the file grows by pseudo-random pieces of 1 to 64 bytes, polled after each), the batch
 * bounds, and whether consumed blocks are punched. Every sample and off-CPU interval a
 * batch hands out must resolve (stack, frames, thread), and the tail must agree with the
 * whole-file reader: as many samples, intervals (cut ones too) and short-interval records
 * when both succeed, and an error only where the reader also fails. */
#include <stdint.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/log.h>
#include <sonde/spool_reader.h>
#include <sonde/tail.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the tail handed out: samples, intervals, cut intervals, short-interval records. */
struct seen {
	uint64_t samples, offcpu, unknown, shorts;
};

/* The stack node and thread of something a batch handed out must resolve. */
static void check_event(const struct sonde_tail *t, uint32_t stack, uint32_t thread)
{
	uint32_t frames[16];
	struct sonde_spool_thread th;
	struct sonde_spool_frame f;
	struct sonde_spool_module m;
	int depth = sonde_tail__get_stack(t, stack, frames, 16);

	if (depth < 0 || sonde_tail__get_thread(t, thread, &th) < 0)
		__builtin_trap();
	for (int k = 0; k < depth && k < 16; k++) {
		if (sonde_tail__get_frame(t, frames[k], &f) < 0)
			__builtin_trap();
		if (f.module && sonde_tail__get_module(t, f.module, &m) < 0)
			__builtin_trap();
	}
}

static void check_batch(const struct sonde_tail *t, const struct sonde_tail_batch *b)
{
	struct sonde_spool_thread th;

	for (size_t i = 0; i < b->n_samples; i++)
		check_event(t, b->samples[i].stack, b->samples[i].thread);
	for (size_t i = 0; i < b->n_offcpu; i++)
		check_event(t, b->offcpu[i].stack, b->offcpu[i].thread);
	for (size_t i = 0; i < b->n_unknown; i++)
		check_event(t, b->unknown[i].stack, b->unknown[i].thread);
	for (size_t i = 0; i < b->n_shorts; i++)
		if (sonde_tail__get_thread(t, b->shorts[i].thread, &th) < 0)
			__builtin_trap();
}

/* Polls until nothing more is visible, counting into *seen; sets *err on an error. */
static void poll_all(struct sonde_tail *t, size_t max_records, size_t max_bytes, struct seen *seen,
		     int *err)
{
	struct sonde_tail_batch b = {.sz = sizeof(b)};
	int n;

	while ((n = sonde_tail__poll(t, max_records, max_bytes, &b)) > 0) {
		check_batch(t, &b);
		seen->samples += b.n_samples;
		seen->offcpu += b.n_offcpu;
		seen->unknown += b.n_unknown;
		seen->shorts += b.n_shorts;
	}
	if (n < 0)
		*err = n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Malformed input is the normal case here: its error messages are noise. */
	sonde_log__set_level(SONDE_LOG_OFF);
	if (size < 1)
		return 0;
	uint8_t ctl = data[0];
	const uint8_t *file = data + 1;
	size_t len = size - 1, off = 0;
	uint32_t rng = 0x9e3779b9u ^ ctl;
	size_t max_records = 1 + ctl % 5, max_bytes = (ctl & 0x40) ? 1 + ctl % 97 : 0;
	struct sonde_tail_opts o = {.sz = sizeof(o), .punch_holes = (ctl & 0x80) != 0};
	int fd = memfd_create("fuzz-tail", MFD_CLOEXEC), err = 0;
	struct seen seen = {0};

	if (fd < 0)
		return 0;
	struct sonde_tail *t = sonde_tail__open_fd(fd, &o);
	if (!t) {
		close(fd);
		return 0;
	}
	while (off < len && !err) {
		rng = rng * 1103515245u + 12345u;
		size_t piece = 1 + (rng >> 16) % 64;
		if (piece > len - off)
			piece = len - off;
		if (write(fd, file + off, piece) != (ssize_t)piece)
			break;
		off += piece;
		poll_all(t, max_records, max_bytes, &seen, &err);
	}
	sonde_tail__free(t);
	close(fd);

	struct sonde_spool *s = sonde_spool__open_mem(file, len, NULL);
	if (s && err)
		__builtin_trap(); /* the tail refused what the reader accepts */
	if (s) {
		struct sonde_spool_info in;
		sonde_spool__get_info(s, &in);
		if (seen.samples != in.samples || seen.offcpu != sonde_spool__offcpu_count(s) ||
		    seen.unknown != sonde_spool__unknown_count(s) ||
		    seen.shorts != sonde_spool__offcpu_short_count(s))
			__builtin_trap();
		sonde_spool__close(s);
	}
	return 0;
}
