/* The recorder's internal state, shared by its source files. Internal.
 *
 * recorder.c: public API, the drain/sort/process pipeline. attach.c: opening events, rings,
 * stopping and reading processes, diagnosing permission errors. track.c: processes,
 * threads and modules as side-band records change them.
 */
#ifndef SONDE_RECORD_RECORDER_H
#define SONDE_RECORD_RECORDER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <sonde/record.h>
#include <sonde/spool.h>

#include "perf/decode.h"
#include "perf/event.h"
#include "perf/ring.h"
#include "perf/stream.h"
#include "base/regfile.h"
#include "base/u64map.h"
#include "perf/ftrace_format.h"
#include "proc/proc.h"
#include "record/live.h"
#include "record/modules.h"
#include "record/offcpu_bpf.h"
#include "record/events.h"
#include "record/filters.h"
#include "record/images.h"
#include "record/tasks.h"
#include "unwind/cache.h"
#include "unwind/dwarf.h"

/* Kernel frames kept per sample; perf's own default limit (kernel.perf_event_max_stack)
 * is 127. */
enum { REC_KERNEL_MAX_FRAMES = 256 };
/* Lowest kernel address on x86-64 (the upper half of the canonical address space). */
#define REC_KERNEL_START 0xffff800000000000ull

/* Off-CPU recording (offcpu.c): the tracepoints and their fields. */
struct rec_offcpu_cfg {
	bool on;
	uint64_t min_ns;
	uint64_t switch_id, waking_id; /* tracepoint ids (PERF_TYPE_TRACEPOINT configs) */
	struct ftrace_field prev_state, next_pid, prev_pid, waking_pid;
	struct rec_offcpu_bpf *bpf; /* the BPF backend's (offcpu_bpf.c), NULL: perf_event's */
	/* -a: each CPU's switches as the kernel delivered them, written in runs (SWITCHES
	 * records) for the exports' timelines; indexed by CPU number */
	struct rec_switches *sw;
	uint32_t n_sw;
	bool sw_started; /* the empty runs that announce them are written */
	/* a target was attached running (not stopped, not launched): a wait it was in then
	 * began unseen, so the spool cannot say every switch-out was tracked */
	bool attached_running;
};

enum {
	/* Records still being written when a ring is read can carry a timestamp slightly
	 * older than the read (by the recorder's clock); they are released one poll later
	 * at most. */
	REC_REORDER_SLACK_NS = 2000000,
	/* A poll runs a recovery sweep for an open gap at most this often (by the clock). */
	REC_SWEEP_INTERVAL_NS = 250000000,
};
/* The epoll data of the paced drains' timer (events.h); the BPF off-CPU rings' is
 * UINT64_MAX, a perf ring's its CPU's index. */
#define REC_PACE_EPOLL_DATA (UINT64_MAX - 1)

/* The lifecycle part: which children are followed, the exec check, losses and the sweeps
 * that recover from them (recover.c owns it; others call its functions). */
struct rec_life {
	bool follow_children;
	bool (*exec_check)(void *ctx, pid_t pid); /* opts.exec_check */
	void *exec_check_ctx;
	uint64_t gaps_open;	/* losses reported since the last completed sweep */
	uint64_t loss_end_ns;	/* when the latest of those ended (sonde__rec_loss_end) */
	uint64_t last_sweep;	/* sonde__rec_now() when the last sweep ran */
	int64_t boot_offset_ns; /* CLOCK_BOOTTIME - CLOCK_MONOTONIC, for /proc start times */
	uint64_t lost_counted;	/* sum of the events' own lost counters at the last check */
};

/* The kernel part: what was refused (attach.c, which chooses the event; others call its
 * functions), and the spool modules kernel frames use (track.c, which alone writes
 * kernel frames). */
struct rec_kernel {
	int cycles_error;
	int kernel_error;	     /* kernel frames were asked for and refused: why */
	int kernel_time_error;	     /* kernel time was to be sampled and was refused: why */
	uint32_t kernel_module;	     /* spool id of the kernel module, 0 until first needed */
	uint32_t kernel_leaf_module; /* spool id of "[kernel]", 0 until first needed */
	uint32_t exiting_module;     /* spool id of "[exiting]", 0 until first needed */
};

/* The unwind part: a sample's frames, the CFI tables, the unwind counters (stack.c owns it;
 * others call its functions). */
