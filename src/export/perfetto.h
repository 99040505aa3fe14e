/* Perfetto profile packets (perfetto-wire.md §7.2, §7.3): turns the records of a spool
 * stream into TracePackets in traced_perf's layout, one sequence. Internal to libsonde.
 *
 * The same encoder serves the file export (sonde convert, sonde record -o x.pftrace) and
 * the linux.perf data source of sonded: it never writes anywhere itself, each finished
 * packet goes to the caller's sink, without any trusted field (the service, or the file
 * writer for a standalone trace, appends those).
 *
 * Interning is incremental: every interned object (string, mapping, frame, callstack)
 * remembers the generation it was last emitted in; sonde__pf_enc_clear_incremental starts a new
 * generation, so the next packet re-emits the defaults, the iid-0 strings and then,
 * lazily, whatever later packets refer to. iids themselves never change.
 */
#ifndef SONDE_EXPORT_PERFETTO_H
#define SONDE_EXPORT_PERFETTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

/* Receives one serialized TracePacket. Returns 0, or -errno to fail the encoder call. */
typedef int (*pf_sink_fn)(void *ctx, const uint8_t *pkt, size_t len);

/* PerfEvents.Counter values used here. */
enum { PF_COUNTER_SW_CPU_CLOCK = 1, PF_COUNTER_HW_CPU_CYCLES = 10 };
/* PerfSample.unwind_error / producer_event values used here. */
enum { PF_UNWIND_MEMORY_INVALID = 2, PF_STOP_REASON_GUARDRAIL = 1 };

struct pf_enc_opts {
	pf_sink_fn sink;
	void *ctx;
	/* The timebase written into perf_sample_defaults: frequency (Hz) or period; both 0
	 * derives the frequency from the spool header's nominal sample period. */
	uint64_t frequency, period;
	uint32_t counter; /* PerfEvents.Counter; 0 writes none */
	/* Or a tracepoint timebase: PerfEvents.Tracepoint{name, filter} (borrowed for the
	 * encoder's life; NULL writes none). */
	const char *tracepoint, *tracepoint_filter;
	/* Symbolize frames with this symbolizer (not owned); NULL keeps rel_pc and build
	 * ids only, with no function names. */
	struct sonde_symbolizer *sym;
	/* Emit a ClockSnapshot relating the sample clock (MONOTONIC) to BOOTTIME and
	 * REALTIME from the spool header: for a standalone file, where no service writes
	 * one. BOOTTIME is taken equal to MONOTONIC (the spool does not record their
	 * difference). */
	bool clock_snapshot;
	/* Read /proc/PID/cmdline and the parent pid of new processes (live data source);
	 * otherwise the process name is the comm of its threads. */
	bool live_proc;
	/* Leave user frames out of callstacks (user_frames SKIP): only kernel frames stay, and
	 * a sample without any has no callstack. */
	bool skip_user_frames;
	/* Added to the sched events' timestamps (MONOTONIC, the sample clock): FtraceEventBundles
	 * have no clock id and Trace Processor reads them as BOOTTIME, so a live data source,
	 * whose PerfSamples the service's clock snapshots convert from MONOTONIC, gives
	 * BOOTTIME - MONOTONIC here; 0 for a file, whose clock_snapshot equates the two. */
	int64_t sched_boot_offset_ns;
	/* A sched_waking's waker (FtraceEvent.pid) only when it is a thread of the stream,
	 * else the idle task: a consumer that may not see every task is not told of others'. */
	bool wakers_recorded_only;
	/* Only what these filters keep (their pid/tid/comm, cpu and time fields, with `sonde
	 * report`'s meaning; borrowed for the encoder's life; NULL keeps everything): the
	 * threads, samples, off-CPU intervals and unknown-time slices of the threads chosen,
	 * taken on the CPUs chosen within the time window; the switches of the CPUs chosen
	 * within the window, a side that is not chosen written as the CPU's idle task
	 * (docs/exports.md). */
	const struct sonde_profile_spool_opts *select;
};

struct pf_enc;

/* NULL and errno on failure. */
struct pf_enc *sonde__pf_enc_new(const struct pf_enc_opts *o);
void sonde__pf_enc_free(struct pf_enc *e);

/* Consumes one decoded spool record (in stream order), emitting the packets it makes:
 * the start packets at the header, a ProcessTree before a sample of a new thread, a
 * PerfSample with its interned data for each sample and for each off-CPU interval's
 * blocking stack (at its switch-out), whose sched_switch/sched_waking events are held and
 * written as per-CPU FtraceEventBundles in time order at the END record, every
 * PF_SCHED_BATCH events (PF_SCHED_HOLD without the CPUs' switches outside a live data
 * source, whose sequences are chained per CPU: docs/exports.md), or by
 * sonde__pf_enc_flush. 0 or -errno / -SONDE_E_*. */
int sonde__pf_enc_record(struct pf_enc *e, const struct sonde_spool_record *r);
/* Decodes spool bytes incrementally (a live stream, possibly cut anywhere) and feeds each
 * complete record to sonde__pf_enc_record; an incomplete tail is kept for the next call. */
int sonde__pf_enc_feed(struct pf_enc *e, const void *buf, size_t len);
/* perf_sample{kernel_records_lost = n} at time ts. */
int sonde__pf_enc_lost(struct pf_enc *e, uint64_t ts, uint64_t n);
/* perf_sample{producer_event{source_stop_reason}} at time ts. */
int sonde__pf_enc_stop_event(struct pf_enc *e, uint64_t ts, uint32_t reason);
/* Drops the sequence's interning: the next packet starts over (sequence_flags=1). */
void sonde__pf_enc_clear_incremental(struct pf_enc *e);
/* 1 once sonde__pf_enc_feed decoded the spool's END record. */
int sonde__pf_enc_ended(const struct pf_enc *e);
/* Samples encoded so far. */
uint64_t sonde__pf_enc_samples(const struct pf_enc *e);
/* Off-CPU intervals put on the timeline so far (those with a known CPU). */
uint64_t sonde__pf_enc_offcpu(const struct pf_enc *e);
/* Writes the sched events still held, the switch-ins waiting for their thread's next
 * switch-out among them (a stream that ends without its END record, a flush). */
int sonde__pf_enc_flush(struct pf_enc *e);

/* Frames a packet as a Trace record (0x0A varint(len) packet) followed by the trusted
 * fields a standalone file needs (trusted_uid, trusted_packet_sequence_id): appends to out.
 * Returns 0 or -ENOMEM. */
struct buf;
int sonde__pf_frame_standalone(struct buf *out, const uint8_t *pkt, size_t len, int32_t uid,
			       uint32_t seq_id);

/* Trusted sequence id of the profile in a standalone file: 1 is the service's sequence,
 * producer sequences get 2, 3, ... in order (§6.1), so a lone profiler is 2. */
enum { PF_STANDALONE_SEQUENCE_ID = 2 };

#endif
