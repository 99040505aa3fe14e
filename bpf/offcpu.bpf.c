// SPDX-License-Identifier: GPL-2.0
/* Off-CPU waits tracked in the kernel (docs/record.md, "Off-CPU", the BPF backend).
 *
 * sched_switch, in the context of the thread leaving the CPU (prev), notes its switch-out
 * time and its state when it is recorded (and, for an uninterruptible wait, the innermost
 * kernel frames) in its task's storage. The same hit is the switch-in of next: its wait is
 * measured there. A wait shorter than min_ns is only added to next's totals in its
 * storage, which go into the ring buffer at its exit (a tid the kernel gives to another thread
 * afterwards has totals of its own) and, for the threads still alive, to the shorts map by a
 * task iterator at the end, when user space reads them. A longer one gets its kernel stack
 * there, read from next (off the CPU since, its stack is the one it left with), and needs
 * next's user registers and the used part of its user stack, which only next's own context can
 * read (bpf_probe_read_user reads current's memory, and at sched_switch current is still prev).
 * The wait is marked for capture, and read at the first traceable point of next's own context
 * on its way back to user space, where its user registers (saved on entry to the kernel,
 * task_pt_regs) and its user stack are still those it left with:
 *  - a thread that registered a restartable sequence (glibc's threads do), on a kernel
 *    that updates it after every switch-out (Linux 4.18 to 6.18, rseq_registered):
 *    rseq_update, where the kernel updates the area on its way back to user space, or
 *    x86_fpu_regs_activated (below), whichever comes first;
 *  - another, blocked in a system call (nearly every sleep, pipe, futex or I/O wait): the
 *    call's exit (sys_exit). That hook slows every system call of the machine (the kernel
 *    takes the slow path of each once a program is on it), so it is attached only once
 *    such a thread blocks in one (want_sys_exit): until it is (sys_exit_on), the user state
 *    of these is read at their switch-out, while they are current, and does not change
 *    until the call returns;
 *  - anywhere else (preempted in user mode, or on its way back from a call, or in a fault):
 *    x86_fpu_regs_activated, where the kernel loads its FPU registers before it returns to
 *    user space, which it must whenever another user thread ran on that CPU meanwhile.
 * Should it leave the CPU again before that point, the wait is written at that switch-out:
 * with its user state when it was in a system call (it still is) or has a restartable
 * sequence (rseq_update would have come on any way back), else with the one read at the
 * switch-out that began the wait (it may have gone back to user space with its FPU
 * registers still loaded, only kernel threads or none having run meanwhile, and run user
 * code since): a switch-out not in a system call of a thread without a restartable
 * sequence reads its user state there, while it is current, into the snaps map. Kernel
 * threads' waits are written at their switch-in. Hooks in
 * the switch itself (finish_task_switch) or on schedule()'s return would see next's
 * context in every case but need kprobes or fentry, which kernels may not offer
 * (CONFIG_KPROBES off, trampolines refused); tracepoints are always there.
 *
 * A thread that leaves the CPU on its way out of the kernel's exit, after it released its
 * memory (the last thread's teardown of the address space, its files, its namespaces), has
 * no user state to read: its wait is marked exiting there and written at its switch-in, as
 * a kernel thread's, for user space to stand an [exiting] frame in for its user stack.
 *
 * sched_waking, in the waker's context, gives the wakeup time and the waker; the wait's
 * runnable part (wakeup to switch-in) follows. sched_process_exit writes a thread's open
 * wait; sched_process_fork adds the children of recorded processes to the targets, and
 * sched_process_exit removes a process with its last thread.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "offcpu.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool all_tasks;	    /* -a without filters: every process but self_pid */
const volatile __u32 self_pid;	    /* the recorder's own process: never recorded */
const volatile __u64 min_ns = 1000000;
const volatile __u32 copy_bytes = SONDE_BPF_STACK_MAX;
const volatile bool kernel_stacks;  /* capture the switch-out's kernel stack */
const volatile bool follow;	    /* children of recorded processes are recorded */
const volatile __u64 wake_bytes;    /* wake user space once this much is queued */
const volatile bool keep_switches;  /* every switch of every CPU into the switches ring */
const volatile __u64 switch_wake_bytes;
/* -a: nothing is tracked until the recording is enabled (armed by user space), as the perf
 * events see nothing before: a wait in progress then is in neither backend's recording,
 * and each CPU's switches start with the recording's window */
const volatile bool gated;
bool armed;
/* A recorded thread without a restartable sequence blocked in a system call: user space
 * attaches sys_exit, then sets sys_exit_on. */
bool want_sys_exit;
bool sys_exit_on;

/* A recorded thread's state, in its task's local storage (no map update or delete per
 * switch, and freed with the task): its open wait, and its short waits' totals not yet
 * written (into the ring buffer at its exit, into the shorts map at the end by the task
 * iterator). */
