#!/usr/bin/env python3
"""Where the wall-clock time went, checked: sonde's per-thread and per-CPU accounting of one
`sonde record -a --off-cpu` recording against `perf sched timehist` of a `perf sched record`
taken in the same run, the workload's own measure, and /proc/stat.

usage: bench/accounting.py [BUILD_DIR] [SECONDS] [LOADERS] [BACKEND]
       (from the source tree, after make, as root; defaults build/release 5 2 bpf;
       BACKEND is sonde's --off-cpu-backend, bpf or perf)

The workload (compiled here from the C below) forks four single-thread processes for
SECONDS: a CPU burner, a sleeper (1 ms naps), a pipe reader (fed every 2 ms by its parent)
and an fsync writer (4 KiB written and fsync'd in a loop). Each prints its own CPU time
(getrusage) and wall time. LOADERS busy loops run beside it, so that the machine is
loaded and the workload's threads wait for a CPU (runnable time).

sonde records `-a --off-cpu --off-cpu-backend BACKEND --off-cpu-min 0 --ring-pages 4096`
from before the workload starts to after it ends, and so does `perf sched record -a`. Two
tracers on one tracepoint delay each other's time stamps by what the first one does with a
hit (sonde's perf backend copies 32 KiB of stack, 9 us here; its BPF backend reads stacks:
0.1-0.3 s of a thread's 5 s moved between states when sonde went first), so perf is made to
go first: perf's probes on sched_switch, sched_waking and sched_wakeup_new are registered
before sonde's BPF programs attach (by counting events held from the start), and perf
sched's events are opened after sonde's (newest first). Per workload process:

  sonde   `sonde report --summary --pid PID`: on-CPU (by the CPUs' switches), runnable, S, D
  perf    `perf sched timehist --state`'s figures: run time; sch delay (runnable); wait time
          (switch-out to switch-in) less the sch delay, by the state the task left the CPU
          in (S, D; preempted, R); a task's first wait, from its creation, runnable (as
          sonde counts it). Computed as timehist computes them from the events of the
          recording (`perf script --ns`), not summed from its lines: those print
          microseconds, truncated, half a microsecond short a figure on average (a thread
          switching 20,000 times came out 12-21 ms short of its on-CPU time, its run time
          and wait time 7.6 ms short of its life in 7,615 lines), and a preemption as W
  self    the process's own getrusage CPU time, printed beside sonde's on-CPU time and not
          judged: perf measures that figure, and on a guest the process's own CPU time
          leaves out the time the host stole while its thread held the vCPU (the switches,
          perf's and sonde's, count it: the thread held the CPU of that wall time)

per CPU: busy from sonde's per-CPU table (by the CPUs' switches, as a share of the time
that is not unknown) against /proc/stat
(user + nice + system + irq + softirq + steal, read before sonde starts and after it ends).
Differences are printed; the goal is every figure within 2 % or 5 ms, CPU busy within 2
points. A figure short of the goal by no more than its thread's unknown time (lost
records) is marked ? and not judged: where that time went is not known.

ACCT_BENCH_STOPS=AT:SECONDS,... stops the recorder (SIGSTOP) that many seconds into the
workload for that long, so that its rings overflow whatever the load: the losses' time
must come out unknown, each process's parts still summing to its life (e.g. 2:1,3.5:1,
or 4.5:1.5 to lose the processes' exits).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

WL = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void report(const char *name, double t0)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("wl %s %d cpu %.6f wall %.6f\n", name, (int)getpid(),
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		       ru.ru_stime.tv_usec / 1e6,
	       now() - t0);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5, t0 = now();
	const char *dir = argc > 2 ? argv[2] : "/tmp";
	int p[2];
	pid_t kids[4];

	if (pipe(p))
		return 1;
	for (int k = 0; k < 4; k++) {
		kids[k] = fork();
		if (kids[k])
			continue;
		static const char *names[] = {"wl-burn", "wl-sleep", "wl-pipe", "wl-fsync"};
		prctl(PR_SET_NAME, names[k]);
		double start = now();
		if (k == 0) {
			volatile unsigned long x = 0;
			while (now() - start < secs)
				for (int i = 0; i < 100000; i++)
					x += i;
		} else if (k == 1) {
			struct timespec ts = {0, 1000000};
			while (now() - start < secs)
				nanosleep(&ts, NULL);
		} else if (k == 2) {
			char c;
			close(p[1]);
			while (read(p[0], &c, 1) == 1)
				;
		} else {
			char path[4096], buf[4096];
			snprintf(path, sizeof(path), "%s/wl-fsync.dat", dir);
			int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
			memset(buf, 'x', sizeof(buf));
			while (fd >= 0 && now() - start < secs) {
				if (write(fd, buf, sizeof(buf)) < 0 || fsync(fd) < 0)
					break;
			}
		}
		report(names[k], start);
		_exit(0);
	}
	close(p[0]);
	struct timespec ts = {0, 2000000};
	while (now() - t0 < secs) {
		if (write(p[1], "x", 1) != 1)
			break;
		nanosleep(&ts, NULL);
	}
	close(p[1]);
	for (int k = 0; k < 4; k++)
		waitpid(kids[k], NULL, 0);
	return 0;
}
"""