struct rec_unwind {
	/* A sample's stack: its kernel frames (at most REC_KERNEL_MAX_FRAMES), then the user
	 * frames of the unwind. */
	struct sonde_spool_frame frames[REC_KERNEL_MAX_FRAMES + UNWIND_MAX_FRAMES];
	struct unwind_cache *unwind_cache; /* CFI tables of every file seen, built on first use */
	struct unwind_stats unwind_stats;
	bool frame_pointers_only; /* opts.frame_pointers_only */
};

/* The recorder's clock: what decides when a poll's deadlines are due (recovery sweeps,
 * generation switches, live pushes, draining during a long batch), when records are old
 * enough to be released in order, and what dates the records the recorder makes itself
 * (retirements, the end of an open interval, when a process was read from /proc). It is
 * compared with the times the kernel gives records (CLOCK_MONOTONIC, perf/event.c), so
 * now(ctx) must never go back, and should not run ahead of CLOCK_MONOTONIC: a clock held
 * behind holds back the records newer than it; one ahead ignores records that the kernel
 * dated before what the recorder read from /proc "at" that clock's time. NULL now:
 * CLOCK_MONOTONIC. A test holds it and moves it forward to make a deadline due without
 * sleeping. */
typedef uint64_t (*rec_clock_fn)(void *ctx);
struct rec_clock {
	rec_clock_fn now;
	void *ctx;
};

/* The recorder: its parts, and what the recording as a whole is. */
struct sonde_recorder {
	struct perf_layout layout;
	struct perf_event_cfg cfg;
	struct rec_kernel kern;
	struct rec_events ev;	    /* events, rings, ids, generations (events.h) */
	struct perf_stream *stream; /* every ring's records, decoded, in time order */
	struct sonde_spool_writer *spool;
	int out_fd;		  /* owned when recording to a path, else -1 */
	struct rec_tasks tasks;	  /* processes and threads (tasks.h) */
	struct rec_images img;	  /* build ids, held images, the build-id cache (images.h) */
	struct rec_filters filt;  /* system-wide filters, the tracepoint filter (filters.h) */
	struct rec_offcpu_cfg offcpu; /* off-CPU state not per thread (offcpu.c) */
	struct rec_life life;	  /* lifecycle and loss recovery (recover.c) */
	struct rec_unwind unw;
	struct rec_live live; /* periodic pushes, the tail (live.c) */
	struct sonde_record_summary sum;
	struct rec_clock clock;
	uint64_t start_mono, last_time;
	int first_error;
	bool enabled, finished;
	/* events per CPU over every task, kept to the filters in user space: -a, or a
	 * launched command's tree (sonde__rec_system_launched; summary system_wide 0) */
	bool system_wide;
};

/* Keeps the first error of the recording; returns err. */
int sonde__rec_error(struct sonde_recorder *r, int err);
/* Logs err as a secondary failure of `what` and keeps it as context (summary
 * context_error). */
void sonde__rec_context_error(struct sonde_recorder *r, int err, const char *what);
/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t sonde__rec_mono_now(void);
/* Now by the recorder's clock. */
uint64_t sonde__rec_now(const struct sonde_recorder *r);
/* Replaces the recorder's clock (NULL: CLOCK_MONOTONIC again); see struct rec_clock. The
 * new clock must not read earlier than the old one did last. */
void sonde__rec_set_clock(struct sonde_recorder *r, rec_clock_fn now, void *ctx);
/* The last records of one ring, before it is unmapped or replaced: every one it published
 * into the stream, which then lets go of the ring (what is queued of it keeps its stacks,
 * copied out). 0 or the first error. */
int sonde__rec_drain_ring_last(struct sonde_recorder *r, struct rec_ring *ring);
/* Drains every ring and processes, in order, every record stamped before the call
 * (everything queued once the events are disabled). */
int sonde__rec_drain(struct sonde_recorder *r);
/* Clamps a record time so that spool writes never go back in time. */
uint64_t sonde__rec_time(struct sonde_recorder *r, uint64_t t);

/* Chooses the ring size from the options, the rate and the stack size, under the bound
 * of all rings (recorder.c). */
void sonde__rec_size_rings(struct sonde_recorder *r, const struct sonde_record_opts *o);

