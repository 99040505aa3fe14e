/* The recorder: samples the user stacks of Linux processes with perf_event and writes them
 * to a spool (include/sonde/spool.h).
 *
 * Call order:
 *   sonde_recorder__attach (or _attach_writer)   opens events, writes the spool header and
 *                                                the target's executable mappings, starts
 *                                                sampling
 *   loop: wait on sonde_recorder__epoll_fd, or let sonde_recorder__poll wait; each poll drains
 *         every ring, merges the rings' records in time order, unwinds and writes samples.
 *         Nothing happens in the background: a recorder that is not polled loses samples
 *         once its rings fill (counted as lost).
 *   sonde_recorder__finish                        disables sampling, drains, flushes
 *   sonde_recorder__free
 *
 * Lifecycle (docs/record.md): new threads inherit the events; with follow_children, so do
 * forked processes, which start with their parent's modules. exec retires a process's
 * modules, exits retire threads and processes. A loss (full ring) may drop those records
 * too: any new loss schedules a recovery sweep that reconciles the tables with /proc.
 *
 * A recorder is not thread-safe; use it from one thread. Errors are -errno or -SONDE_E_*;
 * the detailed cause of a failure (for example which kernel setting refused perf_event) is
 * logged through sonde_log at SONDE_LOG_ERROR before the call returns.
 */
#ifndef SONDE_RECORD_H
#define SONDE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sonde/export.h>
#include <sonde/spool.h>

struct sonde_recorder;

enum sonde_attach_mode {
	/* A running process: stop every thread (PTRACE_SEIZE + PTRACE_INTERRUPT, a ptrace-stop
	 * its parent does not see, unlike SIGSTOP), open events and read its mappings, then
	 * enable and detach (only what this call stopped). The calling thread is the tracer
	 * until then. Where ptrace is refused (Yama ptrace_scope, no CAP_SYS_PTRACE, traced
	 * already), a warning is logged and the process is attached running. A child of the
	 * caller is stopped with SIGSTOP and resumed with SIGCONT instead: its ptrace-stops
	 * would be reported to the caller's own waitpid calls, WUNTRACED or not. */
	SONDE_ATTACH_STOP = 0,
	/* A process launched suspended before execve (sonde_launch__new): events are enabled by
	 * the kernel at exec, so sampling starts at its first instruction. */
	SONDE_ATTACH_ON_EXEC = 1,
	/* A running process, without stopping it: mappings created while attaching may be
	 * missed. */
	SONDE_ATTACH_RUNNING = 2,
};

enum sonde_record_event {
	SONDE_RECORD_EVENT_AUTO = 0,   /* cycles when the machine has a CPU PMU, else cpu-clock */
	SONDE_RECORD_EVENT_CYCLES = 1, /* try cycles first in any case; fall back to cpu-clock */
	SONDE_RECORD_EVENT_CPU_CLOCK = 2, /* the software cpu-clock only */
};

/* frequency value asking for the kernel's maximum (kernel.perf_event_max_sample_rate). */
#define SONDE_RECORD_FREQ_MAX UINT64_MAX

/* Options; zero-initialize, set sz = sizeof(struct sonde_record_opts), then the fields you
 * need. Fields added later go at the end, so older callers keep working. */
enum sonde_offcpu_backend {
	SONDE_OFFCPU_BACKEND_AUTO = 0,
	SONDE_OFFCPU_BACKEND_BPF = 1,
	SONDE_OFFCPU_BACKEND_PERF = 2,
};

