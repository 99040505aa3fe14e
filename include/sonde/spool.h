/* The spool: sonde's compact recording format (docs/spool.md has it byte by byte).
 *
 * Writer call order: sonde_spool_writer__new, then any interleaving of add_module,
 * add_thread, retire_process and add_sample with non-decreasing timestamps, then
 * sonde_spool_writer__finish, then sonde_spool_writer__free. Everything a sample refers to
 * (thread, modules) must have been added before it. The writer interns frames and stacks
 * (a prefix tree) itself, so a caller passes whole stacks every time.
 */
#ifndef SONDE_SPOOL_H
#define SONDE_SPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sonde/export.h>

struct sonde_spool_writer;

/* Writes all len bytes or fails; returns 0 or -errno. */
typedef int (*sonde_spool_write_fn)(void *ctx, const void *buf, size_t len);

struct sonde_spool_header {
	uint64_t start_time_ns;	     /* wall clock (CLOCK_REALTIME) when recording started */
	uint64_t start_monotonic_ns; /* the same instant on the sample clock (CLOCK_MONOTONIC) */
	uint64_t sample_period_ns;   /* nominal interval between samples (1e9 / frequency) */
};

enum sonde_spool_module_flags {
	SONDE_MODULE_EXEC = 1u << 0,   /* mapped executable */
	SONDE_MODULE_VDSO = 1u << 1,   /* [vdso], image read from memory */
	SONDE_MODULE_KERNEL = 1u << 2, /* the kernel or a kernel module (pid 0) */
	SONDE_MODULE_JIT = 1u << 3,    /* anonymous executable memory (perf map names apply) */
	SONDE_MODULE_DELETED = 1u << 4,
};

/* One executable mapping of one process. The writer copies everything it needs. */
struct sonde_spool_module_def {
	uint32_t pid;
	uint32_t flags;		 /* enum sonde_spool_module_flags */
	uint64_t start, end;	 /* mapped address range [start, end) */
	uint64_t pgoff;		 /* file offset of start */
	uint64_t dev, inode;	 /* identity of the mapped file (0 when none) */
	const uint8_t *build_id; /* may be NULL */
	size_t build_id_len;	 /* at most 32 */
	const char *path; /* as in /proc/PID/maps, e.g. "/usr/lib/x86_64-linux-gnu/libc.so.6" */
};

/* One frame: module != 0 means addr is a file offset inside that module (the sampled
 * address minus module start plus pgoff); module == 0 means addr is a raw address no
 * module covers. Frames other than the innermost hold their return address minus one,
 * so that they resolve to the call instruction. */
struct sonde_spool_frame {
	uint32_t module;
	uint64_t addr;
};

enum sonde_spool_sample_flags {
	SONDE_SAMPLE_TRUNCATED = 1u << 0, /* the stack continues beyond what was recorded */
	SONDE_SAMPLE_KERNEL = 1u << 1,	  /* the first frames are kernel frames */
};

/* The CPU of a sample that was not recorded. */
#define SONDE_SPOOL_CPU_NONE UINT32_MAX

/* How a thread left the CPU (sched_switch's prev_state). */
enum sonde_offcpu_state {
	SONDE_OFFCPU_RUNNABLE = 0, /* R: preempted or yielded, still runnable: waiting for a CPU */
	SONDE_OFFCPU_SLEEPING = 1, /* S: interruptible sleep (sleeps, pipes, sockets, futexes) */
	SONDE_OFFCPU_BLOCKED = 2,  /* D: uninterruptible (disk I/O, some locks) */
	SONDE_OFFCPU_OTHER = 3,	   /* stopped, traced, parked, or any other state */
	SONDE_OFFCPU_STATES = 4,
};

/* Off-CPU interval flags, besides SONDE_SAMPLE_TRUNCATED and SONDE_SAMPLE_KERNEL (which
 * describe its stack as for a sample). */
enum sonde_spool_offcpu_flags {
	SONDE_OFFCPU_OPEN = 1u << 2, /* still off the CPU when the recording ended: switch_in_ns
				      * is the end of the recording */
};

/* One interval a thread spent off the CPU: from its switch-out (when it blocked, was
 * preempted or yielded) to its next switch-in, with the stack it left the CPU with. */