/* attach.c: the events part (r->ev, with resize.c) */
/* The CPUs events are opened on: their count, and the number of CPU index idx. */
size_t sonde__rec_n_cpus(const struct sonde_recorder *r);
int sonde__rec_cpu(const struct sonde_recorder *r, size_t idx);
/* Events open. */
size_t sonde__rec_n_events(const struct sonde_recorder *r);
/* The current generation of events. */
uint32_t sonde__rec_gen(const struct sonde_recorder *r);
/* Wakes poll when fd is readable, telling it data (the BPF ring's mark; perf rings go
 * through sonde__rec_watch_ring). 0 or -errno. */
int sonde__rec_watch_fd(struct sonde_recorder *r, int fd, uint64_t data);
/* Adds the perf ring of CPU index cpu_idx to the recorder's epoll set: read when it holds
 * a watermark's worth, or, paced (events.h), watched for its hang-up alone. 0 or -errno. */
int sonde__rec_watch_ring(struct sonde_recorder *r, int fd, size_t cpu_idx);
/* Kernel time is not sampled, for the reason err (-errno). */
void sonde__rec_kernel_time_refused(struct sonde_recorder *r, int err);
/* Why kernel time is not sampled (-errno), 0 when it is or was not asked for. */
int sonde__rec_kernel_time_error(const struct sonde_recorder *r);
/* What was refused (kernel frames, kernel time, the cycles event) into a summary. */
void sonde__rec_kernel_summary(const struct sonde_recorder *r, struct sonde_record_summary *s);
/* Replaces the online CPUs with the ones asked for, each of which must be online. 0 or
 * -errno (the cause logged). */
int sonde__rec_select_cpus(struct sonde_recorder *r, const int *want, size_t n);
int sonde__rec_choose_event(struct sonde_recorder *r, pid_t pid, enum sonde_record_event want);
/* Why choosing the event failed, in one error (unless choosing said it already). */
void sonde__rec_explain_event_error(struct sonde_recorder *r, pid_t pid, int err);
int sonde__rec_open_process(struct sonde_recorder *r, pid_t pid, enum sonde_attach_mode mode);
/* Attaches thread tid alone (sonde_recorder__attach_thread): stopped while its events are
 * opened (mode STOP), its process's mappings read. An enum sonde_attach_outcome or -errno,
 * the cause logged (-SONDE_E_UNSUPPORTED: a kernel thread). */
int sonde__rec_open_thread_target(struct sonde_recorder *r, pid_t tid, enum sonde_attach_mode mode);
/* Refuses, with the reason logged, a pid that cannot be recorded: a kernel thread
 * (-SONDE_E_UNSUPPORTED: it has no user space) or no process (-ESRCH). 0 otherwise. */
int sonde__rec_check_target(pid_t pid);
/* The same for a thread, whose process it returns in *pid: "no such thread" (-ESRCH), a
 * kernel thread (-SONDE_E_UNSUPPORTED), both logged. */
int sonde__rec_check_thread(pid_t tid, pid_t *pid);
void sonde__rec_explain_perf_error(pid_t pid, int err);
int sonde__rec_enable_all(struct sonde_recorder *r, bool enable);
void sonde__rec_exec_seen(struct sonde_recorder *r, pid_t pid);
/* After the final drain: losses the kernel never got to report as LOST records. */
void sonde__rec_reconcile_lost(struct sonde_recorder *r);
/* Opens (and, when sampling is on, enables) events for thread tid, which must be in the
 * thread table. 0 or -errno (nothing of it left open). */
int sonde__rec_open_thread_events(struct sonde_recorder *r, pid_t tid);
/* Closes the events the recorder opened on an exited thread (not those that own a ring),
 * keeping their lost counts. */
void sonde__rec_close_thread_events(struct sonde_recorder *r, pid_t tid);
/* Sum of the lost counters of every open event plus those already closed. */
uint64_t sonde__rec_read_lost_counters(struct sonde_recorder *r);
/* Takes event fd (of thread tid, -1 for a per-CPU event; generation gen, copying
 * stack_bytes) on CPU index cpu_idx, routing it into that CPU's ring (mapped on first use;
 * during a switch, the ring's replacement when it grows). 0 or -errno (fd then still the
 * caller's). */
int sonde__rec_add_event(struct sonde_recorder *r, int fd, size_t cpu_idx, pid_t tid, bool on_exec,
			 uint32_t gen, uint32_t stack_bytes);