struct sonde_record_opts {
	size_t sz;
	/* Samples per second per thread: 1 .. the kernel maximum, or SONDE_RECORD_FREQ_MAX.
	 * 0 is invalid (an error naming the allowed range). Ignored with sample_period. */
	uint64_t frequency;
	/* User stack bytes copied per sample: at most 65528; rounded up to a multiple of 8.
	 * Larger copies unwind deeper stacks and cost more per sample. 0: sized per thread from
	 * what its unwinds need, starting at 32768 (docs/record.md, "Stack copy sizing";
	 * system-wide recordings copy 32768). */
	uint32_t stack_bytes;
	/* Data pages of each per-CPU ring at the start, a power of two; 0 for a size chosen
	 * from the rate and the stack copy (docs/record.md, "Ring sizing"). A ring the kernel
	 * refuses to map (locked-memory limit) is halved down to what one sample needs; a ring
	 * that loses records is doubled while all rings stay under ring_bytes_cap. */
	uint32_t ring_pages;
	enum sonde_record_event event;
	/* Kernel frames too: samples taken in the kernel count, and each sample's stack starts
	 * with its kernel frames (from the perf callchain, innermost first) followed by the
	 * user frames. When the kernel refuses kernel sampling (EACCES/EPERM, for example
	 * kernel.perf_event_paranoid >= 2 without CAP_PERFMON) the recording goes on with
	 * user frames only, logs one warning, and the summary says kernel_enabled = 0. */
	bool kernel;
	/* The build-id cache (docs/record.md): mapped images that were deleted or replaced
	 * while recorded are copied there when the recording finishes, so that they still
	 * symbolize after the process is gone. Directory: NULL for $SONDE_BUILDID_CACHE, else
	 * $XDG_CACHE_HOME/sonde/buildid, else ~/.cache/sonde/buildid. Bound of its total
	 * size: 0 for 512 MiB (the least recently stored images go first). */
	const char *buildid_cache_dir;
	uint64_t buildid_cache_bytes;
	bool no_buildid_cache; /* keep nothing */
	/* Follow the processes the targets fork (and their threads, and their own children):
	 * each inherits the events, its parent's modules and unwind state, and is retired at
	 * exec and exit like an attached process. Children are followed by default, as the
	 * CLI follows them: see no_follow_children, at the end, which decides for callers
	 * whose struct has it. This field decides only for callers built against an older
	 * header (whose struct ends before no_follow_children), where false means only the
	 * attached processes and their threads are sampled. Setting it with
	 * no_follow_children is -EINVAL. */
	bool follow_children;
	/* Walk user stacks by frame pointers only, never by CFI: for code built with frame
	 * pointers, where the walk is cheaper (every frame counts in unwind_fp_frames). */
	bool frame_pointers_only;
	/* Called when an attached process is seen running a new program (its exec record, in
	 * time order with its samples, or a recovery sweep finding another executable),
	 * before any later record of it is processed. Returning false stops recording the
	 * process there, as sonde_recorder__detach_process does. NULL: every exec is fine. */
	bool (*exec_check)(void *ctx, pid_t pid);
	void *exec_check_ctx;
	/* System-wide recordings (sonde_recorder__attach_system) only. The CPUs to sample:
	 * NULL (or n_cpus 0) for every online CPU; each must be online (else -EINVAL). */
	const int *cpus;
	size_t n_cpus;
	/* Record only these processes and the processes they fork (NULL or 0: every process).
	 * The events stay system-wide; samples of other processes are dropped (counted in
	 * unfollowed_samples). */
	const pid_t *filter_pids;
	size_t n_filter_pids;
	/* A fixed sample period instead of a frequency (perf record -c): one sample every
	 * sample_period events (nanoseconds of CPU time for cpu-clock, cycles for cycles).
	 * 0: sample at frequency. */
	uint64_t sample_period;
	/* Sample on a tracepoint instead of a CPU clock (perf record -e GROUP:NAME): "GROUP:NAME"
	 * (or "GROUP/NAME", Perfetto's form), e.g. "sched:sched_switch", looked up in tracefs
	 * (/sys/kernel/tracing, then /sys/kernel/debug/tracing). Samples carry the user stack
	 * of the thread that hit it, as other samples do; every hit is sampled unless
	 * sample_period asks for one in N. frequency and event are ignored. NULL: a CPU
	 * clock as event says. Read during attach only. An unknown tracepoint is -ENOENT, no
	 * tracefs -ENODEV, a malformed name -EINVAL (each logged as one error). */
	const char *tracepoint;
	/* With tracepoint: ftrace's filter on its fields (PERF_EVENT_IOC_SET_FILTER, e.g.
	 * "prev_state == 1"): only the hits that match count towards the period. Copied.
	 * NULL: every hit. One the kernel refuses is -EINVAL (logged); without tracepoint,
	 * -EINVAL. */
	const char *tracepoint_filter;
	/* System-wide recordings only: asked the first time the recording meets a process (in
	 * /proc at the start or in a recovery sweep, at its fork, or at its first sample or
	 * mapping) and again after each exec. false: nothing of that process is recorded —
	 * no samples (counted in unfollowed_samples), mappings or thread names — and a
	 * process refused after an exec is retired and not recorded again. Runs inside poll,
	 * flush and finish, when the records are processed: the process may be gone by then
	 * (it exited), which the function should answer with false when in doubt. NULL:
	 * every process. */
	bool (*process_check)(void *ctx, pid_t pid);
	void *process_check_ctx;
	/* Off-CPU profiling (docs/record.md, "Off-CPU"): every switch-out of a recorded
	 * thread is sampled through the sched:sched_switch tracepoint, with its user stack (and
	 * kernel stack with `kernel`), and written as an interval once the thread runs again,
	 * with the state it left in and, when sched:sched_waking saw it, its waker. Needs
	 * tracefs and the right to open tracepoints (root, CAP_PERFMON, or
	 * kernel.perf_event_paranoid -1). With tracepoint "sched:sched_switch" (or
	 * "sched/sched_switch"), and neither tracepoint_filter nor sample_period: off-CPU
	 * only, the recording's own event a dummy one carrying the side band (mappings,
	 * comms, tasks) and no on-CPU samples (summary event "dummy"); with any other
	 * tracepoint, a filter or a period, -EINVAL (the intervals need every switch). */
	bool off_cpu;
	/* Intervals shorter than this are counted per thread (count and total) instead of
	 * stacked: 0 for the default 1 ms; 1 stacks every interval. */
	uint64_t off_cpu_min_ns;
	/* sonde_recorder__attach and _attach_writer: pid is a thread id, and only that thread
	 * is recorded, as sonde_recorder__attach_thread adds one (not with
	 * SONDE_ATTACH_ON_EXEC: -EINVAL). */
	bool attach_thread;
	/* System-wide recordings only, like filter_pids: record only these threads, and the
	 * threads and processes they create (with follow_children, which a system-wide
	 * recording always has). */
	const pid_t *filter_tids;
	size_t n_filter_tids;
	/* System-wide recordings only: record only the samples of tasks whose command name
	 * (comm, as the kernel reports it at that sample: renames and execs count) is exactly
	 * one of these (at most 15 bytes each, longer names never match). A sample is recorded
	 * when any of filter_pids, filter_tids and filter_comms selects it. */
	const char *const *filter_comms;
	size_t n_filter_comms;
	/* Sample user space only. By default the sampling event counts the time threads spend
	 * in the kernel too (system calls, faults, interrupts), each such sample attributed to
	 * the user stack the thread entered the kernel with under one "[kernel]" frame (all
	 * the kernel frames with `kernel`); where the kernel refuses that (EACCES/EPERM:
	 * kernel.perf_event_paranoid >= 2 without CAP_PERFMON) the recording samples user
	 * space only and the summary says kernel_time = 0 with kernel_time_error. Above
	 * 10 kHz (a frequency, or a cpu-clock sample_period under 100 us) it is not sampled
	 * without `kernel` either, where a sample's own interrupt would be sampled as kernel
	 * time (kernel_time_error -ERANGE; docs/record.md). */
	bool user_only;
	/* Which backend records off_cpu (docs/record.md, "Off-CPU backends"): AUTO uses BPF
	 * when the kernel allows it (CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON; kernel BTF;
	 * libsonde built with it), else perf_event; BPF or PERF forces one (a refused BPF then
	 * fails the recording). The summary says which one ran and why. */
	enum sonde_offcpu_backend off_cpu_backend;
	/* Record only the attached processes and their threads: the processes they fork are
	 * created without events (`sonde record --no-inherit`). false (the default, and NULL
	 * opts): children are followed, as follow_children describes. */
	bool no_follow_children;
};

