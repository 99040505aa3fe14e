/* The recorder's task model: its processes and threads, hashed by pid and tid, and what
 * the threads that exited last left (name, spool thread, exit time). Internal.
 *
 * It knows nothing of perf events, rings or the spool: track.c calls it for the side-band
 * records (FORK, COMM, EXIT, MMAP2) and the samples, and the other parts keep their
 * per-task state in its entries (a thread's stack copy sizing and off-CPU state, a
 * process's stop handle and modules). The tables themselves are reached only through
 * the functions below. Everything runs in record time order; a record older than an
 * entry's `since` is of an earlier task with the same id (the id was reused) and changes
 * nothing.
 *
 * Entries are owned by the tables: a pointer stays valid until the next call that may
 * create or remove one (a create can move every entry of its table).
 */
#ifndef SONDE_RECORD_TASKS_H
#define SONDE_RECORD_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/u64map.h"
#include "proc/proc.h"
#include "record/modules.h"

/* Exited threads whose names are kept (struct rec_tasks.gone): a table indexed by tid
 * modulo its size, so a name is lost only to a later exit of a tid that many apart (on a
 * machine forking thousands of tasks a second a ring of the last few hundred exits lost
 * the names of long-lived tasks whose last interval was written at the end). */
enum { REC_GONE_NAMES = 1 << 15 };

struct rec_offcpu;

/* What an exited thread left (struct rec_tasks.gone): its name, and its spool thread and
 * exit time, so that a record of it processed after its exit record is written under the
 * same spool thread (one definition and one EXIT per task, docs/record.md "Accounting"). */
struct rec_gone_name {
	pid_t tid, pid;
	uint32_t spool_id; /* its spool thread; 0: never defined (yet) */
	uint64_t exit_ns;  /* its EXIT's time (the kernel's exit record, or its last sighting) */
	bool dead;	   /* its last switch-out seen: no later record is its */
	char comm[16];
};

struct rec_process {
	pid_t pid;
	uint64_t start_time; /* 0 when unknown (a child seen only through FORK) */
	bool attached;	     /* attached explicitly, as opposed to followed */
	bool thread_only;    /* attached by thread (-t): only some threads have events */
	bool selected;	     /* system-wide filters: every thread of it is recorded */
	bool exited;
	bool has_spool_modules; /* modules defined in the spool since the last retirement */
	struct proc_stopped stop;
	struct rec_modtable mods;
	uint64_t fork_time;	   /* monotonic ns of its fork record (followed children) */
	uint64_t attach_ticks;	   /* boot time in clock ticks when its threads were listed */
	uint64_t exe_dev, exe_ino; /* /proc/PID/exe when last checked; 0 when unknown */
	/* Monotonic ns from which records of this pid belong to this process: older ones
	 * (still queued when the pid was reused) are of its predecessor and are ignored. */
	uint64_t since;
	/* When exited: its end, the exit record of its last thread, or when /proc showed it
	 * gone (a liveness check, which comes after every record of it was stamped, not
	 * after they were all processed). 0 when nothing of it was recorded. */
	uint64_t exit_ns;
	/* A process lives until its last thread ends, not its main one (which may end first,
	 * with pthread_exit): its threads other than the main one that the recorder saw start
	 * (their fork, or /proc) and not end, and whether the main one ended. */
	uint32_t threads;
	bool main_exited;
	uint64_t serial; /* this process's entry: a new one for a reused pid (reset) */
};

