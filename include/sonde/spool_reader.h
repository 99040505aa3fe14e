/* Spool readers (docs/spool.md has the format).
 *
 * Two layers:
 *  - the decoder turns bytes into records one at a time, validating each against what came
 *    before it, and says "need more bytes" when the buffer ends inside a record. It holds
 *    the definitions it must check references against (modules, stack depths, counts), so
 *    its memory grows with the number of distinct modules, frames and stacks, never with
 *    the number of samples: replaying or tailing a recording is done with it.
 *  - the whole-file reader (sonde_spool__open / sonde_spool__open_mem) decodes everything
 *    with the decoder and keeps it for random access to samples, stacks, frames, modules
 *    and threads.
 *
 * Errors are -SONDE_E_MAGIC (not a spool), -SONDE_E_VERSION (a major version this build
 * does not read), -SONDE_E_FORMAT (malformed bytes), -SONDE_E_REFERENCE (an undefined or
 * retired id), -SONDE_E_RANGE (a value out of its range), each at a byte offset.
 */
#ifndef SONDE_SPOOL_READER_H
#define SONDE_SPOOL_READER_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>
#include <sonde/spool.h>

/* Deepest stack the format allows (writers refuse deeper ones). */
#define SONDE_SPOOL_MAX_DEPTH 4096

/* ---- the decoder ---- */

struct sonde_spool_decoder;

enum sonde_spool_record_type {
	SONDE_SPOOL_REC_HEADER = 1,
	SONDE_SPOOL_REC_MODULE,
	SONDE_SPOOL_REC_FRAME,
	SONDE_SPOOL_REC_NODE,
	SONDE_SPOOL_REC_THREAD,
	SONDE_SPOOL_REC_RETIRE,
	SONDE_SPOOL_REC_SAMPLE,
	SONDE_SPOOL_REC_END,
	SONDE_SPOOL_REC_OPTIONAL,     /* a record of a later minor version; safe to ignore */
	SONDE_SPOOL_REC_OFFCPU,	      /* v2.1: an off-CPU interval */
	SONDE_SPOOL_REC_OFFCPU_SHORT, /* v2.1: a thread's short intervals, in aggregate */
	SONDE_SPOOL_REC_ACCOUNT,      /* any 2.x: what the recording could not see */
	SONDE_SPOOL_REC_UNKNOWN,      /* 2.1: an off-CPU interval a loss cut (in .offcpu) */
	SONDE_SPOOL_REC_SWITCHES,     /* 2.1: a run of one CPU's context switches */
	SONDE_SPOOL_REC_EXIT,	      /* any 2.x: a thread exited (in .exit) */
	SONDE_SPOOL_REC_COVERAGE,     /* 2.1: what the off-CPU recording tracked (.coverage) */
};

/* One decoded record. Pointers (path, comm, build_id, payload, retired) point into the
 * buffer passed to sonde_spool_decoder__decode or into the decoder, and stay valid until the next
 * sonde_spool_decoder__decode call; strings are NOT NUL-terminated (use the lengths). */
struct sonde_spool_record {
	enum sonde_spool_record_type type;
	uint64_t offset; /* byte offset of the record in the stream */
	size_t size;	 /* its encoded size */
	union {
		struct {
			uint8_t major, minor;
			struct sonde_spool_header h;
		} header;
		struct {
			uint32_t id;
			uint64_t time_ns;
			struct sonde_spool_module_def def; /* def.path: path_len bytes */
			size_t path_len;
		} module;
		struct {
			uint32_t id;
			struct sonde_spool_frame frame;
		} frame;
		struct {
			uint32_t id, parent, frame;
			uint32_t depth; /* frames from the root to this node, >= 1 */
		} node;
		struct {
			uint32_t id, pid, tid;
			uint64_t time_ns;
			const char *comm;
			size_t comm_len;
		} thread;
		struct {
			uint32_t pid;
			uint64_t time_ns;
			const uint32_t *retired; /* module ids this retired, ascending */
			size_t n_retired;
		} retire;
		struct {
			uint64_t time_ns;
			uint32_t thread;
			uint32_t stack; /* innermost node id, 0 for an empty stack */
			uint32_t flags; /* enum sonde_spool_sample_flags */
			uint32_t cpu;	/* the CPU it was taken on, or SONDE_SPOOL_CPU_NONE */
		} sample;
		struct {
			uint64_t samples;
		} end;
		struct {
			uint8_t tag;
			const uint8_t *payload;
			size_t len;
		} optional;
		struct sonde_spool_offcpu offcpu;
		struct sonde_spool_offcpu_short offcpu_short;
		struct sonde_spool_account account;
		struct {
			uint32_t cpu;
			uint32_t flags; /* enum sonde_spool_switches_flags */
			const struct sonde_spool_switch *v; /* in the decoder */
			size_t n;
		} switches;
		struct {
			uint32_t thread; /* a defined thread id */
			uint64_t time_ns;
		} exit;
		struct {
			uint32_t flags; /* enum sonde_spool_offcpu_coverage */
		} coverage;
	};
};