/* The default of sonde_record_opts.off_cpu_min_ns. */
#define SONDE_RECORD_OFF_CPU_MIN_DEFAULT 1000000ull

#define SONDE_UNWIND_FALLBACKS 8

/* Counters of the whole recording. */
struct sonde_record_summary {
	size_t sz;		   /* set by the caller: sizeof(struct sonde_record_summary) */
	uint64_t samples;	   /* sample records read from the rings */
	uint64_t samples_written;  /* samples written to the spool */
	uint64_t lost_events;	   /* records the kernel dropped because a ring was full */
	uint64_t lost_samples;	   /* samples the kernel dropped (PERF_RECORD_LOST_SAMPLES) */
	uint64_t empty_stacks;	   /* samples without any user frame (not written) */
	uint64_t truncated_stacks; /* stacks that continue beyond what was copied or walked */
	uint64_t unwind_errors;	   /* stacks whose walk stopped at an implausible frame */
	uint64_t bad_records;	   /* records that did not decode (skipped) */
	uint64_t duration_ns;	   /* from attach to finish (or now) */
	uint64_t frequency;	   /* samples per second asked of the kernel (0: a period) */
	uint64_t ring_bytes;	   /* data bytes of each per-CPU ring */
	uint32_t rings;		   /* number of rings (CPUs) */
	uint32_t stack_bytes;	   /* user stack bytes copied per sample */
	uint32_t processes;	   /* processes seen (attached, and their children) */
	uint32_t threads;	   /* threads seen */
	char event[16];		   /* the event sampled: "cycles", "cpu-clock", "tracepoint", or
				    * "dummy" (off-CPU only: no on-CPU samples) */
	int cycles_error;	   /* -errno of the refused cycles attempt when it fell back */
	/* Unwinding: frames found through DWARF CFI and through the frame-pointer fallback, and
	 * why CFI failed for a frame, by reason (names from sonde_recorder__unwind_fallback_name).
	 */
	uint64_t unwind_cfi_frames;
	uint64_t unwind_fp_frames;
	uint64_t unwind_fallbacks[SONDE_UNWIND_FALLBACKS];
	/* Kernel frames: whether they are recorded (asked for and allowed), the -errno of
	 * the refused attempt when they were asked for but denied (else 0), and how many
	 * kernel frames were written with samples. */
	uint32_t kernel_enabled;
	int kernel_error;
	uint64_t kernel_frames;
	/* Images copied to the build-id cache (deleted or replaced while recorded). */
	uint32_t images_saved;
	/* Loss and recovery. A lifecycle gap is one report of loss (a LOST or LOST_SAMPLES
	 * record, or a rise of the events' own lost counters): side-band records (mmap, exec,
	 * fork, exit) may have been dropped with the samples, so the process, thread and module
	 * tables are uncertain until a recovery sweep reconciles them with /proc. */
	uint64_t lifecycle_gaps;
	uint64_t gaps_recovered;      /* gaps closed by a completed recovery sweep */
	uint64_t recovery_sweeps;     /* sweeps run (at most one per 250 ms, or forced by flush) */
	uint64_t recovered_modules;   /* mappings a sweep found missing and added */
	uint64_t stale_modules;	      /* mappings a sweep found gone and dropped */
	uint64_t recovered_processes; /* descendants a sweep found that no fork record named */
	uint64_t recovered_exits;     /* processes a sweep found dead with no exit record */
	uint64_t recovered_execs;     /* processes a sweep found running another executable */
	uint64_t threads_refreshed;   /* threads given their own events by a refresh */
	uint64_t samples_missing_ids; /* samples without a pid, tid or timestamp (dropped) */
	uint64_t idle_samples;	      /* samples of the idle task, pid 0 (dropped) */
	uint64_t unfollowed_samples;  /* samples of processes not recorded (dropped) */
	/* Errors kept as context: when a call fails for several reasons (enable and resume,
	 * or the steps of finish), the first is returned and the later ones are logged,
	 * counted here, and the first of them kept. */
	uint32_t context_errors;
	int context_error;
	/* Mapped files not read for their build id because their path led to no regular file
	 * of a sane size (a FIFO, a symbolic link put in its place, ...: docs/symbolize.md). */
	uint64_t files_refused;
	/* System-wide recordings: 1, and the processes found running in /proc at the start
	 * (their modules and names read from there), and the samples of the recorder's own
	 * process (dropped, not counted as unfollowed). */
	uint32_t system_wide;
	uint32_t processes_synthesized;
	uint64_t own_samples;
	/* Bytes of ring memory mapped in all and the bound it is kept under (docs/record.md,
	 * "Ring sizing"). */
	uint64_t ring_bytes_total;
	uint64_t ring_bytes_cap;
	uint32_t ring_grows; /* rings replaced by one twice as large after a loss */
	/* The tracepoint sampled, "GROUP:NAME", when event is "tracepoint"; else empty. */
	char tracepoint[128];
	/* Processes opts.process_check refused (system-wide recordings). */
	uint32_t processes_refused;
	/* Off-CPU recordings: switch-outs sampled (of recorded threads), intervals written
	 * with their stacks, intervals shorter than off_cpu_min_ns counted instead (and their
	 * total), intervals dropped because a loss may have taken their end (or the thread
	 * exited while off the CPU), wakeups matched to an interval. */
	uint32_t off_cpu;
	uint64_t offcpu_switches;
	uint64_t offcpu_intervals;
	uint64_t offcpu_short;
	uint64_t offcpu_short_ns;
	uint64_t offcpu_dropped;
	uint64_t offcpu_wakeups;
	/* Per-thread stack copies (docs/record.md, "Stack copy sizing"): the events reopened
	 * with new sizes or rings (generation switches), threads whose copy was doubled after
	 * an unwind was cut by its end, the smallest and largest copy of the threads given
	 * events at the last switch (stack_bytes at the start), and the records dropped as
	 * copies of another event's (while a switch overlapped two generations). */
	uint32_t stack_switches;
	uint32_t stack_grows;
	uint32_t stack_bytes_min;
	uint32_t stack_bytes_max;
	uint64_t duplicates_dropped;
	/* Off-CPU intervals whose switch-in the kernel never recorded (a switch from the idle
	 * task, on some kernels), ended at their wakeup or at the thread's next sample
	 * (src/record/offcpu.c). */
	uint64_t offcpu_unseen_switch_ins;
	/* Whether the samples count the threads' time in the kernel (opts.user_only not set
	 * and the kernel allowing it), the -errno of the refusal when it did not (else 0), and
	 * the samples taken in the kernel (written with a [kernel] frame or kernel frames). */
	uint32_t kernel_time;
	int kernel_time_error;
	uint64_t kernel_samples;
	/* Off-CPU recordings: last switch-outs of exiting tasks (from do_task_dead), which
	 * end the task rather than open an interval. */
	uint64_t offcpu_exits;
	/* Off-CPU intervals open at a loss, which may have taken their switch-in: written as
	 * unknown from the switch-out to the thread's next sighting (UNKNOWN records), and
	 * their total time. */
	uint64_t offcpu_unknown;
	uint64_t offcpu_unknown_ns;
	/* Off-CPU recordings: the backend that ran, "bpf" or "perf", and why the other was
	 * not used (empty when it was asked for). */
	char offcpu_backend[8];
	char offcpu_backend_why[160];
	/* -a: switch-outs the kernel did not deliver (the idle task's on some CPUs of some
	 * kernels), inferred where the next task came in (SONDE_SWITCH_INFERRED) */
	uint64_t offcpu_switches_inferred;
	/* The BPF off-CPU backend's ring buffers: the size of the waits ring and of the
	 * switches ring, and the most bytes each held (what a CPU found queued in it when it
	 * wrote a record, with that record): how much of their size the recording used. */
	uint64_t offcpu_ring_waits_bytes, offcpu_ring_waits_high;
	uint64_t offcpu_ring_switches_bytes, offcpu_ring_switches_high;
};