struct rec_thread {
	pid_t tid; /* 0: empty slot */
	pid_t pid;
	uint32_t spool_id; /* valid when defined */
	bool defined;
	bool own_events; /* events opened on it by the recorder (not inherited) */
	bool announced;	 /* a fork record created it: it inherited the events */
	bool selected;	 /* system-wide filters: a filtered thread, or one it created */
	uint64_t since;	 /* as rec_process.since, for a reused tid */
	/* The process entry (its serial) that counts it in its threads; 0: none. */
	uint64_t counted_in;
	/* Its fork record's time (or its exec's, where it was first seen) until its next
	 * definition, which is given that time: its life starts at its creation, not at its
	 * first switch-in (docs/record.md, "Accounting"). 0: defined since, or neither seen. */
	uint64_t born_ns;
	/* Its latest record of its own (a sample, a switch-out or switch-in of it): how far
	 * its life is known to reach when its exit record is lost. 0: none yet. */
	uint64_t seen_ns;
	char comm[16];
	/* Stack copy sizing (resize.c). The events sampling it are its own (root_gen: the
	 * generation they belong to, 0 when it has none) or inherited from root_tid's. */
	uint32_t root_gen;
	pid_t root_tid;
	bool inheritors;	/* threads created since inherited its own events */
	bool grow;		/* a stack was cut by the end of its copy: double it */
	uint32_t copy_bytes;	/* the copy its last sample had */
	uint32_t min_bytes;	/* never below this: a size it had to grow to */
	uint32_t reach;		/* most stack bytes an unwind of it needed in the window */
	uint32_t window;	/* samples since its events were last reopened (the window) */
	uint32_t cuts;		/* of them, cut by the end of a full copy */
	bool too_deep;		/* cut even by the largest copy: back to STACK_TOO_DEEP */
	uint32_t regen_mark;	/* generation a switch in progress gave it events in */
	struct rec_offcpu *off; /* off-CPU state (offcpu.c), NULL until its first switch-out */
};

struct rec_tasks {
	struct rec_process *procs; /* in the order first seen */
	size_t n_procs, cap_procs;
	struct u64map proc_index;   /* pid -> its index in procs */
	struct rec_thread *threads; /* open addressing on tid, cap a power of two */
	size_t n_threads, cap_threads;
	/* What the threads that exited left: per-CPU events still sample a task on its way
	 * out after its exit record, and its open off-CPU interval is written at the end,
	 * when /proc no longer names it; both are written under its spool thread. REC_GONE_NAMES
	 * entries by tid, allocated at the first exit (NULL until then, or when out of memory:
	 * names are then only lost). */
	struct rec_gone_name *gone;
	uint64_t procs_created, threads_created; /* entries ever made (the summary's counts) */
	uint64_t serials; /* the last rec_process.serial given */
};

/* Frees both tables (the entries' modules too; their off-CPU state is the caller's). */
void sonde__tasks_free(struct rec_tasks *ts);

/* ---- processes ---- */

/* Process pid, appended when create is set and it is unknown (NULL: unknown, or no
 * memory). */
struct rec_process *sonde__tasks_process(struct rec_tasks *ts, pid_t pid, bool create);
/* The same for a record of pid at time: NULL (never created) when the record is older
 * than the known process's since, i.e. of its predecessor. */
struct rec_process *sonde__tasks_process_at(struct rec_tasks *ts, pid_t pid, uint64_t time,
					    bool create);
/* Processes and threads ever entered (the summary's counts). */
static inline void sonde__tasks_created(const struct rec_tasks *ts, uint64_t *procs,
					uint64_t *threads)
{
	*procs = ts->procs_created;
	*threads = ts->threads_created;
}

static inline size_t sonde__tasks_n_procs(const struct rec_tasks *ts)
{
	return ts->n_procs;
}
/* The i-th process (i < sonde__tasks_n_procs); processes appended during a walk by index
 * are reached by it too. */
static inline struct rec_process *sonde__tasks_proc_at(struct rec_tasks *ts, size_t i)
{
	return &ts->procs[i];
}
/* pid names a new process from now on (its predecessor's exit went unseen, or it is
 * attached again): its identity is cleared and the threads of the old one lose their
 * names and spool definitions. Its modules are the caller's to retire first. */
void sonde__tasks_process_reset(struct rec_tasks *ts, struct rec_process *p);
/* p exec'd: it has one thread now, its main one (an exec in another thread ends the
 * others, and the main one too, whose tid the exec'ing thread takes, with no exit
 * record of its own), and its main thread has not exited. */
void sonde__tasks_process_exec(struct rec_tasks *ts, struct rec_process *p);
/* EXIT of p's main thread at time: p is marked exited. p, or NULL when unknown or the
 * record is of a predecessor. */
struct rec_process *sonde__tasks_process_exit(struct rec_tasks *ts, pid_t pid, uint64_t time);
/* Drops the exited processes whose modules are retired (their module tables freed). */
void sonde__tasks_forget_exited(struct rec_tasks *ts);

/* ---- threads ---- */