struct tstate {
	struct sonde_bpf_start s; /* the wait open since s.out_ns, when open */
	__u32 open;
	__u32 short_pid;
	__u64 short_count, short_ns, short_runnable_ns;
};
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate);
} tasks SEC(".maps");

/* The waits still open at the end (key: tid), copied there by the task iterator for user
 * space, which cannot read the tasks' storage by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct sonde_bpf_start);
} open SEC(".maps");

/* Recorded processes (key: tgid), unless all_tasks: 2, or 1 for a process recorded from
 * its exec on (a launched program still in its launcher); until its last thread exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

/* Threads recorded alone (-t, key: tid), whatever their process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} threads SEC(".maps");

/* The short waits' totals of the threads alive at the end (key: tid), added from their
 * task storage by the iterator, and of the waits open then by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct sonde_bpf_short);
} shorts SEC(".maps");

/* Long waits the waits ring had no room for, per thread (key: tid), until user space
 * takes them out at its next drain. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct sonde_bpf_lost);
} lost SEC(".maps");

/* An exiting thread's short totals the waits ring had no room for (key: tid), until user
 * space takes them out at its next drain and writes them as the ring's record would have
 * been: a later thread given the tid before that drain has its totals counted dropped.
 * Preallocated: an element allocated as it comes can fail where the ring just did (a
 * burst of exits empties the per-CPU cache faster than it is refilled). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct sonde_bpf_exit_shorts);
} exit_lost SEC(".maps");

/* The kernel stacks of the long waits ended but not written yet (key: tid): read at the
 * switch-in, from the thread's kernel stack as it left it (it did not run since), so that
 * only the waits at or above min_ns pay for a stack walk. Allocated as they come. */
struct kframes {
	__u64 ips[SONDE_BPF_KSTACK_MAX];
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct kframes);
} kframes SEC(".maps");

/* Long waits and exiting threads' short totals (user space sizes it: RING_WAITS_*). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} waits SEC(".maps");

/* Each CPU's switches, in batches (keep_switches; a page otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} switches SEC(".maps");

/* The batch being filled, per CPU; user space reads what is left of it at the end. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sonde_bpf_switches);
} batch SEC(".maps");

/* The record under construction, one per CPU (too large for the BPF stack or a per-CPU
 * map's value): user space sets max_entries to the number of possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sonde_bpf_wait);
} scratch SEC(".maps");

/* User registers and stacks read at switch-outs not in a system call (struct
 * sonde_bpf_start.snap), for the waits whose capture point never comes: one entry per
 * thread, overwritten at its next such switch-out, the least recently used given to
 * another thread when the map is full. User space sizes it by CPU count. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 128);
	__type(key, __u32);
	__type(value, struct sonde_bpf_snap);
} snaps SEC(".maps");

/* task_struct.flags (include/linux/sched.h): macros, which vmlinux.h does not carry. */
#define PF_EXITING 0x00000004
#define PF_KTHREAD 0x00200000

/* Innermost kernel frames of the current thread's stack that are the BPF program's own
 * call (the program, then bpf_trace_run*). A thread off the CPU has none: its stack
 * starts at __schedule, as the perf backend's does. */
#define KSTACK_SKIP 3

/* How a long wait's user state is read (struct sonde_bpf_start.capture): at the exit of the
 * system call it is in, or on the way back to user space (rseq_update, FPU registers). */
enum { CAPTURE_SYSCALL = 1, CAPTURE_RETURN = 2 };

/* Per CPU: the tid marked for capture by its last switch (0: none), and the tid its last
 * traced switch put on it and when: a capture point of another thread follows a switch the
 * kernel did not trace, and only then is that thread's storage looked up. */
struct cpu_state {
	__u32 pending, cur;
	__u64 last_ns; /* 0: no switch since the recording began */
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SONDE_BPF_NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 what, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &what);

	if (v)
		*v += n;
}

static __always_inline bool tracked(__u32 tgid, __u32 tid)
{
	if (!tgid || tgid == self_pid)
		return false;
	if (all_tasks)
		return true;
	__u8 *v = bpf_map_lookup_elem(&targets, &tgid);
	return (v && *v == 2) || bpf_map_lookup_elem(&threads, &tid);
}

/* The raw task state at a switch-out as the recorder's states (a preemption leaves the
 * thread runnable whatever its state says). */
static __always_inline __u32 state_of(bool preempt, unsigned int st)
{
	if (preempt || !(st & 0xff))
		return SONDE_BPF_RUNNABLE;
	if (st & 1)
		return SONDE_BPF_SLEEPING;
	if ((st & 2) && !(st & 0x400)) /* TASK_IDLE is uninterruptible but not "D" */
		return SONDE_BPF_BLOCKED;
	return SONDE_BPF_OTHER;
}