/* One event per (thread, CPU) with a stack copy of stack_bytes, disabled or armed for exec,
 * of generation gen, into each CPU's ring (its replacement when one is being grown).
 * 0 or -errno (nothing of it left open). */
int sonde__rec_open_thread(struct sonde_recorder *r, pid_t tid, bool on_exec, bool no_inherit,
			   uint32_t stack_bytes, uint32_t gen);
/* Closes event i, keeping its lost count, and moves the last event into its place. */
void sonde__rec_event_remove(struct sonde_recorder *r, size_t i);
/* Closes the events opened from index `from` on (of tid only when tid is not 0), keeping
 * their lost counts; ring owners stay open, disabled. */
void sonde__rec_close_events_from(struct sonde_recorder *r, pid_t tid, size_t from);

/* resize.c */
/* Replaces the ring of every CPU that reported a loss by one twice its size, while the
 * bound of all rings allows (a system-wide recording's rings each have one event). */
void sonde__rec_grow_rings(struct sonde_recorder *r);
/* Whether each thread's stack copy is sized by what its unwinds need. */
bool sonde__rec_adaptive(const struct sonde_recorder *r);
/* One copy size for all (a system-wide recording). */
void sonde__rec_fixed_copy(struct sonde_recorder *r);
/* Whether a record of that time is older than the cut of the generation switch under way
 * or last made (before it, the older generation's events still sampled). */
bool sonde__rec_before_cut(const struct sonde_recorder *r, uint64_t time);
/* Records event fd's id (opened on tid, generation gen). 0 or -errno. */
int sonde__rec_note_event_id(struct sonde_recorder *r, int fd, pid_t tid, uint32_t gen,
			     uint32_t stack_bytes);
const struct rec_event_id *sonde__rec_event_id(const struct sonde_recorder *r, uint64_t id);
/* Whether rec is of an abandoned switch's events, or of the generation that did not cover
 * its time while a switch overlapped two: known from its id alone, so the stream drops it
 * before copying anything of it (a later switch moves the cut forward, never back). */
bool sonde__rec_is_stale(const struct sonde_recorder *r, const struct perf_rec *rec);
/* Whether rec is a copy of what another event of the same thread records: the older
 * generation's while the switch overlapped them, or a parent's inherited event on a
 * thread that has its own. */
bool sonde__rec_is_duplicate(struct sonde_recorder *r, const struct perf_rec *rec);
/* The stack copy of the event whose records carry id (the configured one if unknown). */
uint32_t sonde__rec_event_copy(const struct sonde_recorder *r, uint64_t id);
/* What an unwind of a copy of copy bytes (stack_len of them kept) tells about its thread's
 * copy size. */
void sonde__rec_stack_learn(struct sonde_recorder *r, struct rec_thread *t, uint32_t copy,
			    size_t stack_len, enum unwind_end end, size_t reach);
/* The stack copy to open thread t's events with. */
uint32_t sonde__rec_thread_stack_bytes(const struct sonde_recorder *r, const struct rec_thread *t);
/* After a poll: switches to a new generation of events when a thread's copy should change
 * size or a ring lost records and may grow. 0 or the first error. */
int sonde__rec_maybe_regen(struct sonde_recorder *r);
/* How long a poll may wait for data: timeout_ms, lowered to 20 ms while a cut stack waits
 * for a switch and, within a second of the start or of the last switch, while a thread
 * copies more than 8 KiB (its size, judged after 20 samples, may cut that copy). */
int sonde__rec_regen_wait_ms(struct sonde_recorder *r, int timeout_ms);
/* A thread with its own events exits: whether they can be closed (no thread inherited
 * them). */
bool sonde__rec_can_close_root(struct sonde_recorder *r, struct rec_thread *t);
/* A thread was created by parent (a FORK record): it inherits parent's events. */
void sonde__rec_inherit(struct sonde_recorder *r, struct rec_thread *t, pid_t ptid);

/* images.c */
int sonde__rec_images_configure(struct sonde_recorder *r, const struct sonde_record_opts *o);
/* Takes ownership of fd, the image b was read from (mapped at path). */
void sonde__rec_image_hold(struct sonde_recorder *r, struct rec_build_id *b, int fd,
			   const char *path);
