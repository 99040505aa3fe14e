/* The recorder: samples the user stacks of Linux processes with perf_event and writes them
 * to a spool (include/sonde/spool.h).
 *
 * Call order:
 *   sonde_recorder_attach (or _attach_writer)   opens events, writes the spool header and
 *                                                the target's executable mappings, starts
 *                                                sampling
 *   loop: wait on sonde_recorder_epoll_fd, or let sonde_recorder_poll wait; each poll drains
 *         every ring, merges the rings' records in time order, unwinds and writes samples.
 *         Nothing happens in the background: a recorder that is not polled loses samples
 *         once its rings fill (counted as lost).
 *   sonde_recorder_finish                        disables sampling, drains, flushes
 *   sonde_recorder_free
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
	/* A running process: SIGSTOP it, wait until every thread is stopped, open events and
	 * read its mappings, then enable and SIGCONT (only if this call stopped it). */
	SONDE_ATTACH_STOP = 0,
	/* A process launched suspended before execve (sonde_launch_new): events are enabled by
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
struct sonde_record_opts {
	size_t sz;
	/* Samples per second per thread: 1 .. the kernel maximum, or SONDE_RECORD_FREQ_MAX.
	 * 0 is invalid (an error naming the allowed range). */
	uint64_t frequency;
	/* User stack bytes copied per sample: 0 for the default 32768; at most 65528; rounded up
	 * to a multiple of 8. Larger copies unwind deeper stacks and cost more per sample. */
	uint32_t stack_bytes;
	/* Data pages of each per-CPU ring, a power of two; 0 for the default (512). A ring the
	 * kernel refuses to map (locked-memory limit) is halved down to what one sample needs. */
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
};

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
	uint64_t frequency;	   /* samples per second asked of the kernel */
	uint64_t ring_bytes;	   /* data bytes of each per-CPU ring */
	uint32_t rings;		   /* number of rings (CPUs) */
	uint32_t stack_bytes;	   /* user stack bytes copied per sample */
	uint32_t processes;	   /* processes seen (attached, and their children) */
	uint32_t threads;	   /* threads seen */
	char event[16];		   /* the event sampled: "cycles" or "cpu-clock" */
	int cycles_error;	   /* -errno of the refused cycles attempt when it fell back */
	/* Unwinding: frames found through DWARF CFI and through the frame-pointer fallback, and
	 * why CFI failed for a frame, by reason (names from sonde_unwind_fallback_name). */
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
};

/* Name of unwind fallback reason i (< SONDE_UNWIND_FALLBACKS): "no-module" (the pc is in
 * no mapping), "no-cfi" (its file has no unwind data), "no-row" (its CFI does not cover
 * the pc), "unsupported-rule", "cfa-unrecoverable", "ra-unrecoverable", "no-advance",
 * "sp-backwards". Never NULL. */
SONDE_API const char *sonde_unwind_fallback_name(unsigned i);

/* What one poll did. */
struct sonde_record_poll {
	size_t sz;	      /* set by the caller: sizeof(struct sonde_record_poll) */
	uint64_t samples;     /* samples processed by this poll */
	uint64_t lost_events; /* records reported lost during this poll */
};

/* Attaches to pid and writes the spool to the file at path (created or truncated).
 * opts may be NULL (999 Hz, defaults for the rest). Returns a recorder owned by the caller
 * (free it with sonde_recorder_free), or NULL and errno: ESRCH no such process, EACCES or
 * EPERM perf_event or the process is not accessible (the cause is logged), ERANGE an option
 * out of range, or the error of creating the file. On failure no file is left at path. */
SONDE_API struct sonde_recorder *sonde_recorder_attach(pid_t pid, const char *path,
						       enum sonde_attach_mode mode,
						       const struct sonde_record_opts *opts);
/* Same, but the spool bytes go to write(ctx, ...), which the caller owns and must keep valid
 * until sonde_recorder_finish or _free returns. */
SONDE_API struct sonde_recorder *sonde_recorder_attach_writer(pid_t pid, sonde_spool_write_fn write,
							      void *ctx,
							      enum sonde_attach_mode mode,
							      const struct sonde_record_opts *opts);

enum sonde_attach_outcome {
	SONDE_ATTACH_ATTACHED = 0, /* newly attached */
	SONDE_ATTACH_ALREADY = 1,  /* this process (same start time) is already recorded */
	SONDE_ATTACH_EXITED = 2,   /* no such process (it exited, or never existed) */
};