/* The flags of a write to ring: user space is woken once wake_at bytes are queued. */
static __always_inline __u64 ring_flags(void *ring, __u64 wake_at)
{
	return bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= wake_at ? BPF_RB_FORCE_WAKEUP
								       : BPF_RB_NO_WAKEUP;
}

/* A write went into ring: what it holds now, the most it held, into the counter `high`
 * (a write the ring had no room for is counted lost instead). Read after the write, not
 * taken as what it held before plus the record: user space may have read records in
 * between, and that sum once said 4099 KiB held of a 4096 KiB ring. */
static __always_inline void note_held(void *ring, __u32 high)
{
	__u64 held = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
	__u64 *v = bpf_map_lookup_elem(&stats, &high);

	if (v && held > *v)
		*v = held;
}

/* Adds a switch to this CPU's batch, and writes the batch when it is full. sched_switch
 * runs with interrupts off, a capture point (unseen_capture) with preemption off: nothing
 * else touches the CPU's batch meanwhile. */
static __always_inline void keep_switch(__u64 now, __u32 prev, __u32 next, __u32 state)
{
	__u32 zero = 0;
	struct sonde_bpf_switches *b = bpf_map_lookup_elem(&batch, &zero);

	if (!b)
		return;
	__u32 n = b->n & (SONDE_BPF_SWITCH_BATCH - 1);
	b->v[n].time_ns = now;
	b->v[n].prev = prev | state << SONDE_BPF_STATE_SHIFT;
	b->v[n].next_tid = next;
	b->n = ++n;
	if (n < SONDE_BPF_SWITCH_BATCH)
		return;
	b->cpu = bpf_get_smp_processor_id();
	__u64 flags = ring_flags(&switches, switch_wake_bytes);
	if (bpf_ringbuf_output(&switches, b, sizeof(*b), flags))
		count(SONDE_BPF_SWITCHES_LOST, 1);
	else
		note_held(&switches, SONDE_BPF_SWITCHES_HIGH);
	b->seq++;
	b->n = 0;
}

/* A short wait of t's thread, ended at now: into its totals. Only the thread's own switch-in
 * and exit, and the iterator once the programs are detached, touch them: no atomics. */
static __always_inline void add_short(struct tstate *t, __u64 wait, __u64 now)
{
	struct sonde_bpf_start *s = &t->s;
	__u64 runnable = s->state == SONDE_BPF_RUNNABLE	   ? wait
			 : s->wake_ns && s->wake_ns <= now ? now - s->wake_ns
							   : 0;

	t->short_pid = s->pid;
	t->short_count++;
	t->short_ns += wait;
	t->short_runnable_ns += runnable;
}

/* Keeps an exiting thread's short totals e, which the ring had no room for, in the
 * exit_lost map until user space takes them: added to those the same thread left there
 * already (its exit, then its last switch-out, each write some), else a new entry. The
 * update of an entry user space took meanwhile fails, and the totals go in anew. False
 * when there is no room, or the tid is another process's there (given again before the
 * drain). */
static __always_inline bool hold_exit_shorts(const struct sonde_bpf_exit_shorts *e)
{
	__u32 tid = e->tid;
	struct sonde_bpf_exit_shorts *had = bpf_map_lookup_elem(&exit_lost, &tid);

	if (had && had->v.pid == e->v.pid) {
		struct sonde_bpf_exit_shorts m = *had;
		m.time_ns = e->time_ns;
		m.v.count += e->v.count;
		m.v.ns += e->v.ns;
		m.v.runnable_ns += e->v.runnable_ns;
		if (!bpf_map_update_elem(&exit_lost, &tid, &m, BPF_EXIST))
			return true;
	}
	return !bpf_map_update_elem(&exit_lost, &tid, e, BPF_NOEXIST);
}

/* Writes t's short totals into the waits ring as its thread tid exits, at now: a later
 * thread given its tid has totals of its own (struct sonde_bpf_exit_shorts). */
static __always_inline void exit_shorts(struct tstate *t, __u32 tid, __u64 now)
{
	if (!t->short_count)
		return;
	struct sonde_bpf_exit_shorts e = {.kind = SONDE_BPF_REC_SHORTS,
					  .tid = tid,
					  .time_ns = now,
					  .v = {.pid = t->short_pid,
						.count = t->short_count,
						.ns = t->short_ns,
						.runnable_ns = t->short_runnable_ns}};
	__u64 flags = ring_flags(&waits, wake_bytes);
	if (!bpf_ringbuf_output(&waits, &e, sizeof(e), flags)) {
		note_held(&waits, SONDE_BPF_WAITS_HIGH);
	} else if (hold_exit_shorts(&e)) {
		count(SONDE_BPF_SHORT_HELD, 1);
	} else {
		count(SONDE_BPF_SHORT_FULL, t->short_count);
		count(SONDE_BPF_SHORT_LOST_NS, t->short_ns);
	}
	t->short_count = t->short_ns = t->short_runnable_ns = 0;
}