/* Name of unwind fallback reason i (< SONDE_UNWIND_FALLBACKS): "no-module" (the pc is in
 * no mapping), "no-cfi" (its file has no unwind data), "no-row" (its CFI does not cover
 * the pc), "unsupported-rule", "cfa-unrecoverable", "ra-unrecoverable", "no-advance",
 * "sp-backwards". Never NULL. */
SONDE_API const char *sonde_recorder__unwind_fallback_name(unsigned i);

/* What one poll did. */
struct sonde_record_poll {
	size_t sz;	      /* set by the caller: sizeof(struct sonde_record_poll) */
	uint64_t samples;     /* samples processed by this poll */
	uint64_t lost_events; /* records reported lost during this poll */
};

/* Attaches to pid and writes the spool to the file at path (created or truncated).
 * opts may be NULL (999 Hz, defaults for the rest). Returns a recorder owned by the caller
 * (free it with sonde_recorder__free), or NULL and errno: ESRCH no such process, EACCES or
 * EPERM perf_event or the process is not accessible (the cause is logged), EIO for a kernel
 * thread (no user space to sample; logged), ERANGE an option out of range, or the error of
 * creating the file. On failure no file created by the call is left at path. */
SONDE_API struct sonde_recorder *sonde_recorder__attach(pid_t pid, const char *path,
							enum sonde_attach_mode mode,
							const struct sonde_record_opts *opts);