/* A decoder positioned at the start of a stream (expecting the header). NULL and errno on
 * failure. Free with sonde_spool_decoder__free. */
SONDE_API struct sonde_spool_decoder *sonde_spool_decoder__new(void);
SONDE_API void sonde_spool_decoder__free(struct sonde_spool_decoder *d);

/* Decodes the record at the start of buf[0, len), which must begin at the decoder's stream
 * offset (sonde_spool_decoder__offset). Returns the bytes consumed (> 0) with *rec filled;
 * 0 when buf holds only part of a record (nothing consumed: call again with the same bytes
 * plus more), or a negative error, after which the decoder stays failed and returns that
 * error again. A live reader keeps the unconsumed tail of its buffer and retries. */
SONDE_API int sonde_spool_decoder__decode(struct sonde_spool_decoder *d, const void *buf,
					  size_t len, struct sonde_spool_record *rec);
/* Stream offset of the next record: after an error, the offset of the bad record. */
SONDE_API uint64_t sonde_spool_decoder__offset(const struct sonde_spool_decoder *d);
/* 1 once the END record was decoded, else 0. */
SONDE_API int sonde_spool_decoder__ended(const struct sonde_spool_decoder *d);

/* ---- the whole-file reader ---- */

struct sonde_spool;

struct sonde_spool_info {
	uint8_t version_major, version_minor;
	struct sonde_spool_header header;
	uint64_t samples;
	uint32_t modules, frames, stacks, threads;
	uint64_t first_time_ns, last_time_ns; /* of the samples; 0 when there are none */
	int complete;			      /* the END record is present */
	uint64_t valid_bytes;		      /* end of the last complete record */
	uint64_t dropped_bytes;		      /* bytes after it: a partial final record */
};

struct sonde_spool_sample {
	uint64_t time_ns;
	uint32_t thread;
	uint32_t stack;
	uint32_t flags;
	uint32_t cpu; /* SONDE_SPOOL_CPU_NONE when not recorded (v1 files, writers that omit it) */
};

struct sonde_spool_module {
	struct sonde_spool_module_def def; /* strings owned by the reader */
	uint64_t time_ns;		   /* when it was defined */
	int retired;
	uint64_t retired_ns;
};

struct sonde_spool_thread {
	uint32_t pid, tid;
	uint64_t time_ns;
	const char *comm; /* owned by the reader, NUL-terminated */
};

/* Reads and validates a whole spool. A file cut short is not an error: everything up to
 * its last complete record is kept and sonde_spool__get_info says so (complete == 0,
 * dropped_bytes). On failure returns NULL with errno set to a positive errno or SONDE_E_*
 * code, and *err_offset (when not NULL) to the byte offset of the bad record. */
SONDE_API struct sonde_spool *sonde_spool__open(const char *path, uint64_t *err_offset);
/* The same over bytes in memory; buf is only read during the call (nothing is borrowed). */
SONDE_API struct sonde_spool *sonde_spool__open_mem(const void *buf, size_t len,
						    uint64_t *err_offset);
/* Frees the reader and every string it handed out (NULL is fine). */
SONDE_API void sonde_spool__close(struct sonde_spool *s);

SONDE_API void sonde_spool__get_info(const struct sonde_spool *s, struct sonde_spool_info *info);
/* Sample number i (0-based, in time order). 0, or -ERANGE past the end. */
SONDE_API int sonde_spool__get_sample(const struct sonde_spool *s, uint64_t i,
				      struct sonde_spool_sample *out);
/* The frame ids of stack node `stack`, leaf first, into frames[0, max). Returns the depth
 * (which may exceed max: then only max are filled), 0 for the empty stack, or -ERANGE. */
SONDE_API int sonde_spool__get_stack(const struct sonde_spool *s, uint32_t stack, uint32_t *frames,
				     size_t max);
/* One step of the prefix tree: the parent node and frame of node `stack` (>= 1). */
SONDE_API int sonde_spool__get_node(const struct sonde_spool *s, uint32_t stack, uint32_t *parent,
				    uint32_t *frame);
/* Frame id (>= 1). */
SONDE_API int sonde_spool__get_frame(const struct sonde_spool *s, uint32_t frame,
				     struct sonde_spool_frame *out);
/* Module id (>= 1); out's strings stay valid until sonde_spool__close. */
SONDE_API int sonde_spool__get_module(const struct sonde_spool *s, uint32_t module,
				      struct sonde_spool_module *out);
/* Thread id (>= 1); out->comm stays valid until sonde_spool__close. */
SONDE_API int sonde_spool__get_thread(const struct sonde_spool *s, uint32_t thread,
				      struct sonde_spool_thread *out);