/* Adds t's short totals to tid's in the shorts map (at the end, for the live threads). */
static __always_inline void flush_shorts(struct tstate *t, __u32 tid)
{
	if (!t->short_count)
		return;
	struct sonde_bpf_short *v = bpf_map_lookup_elem(&shorts, &tid);
	if (!v) {
		struct sonde_bpf_short n = {.pid = t->short_pid};
		if (bpf_map_update_elem(&shorts, &tid, &n, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&shorts, &tid)) {
			count(SONDE_BPF_SHORT_FULL, t->short_count);
			count(SONDE_BPF_SHORT_LOST_NS, t->short_ns);
			t->short_count = t->short_ns = t->short_runnable_ns = 0;
			return;
		}
		v = bpf_map_lookup_elem(&shorts, &tid);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->count, t->short_count);
	__sync_fetch_and_add(&v->ns, t->short_ns);
	__sync_fetch_and_add(&v->runnable_ns, t->short_runnable_ns);
	t->short_count = t->short_ns = t->short_runnable_ns = 0;
}

/* Up to `len` bytes of the user stack from sp into w: the whole copy when it is mapped,
 * else halves of it until a part is (a thread stack's top is not known here). */
static __always_inline __u32 read_stack(__u8 *dst, __u64 sp, __u32 len)
{
#pragma unroll
	for (int i = 0; i < 6; i++) {
		if (len > SONDE_BPF_STACK_MAX)
			len = SONDE_BPF_STACK_MAX;
		if (!len)
			return 0;
		if (!bpf_probe_read_user(dst, len, (const void *)sp))
			return len;
		len /= 2;
	}
	return 0;
}

/* Reads the kernel stack of task, off the CPU, into the kframes map as tid's, for its wait
 * s: the kernel leaves the scheduler's own frames out (s->sched has them). */
static __always_inline void take_kframes(struct sonde_bpf_start *s, __u32 tid,
					 struct task_struct *task)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sonde_bpf_wait *w = bpf_map_lookup_elem(&scratch, &cpu);

	s->knr = 0;
	if (!kernel_stacks || !w)
		return;
	long n = bpf_get_task_stack(task, w->kips, sizeof(w->kips), 0);
	if (n > 0 && !bpf_map_update_elem(&kframes, &tid, w->kips, BPF_ANY))
		s->knr = (__u32)n / sizeof(__u64);
}

/* bpf_find_vma's callback: the end of the mapping holding a stack pointer. */
static long stack_end(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	*(__u64 *)data = vma->vm_end;
	return 0;
}

/* task's user registers (saved at its entry to the kernel) into regs, and the used part
 * of its user stack into stack, when task is current: the stack bytes read, or -1 when it
 * has no user state. */
static __always_inline long read_user(struct task_struct *task, __u32 tid, __u32 pid, __u64 *regs,
				      __u8 *stack)
{
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);
	struct mm_struct *mm = task->mm;

	if (!u || !mm || (u->cs & 3) != 3)
		return -1;
	regs[0] = u->ax;
	regs[1] = u->dx;
	regs[2] = u->cx;
	regs[3] = u->bx;
	regs[4] = u->si;
	regs[5] = u->di;
	regs[6] = u->bp;
	regs[7] = u->sp;
	regs[8] = u->r8;
	regs[9] = u->r9;
	regs[10] = u->r10;
	regs[11] = u->r11;
	regs[12] = u->r12;
	regs[13] = u->r13;
	regs[14] = u->r14;
	regs[15] = u->r15;
	regs[16] = u->ip;
	__u64 sp = u->sp, len = copy_bytes, top = 0;
	/* the main thread's stack ends above its environment strings; another's, at the end
	 * of the mapping it is in (glibc's thread stacks are mappings of their own, guarded
	 * below): only what can be stack is copied */
	if (tid == pid)
		top = mm->env_end;
	else
		bpf_find_vma(task, sp, stack_end, &top, 0);
	if (top > sp && top - sp < len)
		len = top - sp;
	return read_stack(stack, sp, (__u32)len);
}

/* Reads the user state of task (current, leaving the CPU not in a system call) into the
 * snaps map as tid's: the value of its wait's snap, 0 when not read. */
static __always_inline __u32 snapshot(struct task_struct *task, __u32 tid, __u32 pid)
{
	struct sonde_bpf_snap *sn = bpf_map_lookup_elem(&snaps, &tid);

	if (!sn) {
		__u32 cpu = bpf_get_smp_processor_id();
		struct sonde_bpf_wait *w = bpf_map_lookup_elem(&scratch, &cpu);
		/* a new entry's value (the scratch record's end has its layout): any bytes,
		 * overwritten below */
		if (!w || bpf_map_update_elem(&snaps, &tid, w->regs, BPF_ANY))
			return 0;
		sn = bpf_map_lookup_elem(&snaps, &tid);
		if (!sn)
			return 0;
	}
	long n = read_user(task, tid, pid, sn->regs, sn->stack);
	return n >= 0 ? SONDE_BPF_SNAP | (__u32)n : 0;
}

