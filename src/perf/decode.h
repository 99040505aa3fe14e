/* Decoding of perf records, for the sample layout the recorder requests. Internal.
 *
 * Every decoder takes (buf, len) and never reads outside it: the kernel is trusted to
 * write well-formed records, but a wrong layout assumption must end in an error, not an
 * out-of-bounds read. Decoded records borrow from buf (strings, stack bytes).
 */
#ifndef SONDE_PERF_DECODE_H
#define SONDE_PERF_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "perf/regs.h"

/* The sample fields this decoder understands; a layout asking for others is rejected. */
#define PERF_DECODE_SAMPLE_TYPES                                                                   \
	(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |            \
	 PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |           \
	 PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)

/* perf's x86-64 user registers: AX..IP and R8..R15 (the segment registers and flags are
 * not needed for unwinding, and the kernel refuses DS/ES/FS/GS in a 64-bit mask). */
#define PERF_DECODE_REGS_MASK 0xff01ffull

/* What the events were opened with: the decoder derives field positions from it. */
struct perf_layout {
	uint64_t sample_type;
	uint64_t regs_mask;
	bool sample_id_all;
};

struct perf_sample {
	uint64_t ip, time, period, id;
	uint32_t pid, tid, cpu;
	uint64_t regs_abi; /* PERF_SAMPLE_REGS_ABI_*; NONE when the sample hit a kernel thread */
	/* PERF_SAMPLE_CALLCHAIN: callchain_nr u64 entries at callchain (unaligned: read with
	 * memcpy), context markers (PERF_CONTEXT_*) included. */
	const uint8_t *callchain;
	uint64_t callchain_nr;
	/* PERF_SAMPLE_RAW: a tracepoint's record (common_type first), raw_size bytes; other
	 * events write 4 zero bytes */
	const uint8_t *raw;
	uint32_t raw_size;
	struct unwind_regs regs;
	const uint8_t *stack; /* the copied user stack, stack_len valid bytes */
	uint64_t stack_len;
};

struct perf_mmap2 {
	uint32_t pid, tid;
	uint64_t addr, len, pgoff;
	uint32_t maj, min;
	uint64_t ino, ino_generation;
	uint32_t prot, flags;
	const char *filename; /* NUL-terminated inside the record */
	bool has_build_id;    /* PERF_RECORD_MISC_MMAP_BUILD_ID: maj..ino_generation absent */
	uint8_t build_id_len;
	const uint8_t *build_id;
};

struct perf_comm {
	uint32_t pid, tid;
	const char *comm; /* NUL-terminated inside the record */
	bool exec;	  /* PERF_RECORD_MISC_COMM_EXEC */
};

struct perf_task { /* FORK and EXIT */
	uint32_t pid, ppid, tid, ptid;
	uint64_t time;
};

struct perf_lost {
	uint64_t id, lost;
};

/* A decoded record. time/pid/tid/cpu (and id, with PERF_SAMPLE_ID or IDENTIFIER: the
 * event that wrote it, an inherited event's parent) come from the sample or the sample_id
 * trailer (has_id false when the record carries none). */
struct perf_rec {
	uint32_t type;
	uint16_t misc;
	bool has_id;
	uint64_t time, id;
	uint32_t pid, tid, cpu;
	union {
		struct perf_sample sample;
		struct perf_mmap2 mmap2;
		struct perf_comm comm;
		struct perf_task task;
		struct perf_lost lost; /* LOST, and LOST_SAMPLES (id 0) */
	};
};

/* 0, or -EINVAL when the layout asks for fields the decoder does not know. */
int sonde__perf_layout_check(const struct perf_layout *l);
/* Decodes one record. Returns 0, or -SONDE_E_FORMAT / -SONDE_E_TRUNCATED when the record
 * does not fit its declared layout. Record types the recorder never requests decode to their
 * header and trailer only. */
int sonde__perf_decode(const void *buf, size_t len, const struct perf_layout *l,
		       struct perf_rec *out);

#endif
