/* What the off-CPU BPF programs (offcpu.bpf.c) and the recorder (src/record/offcpu_bpf.c)
 * share: the records of the ring buffer and the maps' keys and values. Included by both;
 * it uses only fixed-size types, which each side defines (vmlinux.h or stdint.h). */
#ifndef SONDE_BPF_OFFCPU_H
#define SONDE_BPF_OFFCPU_H

/* The largest user stack copy a long wait carries (a power of two: the programs mask the
 * copy's length with it for the verifier). */
#define SONDE_BPF_STACK_MAX 32768
/* Kernel frames a wait keeps (the kernel's default perf_event_max_stack). */
#define SONDE_BPF_KSTACK_MAX 127

/* Innermost kernel frames read at a switch-out: the scheduler's own (__schedule, schedule,
 * schedule_timeout, mutex_lock...), which the stack read at the switch-in from the thread
 * off the CPU leaves out, and the first frame of that stack. */
#define SONDE_BPF_SCHED_FRAMES 8

/* How a thread left the CPU, as the recorder's SONDE_OFFCPU_* states. */
enum { SONDE_BPF_RUNNABLE = 0, SONDE_BPF_SLEEPING = 1, SONDE_BPF_BLOCKED = 2, SONDE_BPF_OTHER = 3 };

/* User registers in DWARF order (src/unwind/unwind.h): rax rdx rcx rbx rsi rdi rbp rsp
 * r8..r15 rip. */
#define SONDE_BPF_NREGS 17

/* What a record of the waits ring is: its first field. */
enum { SONDE_BPF_REC_WAIT = 1, SONDE_BPF_REC_SHORTS = 2 };

/* One wait at or above the threshold, written to the ring buffer when its thread runs
 * again: stack_len bytes of its user stack (from regs[7], the stack pointer) follow. */
struct sonde_bpf_wait {
	__u32 kind; /* SONDE_BPF_REC_WAIT */
	/* 1: the thread had released its memory on its way out when the wait began (struct
	 * sonde_bpf_start.exiting): it has no user state, none is read */
	__u32 exiting;
	__u64 out_ns, in_ns, wake_ns; /* CLOCK_MONOTONIC; wake_ns 0 when no wakeup was seen */
	__u32 pid, tid, waker, state, cpu;
	__u32 knr; /* kernel frames in kips */
	__u32 stack_len, regs_ok;
	/* its switch-in was not seen (some kernels do not trace every switch): 0 it was,
	 * SONDE_BPF_UNSEEN_UNKNOWN in_ns is the thread's next switch-out, exit or first
	 * point on its way back to user space and the wait ended somewhere before,
	 * SONDE_BPF_UNSEEN_WOKEN in_ns is its wakeup (woken while the CPU was idle, which
	 * runs it at once) */
	__u32 unknown, nsched;
	/* the kernel stack it waited in, innermost first: its innermost frames at the
	 * switch-out (nsched), and the stack without the scheduler's frames (knr) */
	__u64 sched[SONDE_BPF_SCHED_FRAMES];
	__u64 kips[SONDE_BPF_KSTACK_MAX];
	__u64 regs[SONDE_BPF_NREGS];
	__u8 stack[SONDE_BPF_STACK_MAX];
};

enum { SONDE_BPF_UNSEEN_UNKNOWN = 1, SONDE_BPF_UNSEEN_WOKEN = 2 };

/* A thread off the CPU since out_ns: in its task's storage, and in the open map (key: tid)
 * for the waits still open at the end. */
struct sonde_bpf_start {
	__u64 out_ns, wake_ns, in_ns;
	__u32 pid, state, waker, cpu;
	__u32 knr;     /* kernel frames of the wait in the kframes map (key: tid), 0: none */
	__u32 capture; /* long: where its user state is read, 0 until the switch-in */
	__u32 nsched;
	/* not in a system call at the switch-out: its user state was read there into the
	 * snaps map (key: tid) in case no capture point comes (SONDE_BPF_SNAP | its stack
	 * bytes), 0: not read */
	__u32 snap;
	/* 1: it left the CPU on its way out (PF_EXITING) with its memory released (mm NULL),
	 * so the wait has no user state, ever */
	__u32 exiting, pad;
	__u64 sched[SONDE_BPF_SCHED_FRAMES]; /* innermost kernel frames at the switch-out */
};
#define SONDE_BPF_SNAP 0x80000000u