/* The long wait w, which the ring had no room for, joins its thread's lost span. */
static __always_inline void note_lost(const struct sonde_bpf_wait *w)
{
	__u32 tid = w->tid;
	struct sonde_bpf_lost *l = bpf_map_lookup_elem(&lost, &tid);

	if (l) {
		/* the thread's own waits, written in its own context: one at a time */
		if (w->out_ns < l->from_ns)
			l->from_ns = w->out_ns;
		if (w->in_ns > l->to_ns)
			l->to_ns = w->in_ns;
		l->n++;
		return;
	}
	struct sonde_bpf_lost v = {.pid = w->pid, .n = 1, .from_ns = w->out_ns, .to_ns = w->in_ns};
	if (bpf_map_update_elem(&lost, &tid, &v, BPF_NOEXIST))
		count(SONDE_BPF_LOST_UNSPANNED, 1);
}

/* Writes the long wait s of thread tid to the ring buffer, with its user registers and
 * stack when `user` (task is current, back from its wait and not yet in user space). */
static __always_inline void emit(struct sonde_bpf_start *s, __u32 tid, struct task_struct *task,
				 bool user, __u32 unknown)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sonde_bpf_wait *w = bpf_map_lookup_elem(&scratch, &cpu);

	if (!w)
		return;
	w->kind = SONDE_BPF_REC_WAIT;
	w->out_ns = s->out_ns;
	w->in_ns = s->in_ns;
	w->wake_ns = s->wake_ns;
	w->pid = s->pid;
	w->tid = tid;
	w->waker = s->waker;
	w->state = s->state;
	w->cpu = s->cpu;
	w->nsched = s->nsched < SONDE_BPF_SCHED_FRAMES ? s->nsched : SONDE_BPF_SCHED_FRAMES;
	__builtin_memcpy(w->sched, s->sched, sizeof(w->sched));
	w->knr = 0;
	if (s->knr) {
		struct kframes *k = bpf_map_lookup_elem(&kframes, &tid);
		if (k && !bpf_probe_read_kernel(w->kips, sizeof(w->kips), k->ips))
			w->knr = s->knr < SONDE_BPF_KSTACK_MAX ? s->knr : SONDE_BPF_KSTACK_MAX;
		bpf_map_delete_elem(&kframes, &tid);
		s->knr = 0;
	}
	w->stack_len = 0;
	w->regs_ok = 0;
	w->unknown = unknown;
	w->exiting = s->exiting;

	if (user) {
		long n = read_user(task, tid, w->pid, w->regs, w->stack);
		if (n >= 0) {
			w->regs_ok = 1;
			w->stack_len = (__u32)n;
		}
	} else if (s->snap) {
		/* its capture point never came: the user state read at its switch-out */
		struct sonde_bpf_snap *sn = bpf_map_lookup_elem(&snaps, &tid);
		__u32 len = s->snap & ~SONDE_BPF_SNAP;
		if (sn) {
			__builtin_memcpy(w->regs, sn->regs, sizeof(w->regs));
			w->regs_ok = 1;
			if (len > SONDE_BPF_STACK_MAX)
				len = SONDE_BPF_STACK_MAX;
			if (len && !bpf_probe_read_kernel(w->stack, len, sn->stack))
				w->stack_len = len;
		}
	}
	s->snap = 0;
	__u64 size = __builtin_offsetof(struct sonde_bpf_wait, stack) + w->stack_len;
	if (size > sizeof(*w))
		return;
	__u64 flags = ring_flags(&waits, wake_bytes);
	/* once one of its waits is lost, a thread's next ones join the span until user space
	 * takes it (a smaller record may fit where a larger did not): its waits written and
	 * its unknown span never overlap */
	if (bpf_map_lookup_elem(&lost, &tid) || bpf_ringbuf_output(&waits, w, size, flags)) {
		count(SONDE_BPF_LOST, 1);
		note_lost(w);
	} else {
		count(SONDE_BPF_LONG, 1);
		note_held(&waits, SONDE_BPF_WAITS_HIGH);
	}
}

/* A thread leaves the CPU (or exits) at `now` with a wait still open: the kernel did not
 * trace its switch-in (seen: a guest kernel that never traces the switches of some tasks,
 * when they leave the CPU to a recorded thread). It ran, for a time not known, between
 * out_ns and now: the whole span is written as unknown, never dropped, with the thread's
 * user state where it is now (task is current), the stack the span ends in. */
