/* The tail: an incremental reader of a spool that is still being written (docs/tail.md).
 *
 * Call order:
 *   sonde_tail__open (a file by path), sonde_tail__open_fd, or sonde_recorder__tail (the
 *   recording of this process)
 *   loop: sonde_tail__poll returns the next bounded batch of records; samples of the batch
 *         are in the batch, definitions (modules, frames, stack nodes, threads) stay in the
 *         tail for the tail's whole life, so a sample of a later batch still resolves
 *         through sonde_tail__get_stack / _get_frame / _get_module / _get_thread.
 *         sonde_tail__symbolize resolves a frame through the tail's symbolizer, which each
 *         batch has already brought up to date (processes that exec'd or exited, new JIT
 *         code, exact images shared by the recorder).
 *   sonde_tail__free
 *
 * An incomplete last record (the writer is mid-flush) is not an error: it stays buffered
 * and is retried by the next poll. A file that becomes shorter than what was already read
 * is an error (-SONDE_E_SHRUNK): a truncated and rewritten spool cannot be followed.
 * Malformed bytes are the errors of include/sonde/spool_reader.h. Errors are sticky: every
 * later poll returns the same error.
 *
 * A tail is not thread-safe; use it from one thread (it may be another thread than the
 * recorder's, as long as the two are not used at the same time).
 */
#ifndef SONDE_TAIL_H
#define SONDE_TAIL_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

struct sonde_tail;
struct sonde_recorder;

/* Options; zero-initialize and set sz = sizeof(struct sonde_tail_opts). */
struct sonde_tail_opts {
	size_t sz;
	/* Deallocate the file's blocks once their records were consumed (fallocate
	 * FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, whole 4 KiB blocks only), so that an
	 * unbounded live recording uses bounded disk space. The file keeps its size, but the
	 * punched range reads as zeros: nothing else can read the spool from its start any
	 * more (sonde report will reject it). Needs a file opened for writing (the tail opens
	 * it read-write) on a file system that supports it; where it does not, the tail logs
	 * a warning once and stops punching. */
	int punch_holes;
	/* Options of the symbolizer the tail creates on first use (NULL: defaults); only read
	 * during the call that creates it. */
	const struct sonde_symbolizer_opts *symbolizer;
};

/* What one poll consumed. Pointers are owned by the tail and valid until the next
 * sonde_tail__poll or sonde_tail__free. */
struct sonde_tail_batch {
	size_t sz; /* set by the caller: sizeof(struct sonde_tail_batch) */
	const struct sonde_spool_sample *samples; /* the batch's samples, in time order */
	size_t n_samples;
	/* Processes whose symbolized results may have changed: they exec'd or exited (a reused
	 * pid is another program) or mapped new JIT code. The tail's symbolizer has already
	 * dropped its cache for them; a caller caching names of their frames must drop those
	 * too. Each pid appears once. */
	const uint32_t *invalidated_pids;
	size_t n_invalidated;
	uint64_t records; /* records consumed by this poll */
	uint64_t bytes;	  /* bytes consumed by this poll */
	uint64_t offset;  /* stream offset after the last record consumed */
	uint64_t pending; /* bytes read but not consumed: part of a record still being written */
	uint32_t new_modules, new_frames, new_stacks, new_threads; /* defined in this batch */
	uint32_t retirements; /* RETIRE records in this batch */
	int ended;	      /* the END record was consumed (by this or an earlier poll) */
	/* The batch's off-CPU intervals (a recording made with --off-cpu), as the whole-file
	 * reader presents them (sonde_spool__get_offcpu: stack is the innermost node), in
	 * file order: by their end, not their switch-out */
	const struct sonde_spool_offcpu *offcpu;
	size_t n_offcpu;
	/* intervals whose end a loss took (sonde_spool__get_unknown) */
	const struct sonde_spool_offcpu *unknown;
	size_t n_unknown;
	/* threads' intervals too short to stack, in aggregate (sonde_spool__get_offcpu_short) */
	const struct sonde_spool_offcpu_short *shorts;
	size_t n_shorts;
	/* The CPUs' switches, in a recording that keeps them (`-a --off-cpu` of every
	 * process; switches is then set from its first SWITCHES record on): the stays on a
	 * CPU that this batch's switches ended, as sonde_spool__get_tid_run presents them
	 * (tid the kernel's, start_ns 0 for a stay that began before the CPU's first
	 * switch), CPU by CPU; at the END record, each CPU's last stay, end_ns UINT64_MAX */
	const struct sonde_spool_run *runs;
	size_t n_runs;
	/* by CPU number below n_switched: the time of its latest switch so far, 0 for none
	 * (who ran on it is known up to there) */
	const uint64_t *switched;
	uint32_t n_switched;
	int switches;
};