/* Copies the held images whose path no longer leads to them into the build-id cache. */
void sonde__rec_images_save(struct sonde_recorder *r);
/* Frees the build ids and what they hold (images.c owns r->img). */
void sonde__rec_images_free(struct sonde_recorder *r);
/* The build id of module m of pid, read once per file (by device, inode and the inode's
 * generation when both sides know it, through /proc/PID/map_files first, as an untrusted
 * path else), its image held; m->gen, when unknown (a mapping read from /proc), becomes
 * the file's. NULL: no memory. */
const struct rec_build_id *sonde__rec_build_id(struct sonde_recorder *r, pid_t pid,
					       struct rec_module *m);
/* The held image of file (dev, inode), borrowed until the next call into the recorder, or
 * -1 (none, or its build id is not build_id when one is given). */
int sonde__rec_image_fd(const struct sonde_recorder *r, uint64_t dev, uint64_t inode,
			const uint8_t *build_id, size_t build_id_len);
/* Mapped files not read (base/regfile.h's refusals), for the summary. */
uint64_t sonde__rec_images_refused(const struct sonde_recorder *r);

/* offcpu.c */
/* Reads the tracepoints' ids and field offsets from tracefs (opts.off_cpu). 0 or -errno
 * (the cause logged). */
int sonde__rec_offcpu_setup(struct sonde_recorder *r, const struct sonde_record_opts *o);
/* Opens the off-CPU events of thread tid (-1: every task) on CPU index c, into its ring. */
int sonde__rec_offcpu_open(struct sonde_recorder *r, const struct perf_event_cfg *base, pid_t tid,
			   size_t c, bool on_exec, uint32_t gen);
/* A sample record: a switch-out or a wakeup (1, handled), or an on-CPU sample (0). */
int sonde__rec_offcpu_sample(struct sonde_recorder *r, const struct perf_rec *rec);
/* A PERF_RECORD_SWITCH record: the switch-in of its thread. */
int sonde__rec_offcpu_switch(struct sonde_recorder *r, const struct perf_rec *rec);
/* Whether off-CPU time is recorded. */
bool sonde__rec_offcpu_on(const struct sonde_recorder *r);
/* What the stream keeps of a tracepoint sample of the off-CPU events (an enum
 * perf_stream_keep), -1 when rec is not one; self: rec is of the recorder's own process. */
int sonde__rec_offcpu_keep(const struct sonde_recorder *r, const struct perf_rec *rec, bool self);
/* A loss: every interval waiting for its end may have lost it. */
void sonde__rec_offcpu_loss(struct sonde_recorder *r);
/* Thread t is going away, its life ending at `end`: an interval a loss left open is
 * unknown up to there, its short counts are written, its state freed. exit_ns (0: none)
 * is the time of its exit record, which the kernel writes before the thread's last
 * switch-out: a wait still open then ended, its switch-in unseen, and is unknown up to
 * there. */
int sonde__rec_offcpu_forget(struct sonde_recorder *r, struct rec_thread *t, uint64_t end,
			     uint64_t exit_ns);
/* Frees a thread's off-CPU state (NULL is fine), writing nothing. */
void sonde__rec_offcpu_free(struct rec_offcpu *o);
/* Frees the recorder's off-CPU state that is not per thread. */
void sonde__rec_offcpu_release(struct sonde_recorder *r);
/* Writes each CPU's pending switches (a push: a tail weighs samples by the stays they
 * give, docs/tail.md). 0 or the recorder's error. */
int sonde__rec_offcpu_switches_push(struct sonde_recorder *r);
/* Switches taken and not yet written, over every CPU. */
uint64_t sonde__rec_offcpu_switches_pending(const struct sonde_recorder *r);
/* The recording ends: open intervals end now, short counts are written. */
int sonde__rec_offcpu_finish(struct sonde_recorder *r);

/* stack.c: the unwind part (r->unw) */
/* Creates the unwind cache. 0 or -ENOMEM. */
int sonde__rec_unwind_init(struct sonde_recorder *r);
void sonde__rec_unwind_free(struct sonde_recorder *r);
/* opts.frame_pointers_only: no CFI, frame pointers walk every frame. */
void sonde__rec_unwind_fp_only(struct sonde_recorder *r, bool on);
/* The frames of the sample being written (REC_KERNEL_MAX_FRAMES + UNWIND_MAX_FRAMES),
 * valid until the next sample. */
struct sonde_spool_frame *sonde__rec_frames(struct sonde_recorder *r);
/* Unwinds a user stack of pid into the frames from index skip on (after the kernel
 * frames), counting its steps. The number of user frames; *end how the walk ended. */