/* Same, but the spool bytes go to write(ctx, ...), which the caller owns and must keep valid
 * until sonde_recorder__finish or _free returns. */
SONDE_API struct sonde_recorder *
sonde_recorder__attach_writer(pid_t pid, sonde_spool_write_fn write, void *ctx,
			      enum sonde_attach_mode mode, const struct sonde_record_opts *opts);

/* Records every process on the CPUs of opts->cpus (default: all online CPUs), like
 * `perf record -a`: one event per CPU instead of per thread, the side band (mmap, comm,
 * fork, exit) of every task from those events, and the processes already running read from
 * /proc (their executable mappings and thread names, as perf's synthesis step does). The
 * recorder's own process is not recorded. Needs CAP_PERFMON (or root) or
 * kernel.perf_event_paranoid <= 0. Sampling starts before this returns. NULL and errno
 * (EACCES/EPERM, the cause logged; EINVAL a CPU that is not online). */
SONDE_API struct sonde_recorder *
sonde_recorder__attach_system(const char *path, const struct sonde_record_opts *opts);
/* Same, with the spool bytes sent to write(ctx, ...) (as sonde_recorder__attach_writer). */
SONDE_API struct sonde_recorder *
sonde_recorder__attach_system_writer(sonde_spool_write_fn write, void *ctx,
				     const struct sonde_record_opts *opts);