STATES = ("on", "R", "S", "D")
# 16 MiB per CPU: every switch of a loaded machine is a record, and a loss makes time
# unknown (the default 2 MiB loses thousands of records a second here)
RING_PAGES = 4096


def proc_stat():
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if re.match(r"cpu\d+ ", line):
                v = [int(x) for x in line.split()[1:]]
                busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
                steal = v[7] if len(v) > 7 else 0
                out[int(line.split()[0][3:])] = (busy, sum(v[:8]), steal)
    return out


def wait_for_spool(spool, rec):
    """Until sonde's spool holds records past its header: its events are open."""
    for _ in range(300):
        if rec.poll() is not None:
            sys.exit("sonde record ended before the workload ran")
        if os.path.exists(spool) and os.path.getsize(spool) > 4096:
            return
        time.sleep(0.05)
    sys.exit("sonde record wrote nothing in 15 s")


def sonde_rows(sonde, spool, pid):
    out = subprocess.run([sonde, "report", "--summary", "--pid", str(pid), spool],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("all "):
            v = [float(x) for x in line.split()[1:]]
            # on-CPU runnable sleeping blocked other unknown short total
            return {"on": v[0], "R": v[1], "S": v[2], "D": v[3], "unknown": v[5],
                    "short": v[6]}
    return None


def sonde_cpus(sonde, spool):
    out = subprocess.run([sonde, "report", "--summary", spool], capture_output=True,
                         text=True).stdout
    cpus, window, on = {}, None, False
    for line in out.splitlines():
        m = re.search(r"seconds over ([\d.]+) s, by the CPUs' switches", line)
        if m:
            window, on = float(m.group(1)), True
            continue
        if on and re.match(r"\d+ ", line):
            v = line.split()
            cpus[int(v[0])] = (float(v[1]), float(v[2]), float(v[3]))
    return cpus, window


# perf script's lines of perf sched record's events: "[CPU] SEC.NSEC: sched:EVENT: FIELDS"
EVENT_RE = re.compile(r"\s*\[(\d+)\]\s+(\d+)\.(\d{9}):\s+sched:(\w+):\s+(.*)")
SWITCH_RE = re.compile(r"prev_comm=.*? prev_pid=(-?\d+) prev_prio=-?\d+ prev_state=(\S+) ==> "
                       r"next_comm=.*? next_pid=-?\d+")
WAKE_RE = re.compile(r"comm=.*? pid=(\d+) prio=")


def perf_states(data, pids):
    """Per pid: run, runnable (sch delay), and wait time by the state left in, as `perf sched
    timehist --state` computes them, from the recording's events to the nanosecond (its
    printed columns are microseconds, truncated)."""
    p = subprocess.Popen(["perf", "script", "--ns", "-i", data, "-F", "cpu,time,event,trace"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    tot = {pid: {"on": 0.0, "R": 0.0, "S": 0.0, "D": 0.0} for pid in pids}
    # per CPU its last switch (a thread switched out ran since then); per thread its last
    # switch-out, the state it left in, and its first wakeup since
    tprev, last, state, ready = {}, {}, {}, {}
    for line in p.stdout:
        m = EVENT_RE.match(line)
        if not m:
            continue
        cpu, t, event = int(m.group(1)), int(m.group(2)) * 10**9 + int(m.group(3)), m.group(4)
        if event in ("sched_waking", "sched_wakeup", "sched_wakeup_new"):
            w = WAKE_RE.match(m.group(5))
            if w and int(w.group(1)) in tot:
                ready.setdefault(int(w.group(1)), t)
            continue
        s = SWITCH_RE.match(m.group(5)) if event == "sched_switch" else None
        if not s:
            continue
        tid, tp = int(s.group(1)), tprev.get(cpu)
        tprev[cpu] = t
        if tid not in tot:
            continue
        woke, out = ready.pop(tid, None), last.get(tid)
        last[tid], left, state[tid] = t, state.get(tid, "R"), s.group(2)
        if tp is None:
            continue  # the CPU's first switch: timehist does not know when the thread came in
        delay = tp - woke if woke is not None and woke <= tp else 0
        wait = tp - out if out is not None and out <= tp else 0
        tot[tid]["on"] += (t - tp) / 1e9
        # the wait runs from the switch-out to the switch-in and holds the sch delay (wakeup
        # to switch-in): the state the thread left in is the rest. A thread's first wait,
        # from its creation (fork) to its first switch-in, is its delay, runnable as sonde
        # counts it (a new task waits for a CPU); a preempted thread left runnable (R+)
        tot[tid]["R"] += delay / 1e9
        key = "D" if left.startswith("D") else "R" if left.startswith("R") else "S"
        tot[tid][key] += max(0, wait - delay) / 1e9
    p.wait()
    return tot


def timehist_runs(data, pids):
    """Per pid: timehist's printed run times, summed, and its number of lines: the check that
    perf_states computes what timehist does (the two differ by its truncation, under a
    microsecond a line)."""
    out = subprocess.run(["perf", "sched", "timehist", "-i", data], capture_output=True,
                         text=True).stdout
    runs = {p: [0.0, 0] for p in pids}
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+\s+\[\d+\]\s+.+?\[(\d+)(?:/\d+)?\]\s+[\d.]+\s+[\d.]+"
                     r"\s+([\d.]+)", line)
        if m and int(m.group(1)) in runs:
            runs[int(m.group(1))][0] += float(m.group(2)) / 1e3
            runs[int(m.group(1))][1] += 1
    return runs


def close_enough(a, b):
    return abs(a - b) <= max(0.005, 0.02 * max(abs(a), abs(b)))


def judge(a, b, unknown):
    """'' within the goal; '?' short of it by no more than the thread's unknown time (lost
    records hid where that time went: not judged); '!' outside it."""
    if close_enough(a, b):
        return ""
    return "?" if a < b and (b - a <= unknown or close_enough(a + unknown, b)) else "!"


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 5
    loaders = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    backend = sys.argv[4] if len(sys.argv) > 4 else "bpf"
    tmp = tempfile.mkdtemp(prefix="sonde-acct.")
    # the workload, the spool and perf.data (hundreds of MB) go with it, however the
    # run ends
    try:
        measure(os.path.join(build, "sonde"), secs, loaders, backend, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stops():
    """ACCT_BENCH_STOPS: AT:SECONDS,... (seconds into the workload, and for how long)."""
    out = []
    for item in filter(None, os.environ.get("ACCT_BENCH_STOPS", "").split(",")):
        at, _, length = item.partition(":")
        out.append((float(at), float(length or 1)))
    return sorted(out)


def measure(sonde, secs, loaders, backend, tmp):
    wl = os.path.join(tmp, "wl")
    with open(wl + ".c", "w") as f:
        f.write(WL)
    subprocess.run(["cc", "-O1", "-o", wl, wl + ".c"], check=True)
    spool, data = os.path.join(tmp, "x.spool"), os.path.join(tmp, "perf.data")
    err = os.path.join(tmp, "record.err")
    load = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(loaders)]
    rec = perf = hold = None
    try:
        # Two tracers on one tracepoint delay each other's time stamps by what the first
        # does with a hit: the 32 KiB stack copy of sonde's perf backend (9 us here) or
        # the stack reads of its BPF backend. perf goes first in both: these counting events
        # register perf's probes on the switch and wakeup tracepoints before sonde attaches
        # its BPF programs
        # (a tracepoint calls its probes in that order), and perf sched's own events, opened
        # after sonde's, come first among perf's (a tracepoint's perf events write newest
        # first).
        hold = subprocess.Popen(["perf", "stat", "-a", "-e",
                                 "sched:sched_switch,sched:sched_waking,sched:sched_wakeup_new",
                                 "-x,", "-o", os.devnull], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(1)
        st0 = proc_stat()
        # either backend keeps the CPUs' switches (SWITCHES) with -a, which give the exact
        # on-CPU time of every thread
        with open(err, "w") as ef:
            rec = subprocess.Popen([sonde, "record", "-a", "--off-cpu", "--off-cpu-backend",
                                    backend, "--off-cpu-min", "0", "--ring-pages",
                                    str(RING_PAGES), "-o", spool],
                                   stdout=subprocess.DEVNULL, stderr=ef)
        wait_for_spool(spool, rec)
        # 128 MiB a CPU: perf's reader is woken about a fifth as often (5 times in 1.5 s of
        # a ping-pong where it was 24), a wakeup perf signals from within its handler,
        # before sonde's stamp. With the default 4 MiB, half the BPF runs had one figure
        # 7-10 ms off, each time one wait: once a wakeup sonde stamped 8.3 ms after perf,
        # nothing switching on either CPU in between (the host had the vCPU); with 128
        # MiB, 1 run of 10.
        perf = subprocess.Popen(["perf", "sched", "record", "-m", "32768", "-a", "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        wlp = subprocess.Popen([wl, str(secs), tmp], stdout=subprocess.PIPE, text=True)
        began = time.monotonic()
        for at, length in stops():
            time.sleep(max(0.0, began + at - time.monotonic()))
            rec.send_signal(signal.SIGSTOP)
            time.sleep(length)
            rec.send_signal(signal.SIGCONT)
        wl_out = wlp.communicate()[0]
        time.sleep(0.5)
    finally:
        for p in (perf, rec):
            if p:
                p.send_signal(signal.SIGINT)
                p.wait()
        st1 = proc_stat()
        if hold:
            hold.send_signal(signal.SIGINT)
            hold.wait()
        for p in load:
            p.kill()
            p.wait()
    with open(err) as ef:
        rec_err = ef.read()
    for line in rec_err.splitlines():
        if re.match(r"\s*(loss|off-CPU|time unknown)", line):
            print("sonde record: " + line.strip())
    own = {}
    for line in wl_out.splitlines():
        m = re.match(r"wl (\S+) (\d+) cpu ([\d.]+) wall ([\d.]+)", line)
        if m:
            own[int(m.group(2))] = (m.group(1), float(m.group(3)), float(m.group(4)))
    if len(own) != 4:
        sys.exit("the workload did not report its four processes:\n" + wl_out + rec_err)
    ptot, truns = perf_states(data, list(own)), timehist_runs(data, list(own))
    worst, misses, unjudged = 0.0, 0, 0
    print(f"{'thread':<10} {'state':<6} {'sonde':>9} {'perf':>9} {'diff':>9}  (seconds)")
    for pid, (name, cpu, wall) in sorted(own.items()):
        s = sonde_rows(sonde, spool, pid)
        if s is None:
            print(f"{name:<10} no row in sonde's summary")
            misses += 1
            continue
        for st in STATES:
            a, b = s[st], ptot[pid][st]
            mark = judge(a, b, s["unknown"])
            misses += mark == "!"
            unjudged += mark == "?"
            if mark != "?":
                worst = max(worst, abs(a - b))
            print(f"{name:<10} {st:<6} {a:9.3f} {b:9.3f} {a - b:+9.3f}{'  ' + mark if mark else ''}")
        run, lines = truns[pid]
        if not 0 <= ptot[pid]["on"] - run <= lines * 1e-6 + 1e-6:
            misses += 1
            print(f"{name:<10} timehist's lines sum its run time to {run:.6f} s in {lines} lines,"
                  f" not to within their truncation of {ptot[pid]['on']:.6f}  !")
        ssum = sum(s[st] for st in STATES) + s["unknown"] + s["short"]
        psum = sum(ptot[pid][st] for st in STATES)
        print(f"{name:<10} {'sum':<6} {ssum:9.3f} {psum:9.3f} {ssum - psum:+9.3f}"
              f"   (the process's own wall time {wall:.3f} s)")
        # not judged: perf measures the same figure, and the process's own CPU time leaves
        # out what the host stole while the thread held its vCPU, which the switches count
        print(f"{name:<10} {'on/own':<6} {s['on']:9.3f} {cpu:9.3f} {s['on'] - cpu:+9.3f}"
              f"   (own getrusage CPU time: without steal; not judged)")
        if s["unknown"] or s["short"]:
            print(f"{name:<10} unknown {s['unknown']:.3f} s, short {s['short']:.3f} s")
    cpus, window = sonde_cpus(sonde, spool)
    hz = os.sysconf("SC_CLK_TCK")
    print(f"\n{'cpu':<4} {'sonde busy %':>13} {'/proc/stat %':>13} {'diff':>7}")
    for c in sorted(cpus):
        busy, idle, unknown = cpus[c]
        b0, t0, s0 = st0.get(c, (0, 0, 0))
        b1, t1, s1 = st1.get(c, (0, 0, 0))
        ps = 100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else float("nan")
        ss = 100.0 * busy / (window - unknown) if window > unknown else float("nan")
        ok = abs(ss - ps) <= 2
        misses += not ok
        print(f"{c:<4} {ss:13.2f} {ps:13.2f} {ss - ps:+7.2f}{'' if ok else '  !'}"
              f"   ({(t1 - t0) / hz:.2f} s of /proc/stat, {window:.3f} s of sonde, "
              f"{unknown:.3f} s unknown, {(s1 - s0) / hz:.2f} s stolen by the host)")
    print(f"\n{misses} figure(s) outside the goal (!), {unjudged} short of it by no more than "
          f"the thread's unknown time (?: lost records hid where that time went, not judged);"
          f" largest judged thread difference {worst * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