/* A thread's user registers and stack read at its switch-out: value of the snaps map
 * (key: tid). The same layout as the end of struct sonde_bpf_wait. */
struct sonde_bpf_snap {
	__u64 regs[SONDE_BPF_NREGS];
	__u8 stack[SONDE_BPF_STACK_MAX];
};

/* The long waits of a thread the waits ring had no room for: value of the lost map (key:
 * tid), from the first one's switch-out to the last one's switch-in. The recorder takes
 * each entry out at every drain and writes its span as the thread's unknown time (a lost
 * record's time is unknown, never dropped). */
struct sonde_bpf_lost {
	__u32 pid, n; /* n: the waits lost in the span */
	__u64 from_ns, to_ns;
};

/* Waits below the threshold, per thread: value of the shorts map (key: tid). */
struct sonde_bpf_short {
	__u32 pid, pad;
	__u64 count, ns;
	__u64 runnable_ns; /* of them, from the wakeup to the switch-in */
};

/* The short waits of an exiting thread not yet written, into the waits ring at its exit
 * (and at its last switch-out, for those of its way out): written by the recorder in
 * time order, under the task that had the tid then, before the kernel can give the tid
 * to another (the shorts map, keyed by tid, holds only live threads' totals). */
struct sonde_bpf_exit_shorts {
	__u32 kind; /* SONDE_BPF_REC_SHORTS */
	__u32 tid;
	__u64 time_ns;
	struct sonde_bpf_short v;
};

/* One context switch of a CPU (-a without filters: the exports replay each CPU's real
 * timeline from them). */
struct sonde_bpf_switch {
	__u64 time_ns;
	/* the tid leaving (0: the idle task) | its state (SONDE_BPF_*, or SONDE_BPF_EXITED)
	 * << SONDE_BPF_STATE_SHIFT: tids are below 2^22 (the kernel's PID_MAX_LIMIT) */
	__u32 prev;
	__u32 next_tid;
};
#define SONDE_BPF_STATE_SHIFT 29

/* A CPU's switches go out in batches (one ring buffer write per batch, not per switch). */
#define SONDE_BPF_SWITCH_BATCH 64 /* a power of two: the index is masked with it */
enum {
	SONDE_BPF_EXITED = 4, /* prev_state of a thread's last switch-out */
	/* a switch the kernel did not trace, put where the wait of the task it brought in
	 * ended (the programs' unseen_capture): prev's state is not known */
	SONDE_BPF_INFERRED = 5,
};

struct sonde_bpf_switches {
	__u64 seq; /* the CPU's batch number: a gap in them is a batch the ring had no room for */
	__u32 cpu, n;
	struct sonde_bpf_switch v[SONDE_BPF_SWITCH_BATCH];
};

/* Counters, one slot each in the per-CPU stats map. */
enum {
	SONDE_BPF_SWITCHES,	/* switch-outs of recorded threads */
	SONDE_BPF_WAKEUPS,	/* wakeups matched to a wait */
	SONDE_BPF_LONG,		/* long waits written */
	SONDE_BPF_LOST,		/* long waits the ring buffer had no room for */
	SONDE_BPF_SHORT_FULL,	/* short waits the shorts map or the waits ring had no room for */
	SONDE_BPF_START_FULL,	/* switch-outs the starts map had no room for */
	SONDE_BPF_SHORT_LOST_NS, /* their time */
	SONDE_BPF_SWITCHES_LOST, /* batches of switches the ring buffer had no room for */
	SONDE_BPF_UNSEEN_IN,	 /* waits whose switch-in was not traced: written unknown */
	/* the most bytes each ring held right after a write into it, read from the ring (a
	 * max over the CPUs, not a sum: how near a loss it came; at most the ring's size) */
	SONDE_BPF_WAITS_HIGH,
	SONDE_BPF_SWITCHES_HIGH,
	/* long waits lost (SONDE_BPF_LOST) whose thread the lost map had no room for: their
	 * time is not written as unknown */
	SONDE_BPF_LOST_UNSPANNED,
	/* exiting threads' short totals the ring had no room for, kept in the exit_lost map
	 * until user space writes them */
	SONDE_BPF_SHORT_HELD,
	SONDE_BPF_NSTATS,
};

#endif