static __always_inline void unseen_in(void *ctx, struct sonde_bpf_start *s, __u32 tid,
				      struct task_struct *task, __u64 now)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sonde_bpf_wait *w = bpf_map_lookup_elem(&scratch, &cpu);

	count(SONDE_BPF_UNSEEN_IN, 1);
	s->in_ns = now;
	s->knr = s->nsched = 0;
	if (kernel_stacks && w) {
		long n = bpf_get_stack(ctx, w->kips, sizeof(w->kips), KSTACK_SKIP);
		if (n > 0 && !bpf_map_update_elem(&kframes, &tid, w->kips, BPF_ANY))
			s->knr = (__u32)n / sizeof(__u64);
	}
	emit(s, tid, task, true, SONDE_BPF_UNSEEN_UNKNOWN);
}

static __always_inline bool rseq_registered(struct task_struct *task);

/* Writes the wait still open in s when thread tid (task, current) leaves the CPU or
 * exits: ended, with its capture point not come, or its switch-in never traced (unknown).
 * A thread whose capture point did not come has not been back in user space since its
 * switch-in when it was in a system call (it still is), or when it registered a
 * restartable sequence (the rseq_update of its way back would have come first: a thread
 * preempted again on its way back, as a loaded CPU does): its user state is still the
 * wait's, read now. Any other may have gone back with its FPU registers still loaded:
 * written with the user state read at its switch-out, if any. */
static __always_inline void write_open(void *ctx, struct sonde_bpf_start *s, __u32 tid,
				       struct task_struct *task, __u64 now)
{
	if (s->capture)
		emit(s, tid, task, s->capture == CAPTURE_SYSCALL || rseq_registered(task), 0);
	else
		unseen_in(ctx, s, tid, task, now);
}

/* Whether task is blocked in a system call: entered through one (orig_ax holds its number)
 * and not returned (ax still holds the -ENOSYS the entry put there; a fault's orig_ax is
 * its error code, but its ax is the user's). */
static __always_inline bool in_syscall(struct task_struct *task)
{
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);

	return u && (long)u->orig_ax >= 0 && u->ax == (unsigned long)-38;
}

/* Whether task is a user thread on its way out (PF_EXITING, set by do_exit before anything
 * else) that has released its memory: exit_mm clears task->mm before it drops its
 * reference, so the last thread's teardown of the address space (exit_aio, exit_mmap), and
 * everything do_exit does after (files, namespaces, the parent's notification), run
 * without one. Exact: such a thread has no user state and never will again; a kernel
 * thread, which has no mm either, is PF_KTHREAD, and a thread exiting with its mm still
 * there (dumping core, in exit_signals) has its user state, read as any thread's. */
static __always_inline bool released(struct task_struct *task)
{
	return !task->mm && (task->flags & (PF_EXITING | PF_KTHREAD)) == PF_EXITING;
}

/* task_struct's fields of the restartable-sequence code from Linux 4.18 to 6.18: the area
 * registered (a pointer), and the events since its last update. Later kernels keep them
 * otherwise, and update the area only when something changed. */
struct task_struct___rseq_ptr {
	void *rseq;
	unsigned long rseq_event_mask;
} __attribute__((preserve_access_index));

/* Whether the kernel updates task's restartable-sequence area (rseq_update) on its way back
 * to user space after every switch-out: on kernels with rseq_event_mask every switch-out of
 * a thread that registered one (glibc's threads do) asks for the update (rseq_preempt),
 * which the way back then makes, traced. Elsewhere taken as not: such a thread's waits are
 * captured as those of a thread without one. */