/* Adds another process to the recording, attached as in sonde_recorder_attach (sampling
 * starts right away, or at exec for SONDE_ATTACH_ON_EXEC). Returns an enum
 * sonde_attach_outcome, or -errno (the cause logged) when it cannot be attached. */
SONDE_API int sonde_recorder_attach_process(struct sonde_recorder *r, pid_t pid,
					    enum sonde_attach_mode mode);

/* An epoll fd that becomes readable when a ring has data to drain; owned by the recorder. */
SONDE_API int sonde_recorder_epoll_fd(const struct sonde_recorder *r);
/* Waits at most timeout_ms (0: do not wait, -1: forever) for data, then drains every ring
 * and writes what is ready. out (may be NULL) receives this poll's counts. Returns the
 * number of samples processed, or the first error (decoding, unwinding, writing). */
SONDE_API int sonde_recorder_poll(struct sonde_recorder *r, int timeout_ms,
				  struct sonde_record_poll *out);
/* Drains every ring, processes what can be ordered, and pushes the spool's buffered bytes
 * to the writer (the file or write function then holds every sample processed so far).
 * Sampling goes on. 0 or the first error. */
SONDE_API int sonde_recorder_flush(struct sonde_recorder *r);
/* true when records are queued in user space (waiting to be ordered) or a ring holds data
 * not yet drained. */
SONDE_API bool sonde_recorder_has_pending_events(const struct sonde_recorder *r);
/* Enables sampling of every attached process, and resumes any process still stopped for
 * attaching. On failure the enable error is returned (a resume error is logged). */
SONDE_API int sonde_recorder_enable(struct sonde_recorder *r);
SONDE_API int sonde_recorder_disable(struct sonde_recorder *r);
/* A snapshot of the counters; out->sz must be set. 0 or -EINVAL. */
SONDE_API int sonde_recorder_summary(const struct sonde_recorder *r,
				     struct sonde_record_summary *out);
/* 1 when pid is attached and alive, 0 when it exited, -EINVAL when it was never attached,
 * -errno when its state cannot be read (never guessed). */
SONDE_API int sonde_recorder_process_is_active(struct sonde_recorder *r, pid_t pid);
/* Number of attached processes (and followed children) still alive, or -errno. */
SONDE_API int sonde_recorder_active_process_count(struct sonde_recorder *r);
/* Disables sampling, drains every ring, writes the end of the spool and flushes it. Flushing
 * is attempted even after an earlier error; the first error is returned (later ones are
 * logged). out (may be NULL, else sz set) receives the final counters. The recorder must
 * still be freed. Calling it twice returns -SONDE_E_STATE. */
SONDE_API int sonde_recorder_finish(struct sonde_recorder *r, struct sonde_record_summary *out);
/* Frees the recorder (NULL is fine). Without finish, sampling is disabled on a best-effort
 * basis and queued samples are lost (the spool is left without its end record). */
SONDE_API void sonde_recorder_free(struct sonde_recorder *r);

/* The kernel's maximum sampling frequency. 0 or -errno. */
SONDE_API int sonde_record_max_frequency(uint64_t *out);

/* Launching a command suspended before execve, for SONDE_ATTACH_ON_EXEC. */
struct sonde_launch;

/* Forks a child that waits before execve(argv[0] looked up in PATH, argv, envp or the
 * caller's environment when NULL). NULL and errno (ENOENT, EACCES: not found or not
 * executable; nothing was started). Free with sonde_launch_free. */
SONDE_API struct sonde_launch *sonde_launch_new(char *const argv[], char *const envp[]);
SONDE_API pid_t sonde_launch_pid(const struct sonde_launch *l);
/* Lets the child exec. 0, or -errno of its failed execve (it then exited with status 127). */
SONDE_API int sonde_launch_resume(struct sonde_launch *l);
/* waitpid for the child (flags 0 or WNOHANG): 1 and *status (a wait status) once it exited,
 * 0 while it runs, -errno. */
SONDE_API int sonde_launch_wait(struct sonde_launch *l, int flags, int *status);
/* Frees the handle; a child never resumed is killed and reaped, a running one is left. */
SONDE_API void sonde_launch_free(struct sonde_launch *l);

#endif