size_t sonde__rec_unwind_user(struct sonde_recorder *r, pid_t pid, const struct rec_modtable *mods,
			      const struct unwind_regs *regs, const struct unwind_stack *st,
			      size_t skip, enum unwind_end *end);
/* Builds the CFI tables of mods now (a process found running, before sampling starts). */
void sonde__rec_unwind_warm(struct sonde_recorder *r, pid_t pid, const struct rec_modtable *mods);
/* The unwind counters into a summary. */
void sonde__rec_unwind_summary(const struct sonde_recorder *r, struct sonde_record_summary *s);

/* track.c */
/* Stops recording process p: its threads' events closed, its modules retired, every later
 * record of it ignored (sonde_recorder__detach_process). */
int sonde__rec_stop_process(struct sonde_recorder *r, struct rec_process *p);
int sonde__rec_add_mapping(struct sonde_recorder *r, struct rec_process *p, uint64_t time,
			   const struct rec_module *m, uint32_t maj, uint32_t min);
int sonde__rec_read_maps(struct sonde_recorder *r, struct rec_process *p, uint64_t time);
int sonde__rec_retire(struct sonde_recorder *r, struct rec_process *p, uint64_t time);
int sonde__rec_process_record(struct sonde_recorder *r, const struct perf_rec *rec);
/* The process a sample belongs to, or NULL (counted) when it is not to be recorded. */
struct rec_process *sonde__rec_sample_process(struct sonde_recorder *r, const struct perf_rec *rec);
/* A sample's stack into r->frames (kernel frames, then the unwound user frames): *n frames,
 * *flags SONDE_SAMPLE_*; with per-thread copies, what the unwind needed sizes the copy of
 * rec->tid (the sample's copy was copy bytes). kernel_leaf: a sample taken in the kernel
 * without its kernel callchain gets one "[kernel]" frame below its user frames. p may be
 * NULL for a sample without user registers (nothing is unwound). 0 or -errno. */
int sonde__rec_sample_stack(struct sonde_recorder *r, struct rec_process *p,
			    const struct perf_rec *rec, uint32_t copy, bool kernel_leaf, size_t *n,
			    uint32_t *flags);
/* The frame that stands for the user stack of a thread that waited on its way out, after
 * its exit record or after it had released its memory (the BPF off-CPU backend tells
 * those apart): one frame of a module named "[exiting]", put outermost, where the user
 * frames would be. 0 or -errno. */
int sonde__rec_exiting_frame(struct sonde_recorder *r, uint64_t time, struct sonde_spool_frame *f);
/* Whether a record of thread tid of pid at `time` is of a recorded thread on its way out:
 * after its exit record (its process retired by then when it was the last thread, its
 * entry gone with -a), before its last switch-out. Such a thread never runs user code
 * again: its waits are written with the [exiting] frame for their user part (no module is
 * needed), under the spool thread it had, whatever became of its process's entry. */
bool sonde__rec_thread_exiting(struct sonde_recorder *r, pid_t pid, pid_t tid, uint64_t time);
/* The spool id of thread tid of pid, defined on first use. */
int sonde__rec_thread_id(struct sonde_recorder *r, uint64_t time, pid_t pid, pid_t tid,
			 uint32_t *id);
/* A record of thread tid's own at time (a sample, a switch of it): thread.seen_ns. */
static inline void sonde__rec_thread_seen(struct sonde_recorder *r, pid_t tid, uint64_t time)
{
	struct rec_thread *t = sonde__tasks_thread(&r->tasks, tid, false);

	if (t && time > t->seen_ns)
		t->seen_ns = time;
}
void sonde__rec_track_free(struct sonde_recorder *r);
/* Whether p, the entry of a pid read from /proc as st, is that process already. */
typedef bool rec_same_process_fn(struct sonde_recorder *r, struct rec_process *p,
				 const struct proc_stat *st);
/* The one way a running process found in /proc joins the recording (a followed child a
 * sweep found, a process of a system-wide recording): unless `same` says the entry of pid
 * is that process already, an earlier process of that pid is forgotten (its modules
 * retired, its threads' names dropped) and pid is known afresh by its start time and
 * executable; the caller sets since and reads its threads and maps. 1 with *out (st: its
 * /proc stat), 0 when it is gone, in the exit of its last thread, or known already, or
 * -errno. */