static __always_inline bool rseq_registered(struct task_struct *task)
{
	struct task_struct___rseq_ptr *t = (void *)task;

	if (bpf_core_field_exists(t->rseq_event_mask) && bpf_core_field_exists(t->rseq))
		return BPF_CORE_READ(t, rseq) != NULL;
	return false;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sonde_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 ptid = prev->pid, ptgid = prev->tgid, ntid = next->pid;

	if (gated && !armed)
		return 0;
	__u32 zero = 0;
	struct cpu_state *c = bpf_map_lookup_elem(&pending, &zero);
	if (c) {
		c->cur = ntid;
		c->last_ns = now;
	}
	if (keep_switches)
		keep_switch(now, ptid, ntid,
			    (prev_state & 0x80) ? SONDE_BPF_EXITED : state_of(preempt, prev_state));
	if (ptid && (prev_state & 0x80)) {
		/* an exiting thread's last switch-out (TASK_DEAD) opens no wait; one it was
		 * preempted in on its way out (after sched_process_exit) ended at its switch-in
		 * and waits for a capture point that never comes: written now, and the short
		 * waits since its exit with it, its storage going with it */
		struct tstate *o = bpf_task_storage_get(&tasks, prev, 0, 0);
		if (o) {
			if (o->open)
				write_open(ctx, &o->s, ptid, prev, now);
			o->open = 0;
			exit_shorts(o, ptid, now);
		}
	} else if (ptid && (tracked(ptgid, ptid) ||
			    ((prev->flags & PF_EXITING) && bpf_task_storage_get(&tasks, prev, 0, 0)))) {
		struct tstate *o =
			bpf_task_storage_get(&tasks, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!o) {
			count(SONDE_BPF_START_FULL, 1);
			goto in;
		}
		if (o->open)
			write_open(ctx, &o->s, ptid, prev, now);
		struct sonde_bpf_start *sp = &o->s;
		__builtin_memset(sp, 0, sizeof(*sp));
		sp->out_ns = now;
		sp->pid = ptgid;
		sp->state = state_of(preempt, prev_state);
		sp->cpu = bpf_get_smp_processor_id();
		sp->exiting = released(prev);
		/* an uninterruptible wait's scheduler frames say what it waits for (mutex_lock,
		 * io_schedule, wait_for_completion): read here, as the stack read at its
		 * switch-in has none; reading them at every switch-out would cost as much as
		 * the whole stack */
		if (kernel_stacks && sp->state == SONDE_BPF_BLOCKED) {
			long n = bpf_get_stack(ctx, sp->sched, sizeof(sp->sched), KSTACK_SKIP);
			sp->nsched = n > 0 ? (__u32)n / sizeof(__u64) : 0;
		}
		/* without a restartable sequence, no rseq_update comes for the wait. Not in a
		 * system call (preempted in user mode or on its way back to it, or in a fault),
		 * no sys_exit comes either; when only kernel threads or the idle task run on
		 * this CPU before it returns to user space, its FPU registers are still loaded
		 * and x86_fpu_regs_activated does not come: its user state, unchanged until it
		 * runs again, is read now, while it is current, for that case. In a system call
		 * while sys_exit is not attached, it is read now too, and sys_exit asked for. */
		if (prev->mm && !rseq_registered(prev)) {
			bool sys = in_syscall(prev);
			if (!sys || !sys_exit_on)
				sp->snap = snapshot(prev, ptid, ptgid);
			if (sys && !sys_exit_on && !want_sys_exit)
				want_sys_exit = true;
		}
		o->open = 1;
		count(SONDE_BPF_SWITCHES, 1);
	}
in:
	if (!ntid)
		return 0;
	struct tstate *t = bpf_task_storage_get(&tasks, next, 0, 0);
	if (!t || !t->open)
		return 0;
	struct sonde_bpf_start *s = &t->s;
	__u64 wait = now > s->out_ns ? now - s->out_ns : 0;
	if (wait < min_ns) {
		add_short(t, wait, now);
		t->open = 0;
		return 0;
	}
	s->in_ns = now;
	take_kframes(s, ntid, next);
	if (!next->mm) {
		/* a kernel thread, or a thread exiting with its memory released (s->exiting):
		 * no user state to wait for */
		emit(s, ntid, next, false, 0);
		t->open = 0;
		return 0;
	}
	if (rseq_registered(next) || !in_syscall(next)) {
		s->capture = CAPTURE_RETURN;
	} else if (s->snap || !sys_exit_on) {
		/* its user state read at its switch-out, in the call it is still in (none when
		 * that read failed, sys_exit not attached: no capture point would come) */
		emit(s, ntid, next, false, 0);
		t->open = 0;
		return 0;
	} else {
		s->capture = CAPTURE_SYSCALL;
	}
	if (c)
		c->pending = ntid;
	return 0;
}