/* Thread tid, created (zeroed but for tid) when create is set and tid > 0. */
struct rec_thread *sonde__tasks_thread(struct rec_tasks *ts, pid_t tid, bool create);
/* Walks the threads: the first with prev NULL, then the one after prev; NULL at the end.
 * Nothing may be created or removed during the walk. */
struct rec_thread *sonde__tasks_next_thread(struct rec_tasks *ts, struct rec_thread *prev);

/* The tids of every process's threads at one moment, by pid: a recovery sweep ends the
 * threads of each process it finds dead through one walk of the threads, not one walk per
 * dead process. It goes stale as threads are created, removed or change process: a tid
 * it lists is looked up again, and is of the pid only if its thread still says so. */
struct rec_tids_by_pid {
	struct rec_pid_tid {
		pid_t pid, tid;
	} * v; /* sorted by pid */
	size_t n, cap;
};
/* Lists the threads now, into x (emptied first). 0 or -ENOMEM. */
int sonde__tasks_tids_by_pid(struct rec_tasks *ts, struct rec_tids_by_pid *x);
/* The entries of pid's threads in x, *n of them (none: NULL). */
const struct rec_pid_tid *sonde__tids_of(const struct rec_tids_by_pid *x, pid_t pid, size_t *n);
void sonde__tids_by_pid_free(struct rec_tids_by_pid *x);
/* The one way a thread found in /proc is defined: whatever tid was before, it is now a
 * thread of p (counted in its threads when it is not the main one) whose records count
 * from `since`, named comm, or with comm NULL as /proc names it (empty if it cannot be
 * read), to be defined in the spool at its next sample. NULL: no memory. */
struct rec_thread *sonde__tasks_thread_from_proc(struct rec_tasks *ts, struct rec_process *p,
						 pid_t tid, uint64_t since, const char *comm);
/* FORK of thread tid of pid by ptid of ppid at time: tid is a new thread of pid from time
 * on (counted in its threads when it is not the main one), named as its creator (not by its creator's bare id: then as sonde__tasks_name finds
 * it), inheriting its creator's events (announced) and selection.
 * Its own_events are cleared (the caller decides). NULL: no memory. */
struct rec_thread *sonde__tasks_fork(struct rec_tasks *ts, pid_t pid, pid_t ppid, pid_t tid,
				     pid_t ptid, uint64_t time);
/* COMM of thread tid of process pid at time: its new name, to be defined anew at its next
 * sample; a thread not known before is pid's from now on. The thread, or NULL when the
 * record is of a predecessor of that tid (*stale set) or no memory. */
struct rec_thread *sonde__tasks_rename(struct rec_tasks *ts, pid_t pid, pid_t tid,
				       const char *comm, uint64_t time, bool *stale);
/* The tids of pid's threads but except, into a new array (*n of them; NULL and 0 when
 * there are none). -ENOMEM. */
int sonde__tasks_threads_of(const struct rec_tasks *ts, pid_t pid, pid_t except, pid_t **tids,
			    size_t *n);
/* Removes tid, which exited at exit_ns: its name, spool thread (when defined) and exit
 * time are kept for the records of it that come after its exit record. It no longer counts
 * in its process's threads. */
void sonde__tasks_thread_remove(struct rec_tasks *ts, pid_t tid, uint64_t exit_ns);
/* What thread tid of pid left when it exited, if it is kept and t (the thread table's
 * entry for tid now, or NULL) is still that task: t was created by a record that came
 * after the exit (since 0), not by a fork or a /proc scan of a new task with that tid
 * (since after the exit), and the task's last switch-out has not come (dead). NULL
 * otherwise. */
struct rec_gone_name *sonde__tasks_gone(struct rec_tasks *ts, const struct rec_thread *t, pid_t tid,
					pid_t pid);
/* The name a sample of tid of pid is written with: t's name (t->pid is set to pid, its
 * name dropped, when the tid was another process's), else /proc's, else the one it had
 * when it exited, else its process's (the main thread's, live or exited: a thread is
 * named as its creator until it renames itself) unless that is the main thread's bare id,
 * else the tid in decimal. Into t->comm. */
void sonde__tasks_name(struct rec_tasks *ts, struct rec_thread *t, pid_t pid);

#endif