int sonde__rec_adopt_process(struct sonde_recorder *r, pid_t pid, uint64_t time,
			     rec_same_process_fn *same, struct proc_stat *st,
			     struct rec_process **out);
/* Forgets everything about p's previous incarnation (its pid was reused, or it is being
 * attached again): retires its modules and resets its identity. */
int sonde__rec_process_reset(struct sonde_recorder *r, struct rec_process *p, uint64_t time);
/* Process p is gone and its exit record was lost (a recovery sweep found it so): each of
 * its threads still known ends with the latest loss that ended after it was last seen
 * (thread.seen_ns; sonde__rec_loss_end), the latest it can have exited, an EXIT written
 * there; what it did since that sighting is unknown. by_pid lists the threads
 * (sonde__tasks_tids_by_pid, any time since the sweep's drain). 0 or -errno. */
int sonde__rec_process_gone(struct sonde_recorder *r, const struct rec_process *p,
			    const struct rec_tids_by_pid *by_pid);
/* Thread tid of pid left the CPU for the last time at time (a switch-out in an exit
 * state): nothing of it comes after, so a later record of its tid is another task's (its
 * pid given again, that fork record lost), defined anew; with its exit record lost too,
 * it ends here. 0 or -errno. */
int sonde__rec_thread_dead(struct sonde_recorder *r, pid_t tid, pid_t pid, uint64_t time);

/* recover.c: the lifecycle part (r->life) */
/* Reads the clocks' offset for /proc start times. */
void sonde__rec_life_init(struct sonde_recorder *r);
/* opts.follow_children and opts.exec_check. */
void sonde__rec_life_configure(struct sonde_recorder *r, const struct sonde_record_opts *o);
/* Every process is followed, forks included (a system-wide recording). */
void sonde__rec_life_follow_all(struct sonde_recorder *r);
/* Whether the children of recorded processes are recorded. */
bool sonde__rec_follows_children(const struct sonde_recorder *r);
/* After p was seen running a new program: asks opts.exec_check whether to go on. */
int sonde__rec_check_exec(struct sonde_recorder *r, struct rec_process *p);
/* A loss was reported: one more open gap, which ended at end_ns (the time of the kernel's
 * LOST record: its first write after the loss; the recorder's clock when the loss is
 * found in the events' counters, no record written yet). */
void sonde__rec_note_loss(struct sonde_recorder *r, uint64_t end_ns);
/* When the latest loss reported since the last sweep ended (0: none). A thread a sweep
 * finds gone, its exit record lost, died in a loss after it was last seen: had it exited
 * outside one, its exit record would be there. So by then at the latest. */
uint64_t sonde__rec_loss_end(const struct sonde_recorder *r);
/* Runs a recovery sweep when a gap is open and (unless forced) the last sweep is old
 * enough. Also reads the events' lost counters when forced. 0 or the first error. */
int sonde__rec_maybe_recover(struct sonde_recorder *r, bool force);
/* Liveness of p by (pid, start time), or for a followed child by its fork time. 1 alive,
 * 0 gone (p is then marked exited and retired), -errno. */
int sonde__rec_process_alive(struct sonde_recorder *r, struct rec_process *p);
/* For a process attached by thread: whether a thread of it with events (attached, or
 * created by one) still runs. 1, 0, -errno. */
int sonde__rec_threads_alive(struct sonde_recorder *r, const struct rec_process *p);
/* Opens events for p's threads that have none and started before p was attached. Count
 * of threads opened, or -errno (-ESRCH: the process is gone). */
int sonde__rec_refresh_threads(struct sonde_recorder *r, struct rec_process *p);
/* Whether a process with /proc start time `ticks` is the child whose fork record has
 * monotonic time fork_ns. */
bool sonde__rec_is_forked_at(const struct sonde_recorder *r, uint64_t fork_ns, uint64_t ticks);
/* Boot time now in clock ticks (the unit of /proc start times). */
uint64_t sonde__rec_boot_ticks(void);
/* Device and inode of /proc/PID/exe (both 0 when unreadable). */
void sonde__rec_read_exe(pid_t pid, uint64_t *dev, uint64_t *ino);

/* system.c */
/* Options of a system-wide recording: the CPUs (validated against the online ones), the
 * process filter. 0 or -errno. */
