/* Spool format v2.1 (v2.0 and v1, which readers still read) constants shared by the writer and the
 * decoder. Internal to libsonde; docs/spool.md describes the format byte by byte. */
#ifndef SONDE_SPOOL_FORMAT_H
#define SONDE_SPOOL_FORMAT_H

#include <stdint.h>

/* 0x89 first so that a text-mode transfer or a `file` guess cannot mistake it for text;
 * "\r\n" last so that line-ending conversion is detected, as in PNG. */
#define SPOOL_MAGIC "\x89SONDE\r\n"

enum {
	SPOOL_MAGIC_LEN = 8,
	SPOOL_VERSION_MAJOR = 2,
	SPOOL_VERSION_MINOR = 0,
	SPOOL_VERSION_MINOR_OFFCPU = 1, /* 2.1: off-CPU interval records (tags 0x40, 0x41) */
	SPOOL_VERSION_MAJOR_OLDEST = 1, /* the oldest major readers accept */
	/* Bounds every reader enforces; the writer never produces more. */
	SPOOL_MAX_HEADER = 4096,
	SPOOL_MAX_RECORD = 65536,
	SPOOL_MAX_PATH = 4096,
	SPOOL_MAX_COMM = 256,
	SPOOL_MAX_BUILD_ID = 32,
	SPOOL_MAX_DEPTH = 4096,
	/* CPU numbers SWITCHES records may name: no machine has more CPUs, and a reader
	 * follows each CPU's switches apart */
	SPOOL_MAX_CPUS = 1 << 20,
	/* ids are u32 and 0 is reserved, so at most this many of each kind */
	SPOOL_MAX_ID = UINT32_MAX - 1,
};

enum spool_tag {
	/* Definitions and lifecycle: tag, varint payload length, payload. */
	SPOOL_TAG_MODULE = 0x01,
	SPOOL_TAG_FRAME = 0x02,
	SPOOL_TAG_NODE = 0x03,
	SPOOL_TAG_THREAD = 0x04,
	SPOOL_TAG_RETIRE = 0x05,
	SPOOL_TAG_END = 0x06,
	/* Length-prefixed records a reader that does not know them skips (later minors). */
	SPOOL_TAG_SKIP_FIRST = 0x40,
	/* v2.1: an off-CPU interval, and one thread's count of intervals too short to stack */
	SPOOL_TAG_OFFCPU = 0x40,
	SPOOL_TAG_OFFCPU_SHORT = 0x41,
	/* any 2.x: what the recording could not see (kernel time, lost records); optional,
	 * so that no minor is needed: a reader that does not know it skips it */
	SPOOL_TAG_ACCOUNT = 0x42,
	/* 2.1 and later, optional: an off-CPU interval whose end a loss took (OFFCPU's fields);
	 * a 2.1 reader that does not know it skips it */
	SPOOL_TAG_UNKNOWN = 0x43,
	/* 2.1 and later, optional: a run of one CPU's context switches (-a --off-cpu) */
	SPOOL_TAG_SWITCHES = 0x44,
	/* any 2.x, optional: a thread's exit, so that its life has an end (a reader that does
	 * not know it skips it) */
	SPOOL_TAG_EXIT = 0x45,
	/* 2.1 and later, optional: what the off-CPU recording tracked (a reader that does not
	 * know it skips it) */
	SPOOL_TAG_COVERAGE = 0x46,
	SPOOL_TAG_SKIP_LAST = 0x7f,
	/* Samples: no length prefix, to keep them a few bytes. Tag bits: */
	SPOOL_TAG_SAMPLE = 0x80,
	SPOOL_SAMPLE_FLAG_MASK = 0x03,	 /* enum sonde_spool_sample_flags */
	SPOOL_SAMPLE_SAME_THREAD = 0x04, /* thread omitted: same as the previous sample */
	SPOOL_SAMPLE_CPU = 0x08,	 /* v2: a CPU field follows (else the previous one) */
	SPOOL_SAMPLE_RESERVED = 0x70,	 /* must be zero (v1: 0x78) */
	SPOOL_SAMPLE_RESERVED_V1 = 0x78,
	SPOOL_OFFCPU_FLAG_MASK = 0x07, /* enum sonde_spool_sample_flags | SONDE_OFFCPU_OPEN */
};

#endif