struct sonde_spool_offcpu {
	uint64_t switch_out_ns; /* sample clock */
	uint64_t switch_in_ns;	/* >= switch_out_ns */
	uint64_t wakeup_ns;	/* when it was woken (sched_waking), 0 when not seen */
	uint32_t thread;	/* spool thread id */
	uint32_t cpu;		/* the CPU it left, SONDE_SPOOL_CPU_NONE when not known */
	uint32_t state;		/* enum sonde_offcpu_state */
	uint32_t waker_tid;	/* the thread that woke it, 0 when not known */
	uint32_t flags; /* SONDE_SAMPLE_TRUNCATED | SONDE_SAMPLE_KERNEL | SONDE_OFFCPU_OPEN */
	uint32_t stack; /* readers: its innermost stack node (0: empty); writers ignore it */
};

/* One thread's off-CPU intervals shorter than min_ns: counted, not stacked. */
struct sonde_spool_offcpu_short {
	uint32_t thread;
	uint64_t min_ns; /* the recording's threshold (--off-cpu-min) */
	uint64_t count;
	uint64_t total_ns;
};

/* What a recording could not see, written once before its end: readers say it. */
struct sonde_spool_account {
	/* 1: samples count the threads' time in the kernel too; 0: user space only */
	uint32_t kernel_time;
	/* kernel_time 0: why, an errno (EACCES, EPERM: the kernel refused kernel sampling);
	 * 0 when it was not asked for (user space only by choice) */
	uint32_t kernel_error;
	uint64_t lost_records;	 /* records the kernel dropped from full rings */
	uint64_t lost_samples;	 /* samples the kernel counted as not taken */
	uint64_t offcpu_dropped; /* off-CPU intervals dropped (a loss took their end) */
};

/* One context switch on a CPU, as sched:sched_switch delivered it (SWITCHES records). */
enum {
	/* state of a task's last switch-out, after its exit (besides enum sonde_offcpu_state) */
	SONDE_SWITCH_EXITED = SONDE_OFFCPU_STATES,
	/* or'ed into prev_state: the kernel delivered no such switch (some kernels leave the
	 * idle task's switch-out unrecorded on some CPUs, or every switch-out of some tasks);
	 * the recorder inferred it when another task left the CPU than the one that came in,
	 * at the time that task's interval ended (else its first sign on the CPU). Its state
	 * is R for the idle task, SONDE_OFFCPU_OTHER (not known) for another. */
	SONDE_SWITCH_INFERRED = 1u << 3,
	/* the most switches one SWITCHES record holds */
	SONDE_SPOOL_SWITCHES_MAX = 1024,
};
enum sonde_spool_switches_flags {
	SONDE_SWITCHES_GAP = 1u << 0, /* records were lost before the first switch */
};
struct sonde_spool_switch {
	uint64_t time_ns;	   /* sample clock */
	uint32_t prev_tid;	   /* the task leaving the CPU (0: the idle task) */
	uint32_t next_tid;	   /* the task taking it (0: the idle task) */
	uint32_t prev_state; /* enum sonde_offcpu_state or SONDE_SWITCH_EXITED, maybe with
			      * SONDE_SWITCH_INFERRED */
};

/* Creates a writer and writes the file header. NULL and errno on failure. */
SONDE_API struct sonde_spool_writer *sonde_spool_writer__new(sonde_spool_write_fn write, void *ctx,
							     const struct sonde_spool_header *h);
/* A ready-made write function for a file descriptor: pass (void *)(intptr_t)fd as ctx. */
SONDE_API int sonde_spool_writer__write_fd(void *ctx, const void *buf, size_t len);

/* Defines a module; *id receives its id (ids start at 1). */
SONDE_API int sonde_spool_writer__add_module(struct sonde_spool_writer *w, uint64_t time_ns,
					     const struct sonde_spool_module_def *m, uint32_t *id);
/* Defines a thread (a new id whenever a tid is reused or renamed); *id receives it. */
SONDE_API int sonde_spool_writer__add_thread(struct sonde_spool_writer *w, uint64_t time_ns,
					     uint32_t pid, uint32_t tid, const char *comm,
					     uint32_t *id);
/* The process exec'd or exited: its modules are retired and may not be referenced again. */
SONDE_API int sonde_spool_writer__retire_process(struct sonde_spool_writer *w, uint64_t time_ns,
						 uint32_t pid);
/* One sample; frames[0] is the innermost frame. */
SONDE_API int sonde_spool_writer__add_sample(struct sonde_spool_writer *w, uint64_t time_ns,
					     uint32_t thread,
					     const struct sonde_spool_frame *frames,
					     size_t n_frames, uint32_t flags);