int sonde__rec_system_configure(struct sonde_recorder *r, const struct sonde_record_opts *o);
/* A launched command recorded off CPU only with the BPF backend: its side band (exec,
 * mappings, forks, exits) from one event per CPU, kept to the process tree of pid as -a -p
 * keeps it, rather than from events of its own on every thread, which a thread pays for at
 * each of its switches (docs/record.md, "Off-CPU backends"). The events are opened and
 * the process attached as for -a. 0 or -ENOMEM. */
int sonde__rec_system_launched(struct sonde_recorder *r, pid_t pid);
/* Whether the recording is a launched command's tree by per-CPU events. */
bool sonde__rec_system_launched_tree(const struct sonde_recorder *r);
/* Process p attached to such a recording (sonde__rec_open_process): its records kept from
 * now on (its children's too), its threads read from /proc when it is running (not still
 * in its launcher). 0 or -errno. */
int sonde__rec_system_take(struct sonde_recorder *r, struct rec_process *p, bool running);
/* Thread tid attached alone to such a recording, running: its records kept from now on
 * (and what it creates). 0 or -errno, logged (-ESRCH: no such thread). */
int sonde__rec_system_take_thread(struct sonde_recorder *r, pid_t tid);
/* One disabled event per selected CPU, every task. 0 or -errno. */
int sonde__rec_system_open(struct sonde_recorder *r);
/* Reads the running processes from /proc (all, or the filtered ones and their
 * descendants): identity, thread names, executable mappings. Records of them older than
 * `since` are ignored. 0 or -errno. */
int sonde__rec_system_scan(struct sonde_recorder *r, uint64_t since);
/* Starts tracking pid from /proc unless it is tracked already (same start time). */
int sonde__rec_system_adopt(struct sonde_recorder *r, pid_t pid, uint64_t since, uint64_t time);
/* Whether records of pid (forked by parent, 0 when unknown) are to be tracked. */
bool sonde__rec_system_tracks(struct sonde_recorder *r, pid_t pid, pid_t parent);
/* opts.process_check's answer for pid (true without one), asked once per process. */
bool sonde__rec_system_allowed(struct sonde_recorder *r, pid_t pid);
/* Forgets that answer: pid exec'd, exited, or names a new process. */
void sonde__rec_system_forget(struct sonde_recorder *r, pid_t pid);
/* Opens the recording's sampling event (sonde__perf_open) with the tracepoint filter set
 * when there is one. The fd or -errno. */
int sonde__rec_perf_open(struct sonde_recorder *r, struct perf_event_attr *a, pid_t pid, int cpu);
/* Whether only the processes of the pid and tid filters are tracked (with a comm filter,
 * any process may be named so at its next sample: every one is tracked). */
bool sonde__rec_system_limited(const struct sonde_recorder *r);
/* Whether the pid filter is the only filter (those processes and their children only). */
bool sonde__rec_system_pids_only(const struct sonde_recorder *r);
/* The pid filter: its count, the pids in *pids (borrowed for the recorder's life). */
size_t sonde__rec_system_pids(const struct sonde_recorder *r, const pid_t **pids);
/* With filters: whether a sample of thread tid of p is to be recorded. */
bool sonde__rec_system_selects(struct sonde_recorder *r, const struct rec_process *p, pid_t tid);
/* The filters part (system.c owns r->filt). */
/* Whether pid is the recorder's own process (never recorded system-wide). */
bool sonde__rec_is_self(const struct sonde_recorder *r, pid_t pid);
/* Whether every process is recorded: no pid, tid or comm filter and no process check. */
bool sonde__rec_system_unfiltered(const struct sonde_recorder *r);
/* Whether opts.process_check is asked about processes. */
bool sonde__rec_system_checks_processes(const struct sonde_recorder *r);
/* Keeps a copy of opts.tracepoint_filter for every event. 0 or -ENOMEM. */
int sonde__rec_set_tracepoint_filter(struct sonde_recorder *r, const char *filter);
/* opts.tracepoint_filter, or NULL; borrowed for the recorder's life. */
const char *sonde__rec_tracepoint_filter(const struct sonde_recorder *r);
void sonde__rec_filters_free(struct sonde_recorder *r);
/* Drops exited, retired processes from the table (a long system-wide recording sees
 * processes come and go without end). */
void sonde__rec_forget_exited(struct sonde_recorder *r);

#endif