/* Parses a CPU list in perf's syntax ("0,2-3", "1", "0-7"; a trailing newline is fine) into
 * *cpus (malloc'd, caller frees), in the order given, duplicates removed. 0, -EINVAL for a
 * malformed list, -ENOMEM. */
SONDE_API int sonde_cpu_list__parse(const char *list, int **cpus, size_t *n);

enum sonde_attach_outcome {
	SONDE_ATTACH_ATTACHED = 0, /* newly attached */
	SONDE_ATTACH_ALREADY = 1,  /* this process (same start time) is already recorded */
	SONDE_ATTACH_EXITED = 2,   /* no such process (it exited, or never existed) */
};

/* Adds another process to the recording, attached as in sonde_recorder__attach (sampling
 * starts right away, or at exec for SONDE_ATTACH_ON_EXEC). A pid the recording already
 * holds under another start time was reused: the old process is retired first, so the two
 * never share modules or threads. Returns an enum sonde_attach_outcome (EXITED also for a
 * process that exits, or is a zombie, while it is being attached), or -errno (the cause
 * logged) when it cannot be attached (-SONDE_E_UNSUPPORTED: a kernel thread);
 * -SONDE_E_STATE after finish. */
SONDE_API int sonde_recorder__attach_process(struct sonde_recorder *r, pid_t pid,
					     enum sonde_attach_mode mode);