/* Off-CPU intervals (v2.1 recordings made with --off-cpu; 0 for others), in the order they
 * were written: by their end. */
SONDE_API uint64_t sonde_spool__offcpu_count(const struct sonde_spool *s);
/* Interval number i. 0, or -ERANGE past the end. */
SONDE_API int sonde_spool__get_offcpu(const struct sonde_spool *s, uint64_t i,
				      struct sonde_spool_offcpu *out);
/* The aggregated short intervals: one entry per record (a thread may have several). */
SONDE_API uint64_t sonde_spool__offcpu_short_count(const struct sonde_spool *s);
/* Off-CPU intervals whose end a loss took (sonde_spool_writer__add_unknown), in file
 * order: the count, and number i (0, or -ERANGE past the end). */
SONDE_API uint64_t sonde_spool__unknown_count(const struct sonde_spool *s);
SONDE_API int sonde_spool__get_unknown(const struct sonde_spool *s, uint64_t i,
				       struct sonde_spool_offcpu *out);
/* What the off-CPU recording tracked: flags of enum sonde_spool_offcpu_coverage (0 when the
 * file says nothing: a recording without off-CPU, by a recorder before the record, or cut
 * before its end). */
SONDE_API uint32_t sonde_spool__offcpu_coverage(const struct sonde_spool *s);
/* The recording's account (what it could not see): 0, or -ENOENT when the file has none
 * (written by a recorder before it, or cut before its end). */
SONDE_API int sonde_spool__get_account(const struct sonde_spool *s,
				       struct sonde_spool_account *out);
/* One CPU's time by its switches (SWITCHES records: -a --off-cpu recordings of every
 * process) over [start_ns, end_ns]: busy (a task on it), idle (the idle task), unknown
 * (between the switches either side of a loss, up to a switch the recorder inferred,
 * whose time it could only estimate, and before the CPU was first seen). Before a CPU's
 * first switch, the task that switch takes off ran from the CPU's first sample (busy),
 * and before that (from start_ns) the CPU is unknown: its events may have started later
 * than the window. Its last switch's next ran to end_ns. The three add up to end_ns -
 * start_ns exactly. */
struct sonde_spool_cpu_time {
	uint64_t busy_ns, idle_ns, unknown_ns;
	uint64_t switches, inferred; /* switches, those of them the recorder inferred */
};
/* CPUs with switches: one more than the highest CPU number (0: no switches). */
SONDE_API uint32_t sonde_spool__switch_cpus(const struct sonde_spool *s);
/* CPU cpu's time over [start_ns, end_ns] (start_ns at most its first switch, end_ns at
 * least its last): 0, -ENOENT when the CPU has no switch, -ERANGE for a bad window. */
SONDE_API int sonde_spool__get_cpu_time(const struct sonde_spool *s, uint32_t cpu,
					uint64_t start_ns, uint64_t end_ns,
					struct sonde_spool_cpu_time *out);
/* The times of the first and the last switch of any CPU (UINT64_MAX and 0: none). */
SONDE_API uint64_t sonde_spool__first_switch_ns(const struct sonde_spool *s);
SONDE_API uint64_t sonde_spool__last_switch_ns(const struct sonde_spool *s);
/* One stay of a task on a CPU, by the switches (SWITCHES records): from the switch that
 * brought it in to the one that took it off. start_ns 0: it was on the CPU at the CPU's
 * first switch (from the start of the recording); end_ns UINT64_MAX: it was still on at
 * the CPU's last switch (to the end). A stay across lost records (a run marked GAP) is
 * not one: that time is the CPU's unknown time. */
struct sonde_spool_run {
	uint32_t tid; /* the kernel's, as in the switches */
	uint32_t cpu;
	uint64_t start_ns, end_ns;
	uint32_t state; /* how it left: the switch's prev_state (R when it stayed to the end) */
};
/* Stay number i of kernel task tid, in the order of their starts (a task is on one CPU at
 * a time): 0, -ERANGE past its last, -ENOENT when the recording kept no switches. */
SONDE_API int sonde_spool__get_tid_run(const struct sonde_spool *s, uint32_t tid, uint64_t i,
				       struct sonde_spool_run *out);
/* When thread (an id >= 1) exited, by its EXIT record: 0, or -ENOENT when the file has
 * none for it (it was alive at the end, its exit went unseen, or an older recorder wrote
 * the file), -ERANGE for an undefined thread. */
SONDE_API int sonde_spool__get_thread_exit(const struct sonde_spool *s, uint32_t thread,
					   uint64_t *time_ns);
SONDE_API int sonde_spool__get_offcpu_short(const struct sonde_spool *s, uint64_t i,
					    struct sonde_spool_offcpu_short *out);

#endif