static __always_inline int waking(struct task_struct *p)
{
	struct tstate *t = bpf_task_storage_get(&tasks, p, 0, 0);

	if (!t || !t->open || t->s.wake_ns)
		return 0;
	t->s.wake_ns = bpf_ktime_get_ns();
	t->s.waker = (__u32)bpf_get_current_pid_tgid();
	count(SONDE_BPF_WAKEUPS, 1);
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sonde_waking, struct task_struct *p)
{
	return waking(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sonde_wake_new, struct task_struct *p)
{
	return waking(p);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sonde_exit, struct task_struct *p)
{
	__u32 tid = p->pid, tgid = p->tgid;
	/* a recorded thread keeps its storage to its last switch-out, for the waits it is
	 * preempted in on its way out (sonde_switch: exiting and holding one) */
	struct tstate *t = bpf_task_storage_get(&tasks, p, 0,
						tracked(tgid, tid) ? BPF_LOCAL_STORAGE_GET_F_CREATE
								   : 0);

	/* the process's last thread (do_exit counts it out before this tracepoint): no
	 * target any more, before its pid can name another process, which the entry would
	 * have recorded (and a launched build's processes would fill the map) */
	if (!p->signal->live.counter)
		bpf_map_delete_elem(&targets, &tgid);
	if (!t)
		return 0;
	/* a wait that ended but whose capture point never came (exiting, the thread goes
	 * back to user space no more): written now, p being current */
	__u64 now = bpf_ktime_get_ns();
	if (t->open)
		write_open(ctx, &t->s, tid, p, now);
	t->open = 0;
	exit_shorts(t, tid, now);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sonde_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 *v, two = 2;

	if (!follow || all_tasks || ptgid == ctgid)
		return 0;
	v = bpf_map_lookup_elem(&targets, &ptgid);
	if (v && *v == 2)
		bpf_map_update_elem(&targets, &ctgid, &two, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sonde_exec, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	__u8 *v = bpf_map_lookup_elem(&targets, &tgid);

	if (v && *v == 1)
		*v = 2;
	return 0;
}

/* The current thread tid (task) runs on c's CPU with its wait t still open and not marked
 * for capture: its switch-in was not traced (the switches from the idle task, or from
 * some kernel threads, on some guest kernels), and this is its first point on the way back
 * to user space, where its user state is still the wait's. The wait ended at its wakeup
 * when one was seen while the CPU was idle from before it (an idle CPU runs the thread it
 * wakes at once), as the perf backend ends such a wait, else somewhere before now (a task
 * the CPU ran after the wakeup, or across it, kept the thread off it): written unknown up
 * to now. Either way with the user stack it waited in, where before its next switch-out
 * would have closed it with the stack it was in then; a known wait without kernel frames
 * thus ends at its wakeup. The CPU's switches get the one not traced where the wait ends,
 * so that they say what the wait says (user space would put it at the thread's next
 * switch-out, its whole run in the wait). */
static __always_inline void unseen_capture(struct cpu_state *c, struct tstate *t, __u32 tid,
					   struct task_struct *task)
{
	struct sonde_bpf_start *s = &t->s;
	__u64 now = bpf_ktime_get_ns();
	bool woke = s->wake_ns && s->wake_ns >= s->out_ns && s->wake_ns <= now && !c->cur &&
		    c->last_ns < s->wake_ns;

	count(SONDE_BPF_UNSEEN_IN, 1);
	s->in_ns = woke ? s->wake_ns : now;
	/* after the CPU's last traced switch, so its switches stay in time order */
	if (keep_switches && c->last_ns && c->last_ns <= s->in_ns) {
		keep_switch(s->in_ns, c->cur, tid, SONDE_BPF_INFERRED);
		c->cur = tid;
		c->last_ns = s->in_ns;
	}
	s->knr = 0;
	if (woke && s->in_ns - s->out_ns < min_ns)
		add_short(t, s->in_ns - s->out_ns, s->in_ns);
	else
		emit(s, tid, task, true, woke ? SONDE_BPF_UNSEEN_WOKEN : SONDE_BPF_UNSEEN_UNKNOWN);
	t->open = 0;
}

/* The capture of a long wait of the current thread, when the current thread is the one
 * the last switch of this CPU marked (how: CAPTURE_*), or of a wait whose switch-in was not
 * traced. */
static __always_inline int capture(__u32 how)
{
	__u32 zero = 0;
	struct cpu_state *c = bpf_map_lookup_elem(&pending, &zero);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!c || (c->pending != tid && c->cur == tid))
		return 0; /* nothing to capture, its switch-in traced */
	struct task_struct *task = bpf_get_current_task_btf();
	struct tstate *t = bpf_task_storage_get(&tasks, task, 0, 0);
	if (!t || !t->open)
		return 0;
	if (!t->s.capture) {
		unseen_capture(c, t, tid, task);
		return 0;
	}
	if (c->pending != tid || t->s.capture != how)
		return 0;
	c->pending = 0;
	emit(&t->s, tid, task, true, 0);
	t->open = 0;
	return 0;
}

/* A system call returns in the thread switched in: the one its wait was in. */
SEC("tp_btf/sys_exit")
int BPF_PROG(sonde_sys_exit)
{
	return capture(CAPTURE_SYSCALL);
}

/* The thread switched in loads its FPU registers on its way back to user space. */
SEC("tp_btf/x86_fpu_regs_activated")
int BPF_PROG(sonde_fpu)
{
	return capture(CAPTURE_RETURN);
}

/* The thread switched in updates its restartable-sequence area on its way back to user
 * space, as it does after every switch-out when it registered one (glibc does). */
SEC("tp_btf/rseq_update")
int BPF_PROG(sonde_rseq)
{
	return capture(CAPTURE_RETURN);
}

/* At the end, the programs detached: each thread's short totals into the shorts map, and
 * its wait still open into the open map, with the kernel stack of one not ended (the
 * thread still off the CPU) into the kframes map as those of ended waits. */
SEC("iter/task")
int sonde_open_waits(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task)
		return 0;
	struct tstate *t = bpf_task_storage_get(&tasks, task, 0, 0);
	if (!t)
		return 0;
	__u32 tid = task->pid;
	flush_shorts(t, tid);
	if (!t->open)
		return 0;
	if (!t->s.capture)
		take_kframes(&t->s, tid, task);
	bpf_map_update_elem(&open, &tid, &t->s, BPF_ANY);
	return 0;
}