/* Opens the spool at path for tailing from its start. opts may be NULL. Returns a tail owned
 * by the caller (free with sonde_tail__free), or NULL and errno (the open error; nothing is
 * read yet, so an empty or not-yet-written file is fine). */
SONDE_API struct sonde_tail *sonde_tail__open(const char *path, const struct sonde_tail_opts *opts);
/* The same on a descriptor the caller keeps (the tail uses its own duplicate, read with
 * pread from offset 0). */
SONDE_API struct sonde_tail *sonde_tail__open_fd(int fd, const struct sonde_tail_opts *opts);
/* Flushes the recorder's spool and creates the one live tail of this recording (which must
 * have been attached to a path, not a write function). The tail reads the spool file
 * through its own descriptor and shares the recorder's bounded cache of exact module images
 * (opened through /proc/PID/map_files when the recorder saw each file), so a binary deleted
 * or replaced after it was mapped still symbolizes. The tail may outlive the recorder; it
 * then stops receiving images. NULL and errno: EINVAL for a second tail of the same
 * recorder or a recorder writing to a write function, else the error of flushing or of
 * opening the file. */
SONDE_API struct sonde_tail *sonde_recorder__tail(struct sonde_recorder *r,
						 const struct sonde_tail_opts *opts);
/* Frees the tail, its definitions and its symbolizer (NULL is fine). */
SONDE_API void sonde_tail__free(struct sonde_tail *t);

/* Consumes what the writer has made visible since the last poll, at most max_records records
 * and max_bytes bytes of the file (0: 65536 records, 1 MiB), and describes it in *out (sz
 * set, else -EINVAL; may be NULL). A poll that spends max_bytes inside a record reads on
 * until that record is whole: it consumes a record whenever one is complete in the file.
 * Returns the number of records consumed (0: nothing new yet), or a negative error:
 * -SONDE_E_SHRUNK when the file became shorter, a format error at the offset
 * sonde_tail__offset gives, or -errno of reading. The cause is logged. */
SONDE_API int sonde_tail__poll(struct sonde_tail *t, size_t max_records, size_t max_bytes,
			      struct sonde_tail_batch *out);
/* Stream offset of the next record to consume. */
SONDE_API uint64_t sonde_tail__offset(const struct sonde_tail *t);
/* The header (valid once a poll consumed it: returns 0, else -EAGAIN). */
SONDE_API int sonde_tail__header(const struct sonde_tail *t, struct sonde_spool_header *out);

/* Definitions seen so far, as in include/sonde/spool_reader.h. Strings are owned by the tail
 * and stay valid until sonde_tail__free. -ERANGE for an id not (yet) defined. */
SONDE_API int sonde_tail__get_stack(const struct sonde_tail *t, uint32_t stack, uint32_t *frames,
				   size_t max);
SONDE_API int sonde_tail__get_node(const struct sonde_tail *t, uint32_t stack, uint32_t *parent,
				  uint32_t *frame);
SONDE_API int sonde_tail__get_frame(const struct sonde_tail *t, uint32_t frame,
				   struct sonde_spool_frame *out);
SONDE_API int sonde_tail__get_module(const struct sonde_tail *t, uint32_t module,
				    struct sonde_spool_module *out);
SONDE_API int sonde_tail__get_thread(const struct sonde_tail *t, uint32_t thread,
				    struct sonde_spool_thread *out);

/* The tail's symbolizer, created on first call with opts->symbolizer, owned by the tail.
 * Each poll updates it before returning. NULL and errno when it cannot be created. */
SONDE_API struct sonde_symbolizer *sonde_tail__symbolizer(struct sonde_tail *t);
/* Resolves frame id `frame` through the tail's symbolizer; pid is the process of the sample
 * (used for frames outside any module, which only a JIT perf map of that process can name).
 * Results as sonde_symbolizer__symbolize: out[0, n), innermost first; strings owned by the symbolizer. */
SONDE_API int sonde_tail__symbolize(struct sonde_tail *t, uint32_t frame, uint32_t pid,
				   struct sonde_sym_frame *out, size_t max);

#endif