/* Adds thread tid alone to the recording, as `perf record -t`: events on that thread only
 * (and, with follow_children, on the threads and processes it creates afterwards; without,
 * on nothing it creates), its process's executable mappings read so that its samples
 * symbolize. SONDE_ATTACH_STOP stops that thread alone while its events are opened
 * (PTRACE_SEIZE + PTRACE_INTERRUPT of the thread; its process's other threads run on);
 * SONDE_ATTACH_ON_EXEC is -EINVAL. A process attached whole already records it
 * (ALREADY). The process counts as active while one of its recorded threads runs.
 * Limit (perf's too): mappings created later by threads without events are not reported
 * to the recording (a recovery sweep after a loss reads them from /proc). Returns an enum
 * sonde_attach_outcome (EXITED: no such thread), or -errno, the cause logged
 * (-SONDE_E_UNSUPPORTED: a kernel thread); -EINVAL for a system-wide recording (filter_tids
 * there), -SONDE_E_STATE after finish. */
SONDE_API int sonde_recorder__attach_thread(struct sonde_recorder *r, pid_t tid,
					    enum sonde_attach_mode mode);

/* Stops recording attached process pid: closes the events of its threads and ignores
 * every later record of it (samples still queued that are older are kept). Attaching it
 * again later starts afresh. 0, -EINVAL when pid is not attached, -SONDE_E_STATE after
 * finish. */
SONDE_API int sonde_recorder__detach_process(struct sonde_recorder *r, pid_t pid);

enum sonde_refresh_outcome {
	SONDE_REFRESH_REFRESHED = 0, /* every live thread of the process has events */
	SONDE_REFRESH_EXITED = 1,    /* the process is gone (its modules are retired) */
};

/* Rescans /proc/PID/task of an attached process and opens events for the threads that have
 * none: threads neither opened when attaching nor announced by a fork record, and that
 * started before the process was attached (threads started later inherited the events;
 * giving them events of their own would sample them twice). Needed only after attaching in
 * SONDE_ATTACH_RUNNING mode, or after a loss (recovery sweeps call it themselves).
 * Returns an enum sonde_refresh_outcome, -EINVAL when pid is not attached (a followed
 * child, or unknown), -SONDE_E_STATE after finish, or -errno when the threads cannot be
 * listed or opened. */
SONDE_API int sonde_recorder__refresh_threads(struct sonde_recorder *r, pid_t pid);

/* An epoll fd that becomes readable when a ring has data to drain; owned by the recorder. */
SONDE_API int sonde_recorder__epoll_fd(const struct sonde_recorder *r);
/* Waits at most timeout_ms (0: do not wait, -1: forever; at most 20 ms while stack copy
 * sizes are being judged, docs/record.md "Stack copy sizing") for data, then drains every ring
 * and writes what is ready. When a loss was reported since the last recovery sweep and the
 * last sweep is at least 250 ms old, runs one (see sonde_recorder__flush). out (may be NULL;
 * sz set, else -EINVAL) receives this poll's counts. Returns the number of samples processed, or
 * the first error (decoding, unwinding, writing). */
SONDE_API int sonde_recorder__poll(struct sonde_recorder *r, int timeout_ms,
				   struct sonde_record_poll *out);
/* Drains every ring, processes what can be ordered, forces loss bookkeeping (reads the
 * events' own lost counters, so losses the kernel has not reported yet count as gaps) and,
 * when any gap is open, a recovery sweep without waiting for the rate limit: every tracked
 * process is checked for death (/proc start time), a missed exec (/proc/PID/exe) and its
 * executable mappings (/proc/PID/maps against the module table: missing ones added, gone
 * ones dropped); with follow_children, /proc/PID/task/TID/children finds descendants no
 * fork record named; attached processes get their threads refreshed. Then pushes the
 * spool's buffered bytes to the writer (the file or write function then holds every sample
 * processed so far). Sampling and lifecycle tracking go on. 0 or the first error. */
SONDE_API int sonde_recorder__flush(struct sonde_recorder *r);
/* true when records are queued in user space (waiting to be ordered) or a ring holds data
 * not yet drained. */