/* The same, for a sample taken on CPU cpu (SONDE_SPOOL_CPU_NONE: not known). */
SONDE_API int sonde_spool_writer__add_sample_cpu(struct sonde_spool_writer *w, uint64_t time_ns,
						 uint32_t thread, uint32_t cpu,
						 const struct sonde_spool_frame *frames,
						 size_t n_frames, uint32_t flags);
/* Declares that the recording holds off-CPU records: the header says version 2.1 (the
 * oldest that has them). Call before anything was flushed (-SONDE_E_STATE otherwise). */
SONDE_API int sonde_spool_writer__declare_offcpu(struct sonde_spool_writer *w);
/* One off-CPU interval with its stack (frames[0] innermost; iv->stack is ignored). Intervals
 * are written when they end: their times need not follow the samples' order. Needs
 * sonde_spool_writer__declare_offcpu first (-SONDE_E_STATE). */
SONDE_API int sonde_spool_writer__add_offcpu(struct sonde_spool_writer *w,
					     const struct sonde_spool_offcpu *iv,
					     const struct sonde_spool_frame *frames,
					     size_t n_frames);
/* An off-CPU interval whose end a loss took (or the kernel did not trace): the thread left
 * the CPU at switch_out_ns (in state, with the stack given) and was next seen at
 * switch_in_ns; what it did meanwhile is unknown (its switch-in, and maybe samples, were
 * lost or never traced). As add_offcpu otherwise. */
SONDE_API int sonde_spool_writer__add_unknown(struct sonde_spool_writer *w,
					      const struct sonde_spool_offcpu *iv,
					      const struct sonde_spool_frame *frames,
					      size_t n_frames);
/* The recording's account (struct sonde_spool_account), at most once, before finish. */
SONDE_API int sonde_spool_writer__add_account(struct sonde_spool_writer *w,
					      const struct sonde_spool_account *a);
/* A thread's intervals shorter than the threshold, in aggregate (may be written more than
 * once for a thread: readers add them up). */
SONDE_API int sonde_spool_writer__add_offcpu_short(struct sonde_spool_writer *w,
						   const struct sonde_spool_offcpu_short *s);
/* A run of one CPU's context switches (at most SONDE_SPOOL_SWITCHES_MAX, times not
 * decreasing, not older than the CPU's previous run, cpu below 2^20; n may be 0), flags
 * enum sonde_spool_switches_flags. A recording that keeps
 * every CPU's switches (-a --off-cpu) writes an empty run per CPU before any off-CPU
 * interval, so that a reader knows it from the start. Needs declare_offcpu first. */
SONDE_API int sonde_spool_writer__add_switches(struct sonde_spool_writer *w, uint32_t cpu,
					       uint32_t flags,
					       const struct sonde_spool_switch *sw, size_t n);
/* What an off-CPU recording tracked (COVERAGE record), flags of
 * enum sonde_spool_offcpu_coverage. */
enum sonde_spool_offcpu_coverage {
	/* every switch-out of each recorded thread over its life in the recording was
	 * tracked: its waits are all in the file (intervals, short totals, unknown spans), so
	 * the time of its life that none covers it spent on the CPU, sampled or not */
	SONDE_SPOOL_OFFCPU_EVERY_SWITCH_OUT = 1u << 0,
};
/* The off-CPU recording's coverage (flags of enum sonde_spool_offcpu_coverage), at most
 * once, before finish. Needs declare_offcpu first. */
SONDE_API int sonde_spool_writer__add_offcpu_coverage(struct sonde_spool_writer *w,
						      uint32_t flags);
/* Thread thread (a defined id) exited at time_ns (below UINT64_MAX): its life ends there
 * (optional; written at most once per thread, as the recorder sees the exit). */
SONDE_API int sonde_spool_writer__add_exit(struct sonde_spool_writer *w, uint64_t time_ns,
					   uint32_t thread);
/* Pushes buffered bytes to the write function. */
SONDE_API int sonde_spool_writer__flush(struct sonde_spool_writer *w);
/* Writes the end record and flushes. */
SONDE_API int sonde_spool_writer__finish(struct sonde_spool_writer *w);
/* Frees the writer (NULL is fine); unflushed bytes are lost. */
SONDE_API void sonde_spool_writer__free(struct sonde_spool_writer *w);

#endif