SONDE_API bool sonde_recorder__has_pending_events(const struct sonde_recorder *r);
/* Enables sampling of every attached process (events armed for exec stay armed), and
 * resumes any process still stopped for attaching. 0, or the first enable error; when both
 * enabling and resuming fail, the enable error is returned and the resume error is logged
 * and kept as context (summary context_error). A resume error alone is returned. */
SONDE_API int sonde_recorder__enable(struct sonde_recorder *r);
/* Stops sampling of every attached process; records already in the rings are still
 * drained by the next poll. 0 or the first error. */
SONDE_API int sonde_recorder__disable(struct sonde_recorder *r);
/* A snapshot of the counters; out->sz must be set. 0 or -EINVAL. */
SONDE_API int sonde_recorder__summary(const struct sonde_recorder *r,
				      struct sonde_record_summary *out);
/* Liveness. A process is (pid, start time): a pid that now names another process counts
 * as exited. Children seen only through a fork record are identified by the fork's time
 * against their /proc start time. Inspection failures are errors, never read as alive or
 * dead. */
/* 1 when pid is recorded and alive, 0 when it exited (or is a zombie), -EINVAL when it was
 * never recorded, -errno when its state cannot be read. */
SONDE_API int sonde_recorder__process_is_active(struct sonde_recorder *r, pid_t pid);
/* 1 when a recorded process other than pid is alive, 0 when none is, -errno when one
 * cannot be inspected. pid need not be recorded. */
SONDE_API int sonde_recorder__has_active_processes_except(struct sonde_recorder *r, pid_t pid);
/* Number of recorded processes (attached, and followed children) still alive, or -errno
 * when one cannot be inspected. */
SONDE_API int sonde_recorder__active_process_count(struct sonde_recorder *r);
/* Disables sampling, resumes processes still stopped for attaching, drains every ring,
 * processes everything queued, counts losses never reported, writes the end of the spool
 * and flushes it (and closes the file of sonde_recorder__attach). Flushing is attempted
 * whatever failed before; the first error of the recording or of these steps is returned,
 * later ones are logged and kept as context (summary context_errors). out (may be NULL,
 * else sz set) receives the final counters. The recorder must still be freed; only
 * sonde_recorder__summary and _free may follow. Calling it twice returns -SONDE_E_STATE. */
SONDE_API int sonde_recorder__finish(struct sonde_recorder *r, struct sonde_record_summary *out);
/* Frees the recorder and everything it owns (events, rings, the file it created; NULL is
 * fine). Without finish this is best effort only: sampling is disabled, stopped processes
 * are resumed, but samples still queued in the rings or in user space are lost, nothing is
 * flushed (write errors cannot be reported), and the spool is left without its end record
 * (readers report it as truncated). */
SONDE_API void sonde_recorder__free(struct sonde_recorder *r);

/* The kernel's maximum sampling frequency. 0 or -errno. */
SONDE_API int sonde_recorder__max_frequency(uint64_t *out);

/* Launching a command suspended before execve, for SONDE_ATTACH_ON_EXEC. */
struct sonde_launch;

/* Forks a child that waits before execve(argv[0] looked up in PATH, argv, envp or the
 * caller's environment when NULL). NULL and errno (ENOENT, EACCES: not found or not
 * executable; nothing was started). Free with sonde_launch__free. */
SONDE_API struct sonde_launch *sonde_launch__new(char *const argv[], char *const envp[]);
SONDE_API pid_t sonde_launch__pid(const struct sonde_launch *l);
/* Lets the child exec. 0, or -errno of its failed execve (it then exited with status 127). */
SONDE_API int sonde_launch__resume(struct sonde_launch *l);
/* waitpid for the child (flags 0 or WNOHANG): 1 and *status (a wait status) once it exited,
 * 0 while it runs, -errno. */
SONDE_API int sonde_launch__wait(struct sonde_launch *l, int flags, int *status);
/* Frees the handle; a child never resumed is killed and reaped, a running one is left. */
SONDE_API void sonde_launch__free(struct sonde_launch *l);

#endif
