#!/usr/bin/env python3
"""What recording costs the program recorded, and what the profiler spends: sonde against perf.

usage: bench/record-overhead.py [BUILD_DIR] [REPS] [SECONDS] [WORKLOADS] [RATES] [STACKS]
       (from the source tree, after make; defaults build/release 5 3 shallow,deep 999,10000 "")

The target is `progs/ladder SECONDS DEPTH FRAME` (tests/progs/ladder.c), which counts the units of
work it does and divides them by its own CPU time. This kernel has no IRQ time accounting, so
that CPU time includes the sampling interrupts taken in the target: units per CPU-second is
the target's throughput whatever share of the (shared) machine it got, and everything a
profiler costs the target per sample lowers it (interrupt, register and stack copy, ring
writes, wakeups). Workloads: `shallow` (DEPTH 1, a few hundred bytes of stack under main) and
`deep` (DEPTH 400 of FRAME 160 bytes, about 80 KiB: every copy is full, even the largest
perf_event allows, so dwarf stacks are cut).

Modes, each launching ladder under the profiler, at each rate:

  unprofiled
  sonde        sonde record -F RATE (each thread's stack copy sized from what its stacks
               need: docs/record.md, "Stack copy sizing"); with STACKS, a list of sizes, one
               mode sonde-SIZE per size instead (sonde record --stack-size SIZE, a fixed
               copy): what the size of the stack copy costs the target
  perf-dwarf   perf record --call-graph dwarf (perf's default 8 KiB stack copy)
  perf-fp      perf record -g (frame pointers: no stack copy)

perf samples the event sonde chooses here (cycles with a CPU PMU, else cpu-clock). Each
repetition runs every (workload, rate, mode) back to back, so load from other users of the
machine hits all of them alike.

Figures, medians over the repetitions:

  slowdown        unprofiled throughput / profiled throughput, paired with the same
                  repetition's unprofiled run
  added           slowdown - 1: the target's cost of being recorded
  sonde/perf      sonde's added / perf-dwarf's added, paired by repetition (the goal is <= 0.8
                  at 10 kHz)
  profiler CPU    the profiler's own CPU time (user + system, wait4 of the profiler minus the
                  target's) per CPU-second of the target. This is what the profiler spends,
                  not what the target loses: on an idle machine it runs on another core.
"""
import os
import shutil
import re
import statistics
import sys
import tempfile

# (DEPTH, FRAME) of each workload
WORKLOADS = {"shallow": (1, 96), "deep": (400, 160)}
LADDER_RE = re.compile(r"ladder: (\d+) units in ([\d.]+) s, ([\d.]+) s of CPU = ([\d.]+) "
                       r"units/s, ([\d.]+) units/CPU-s")


def perf_event():
    cpu = "/sys/bus/event_source/devices/"
    has_pmu = os.path.exists(cpu + "cpu") or os.path.exists(cpu + "cpu_core")
    return "cycles" if has_pmu else "cpu-clock"


def run_mode(argv):
    """Runs argv (ladder, or a profiler launching it) and returns ladder's throughput, its CPU
    time, and the CPU the rest of the process tree used (wait4 of argv counts the children it
    waited for: the profiler's CPU is that minus the target's)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(r)
        os.close(w)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        out += chunk
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("%s failed (%d)" % (argv[0], code))
    m = LADDER_RE.search(out.decode())
    if not m:
        sys.exit("%s: no ladder figures in %r" % (argv[0], out.decode()[-300:]))
    target_cpu = float(m.group(3))
    total = ru.ru_utime + ru.ru_stime
    return {"rate": float(m.group(5)), "cpu": target_cpu, "prof": max(total - target_cpu, 0.0)}


def main():
    a = sys.argv[1:]
    build = a[0] if len(a) > 0 else "build/release"
    reps = int(a[1]) if len(a) > 1 else 5
    seconds = a[2] if len(a) > 2 else "3"
    workloads = (a[3] if len(a) > 3 else "shallow,deep").split(",")
    rates = [int(x) for x in (a[4] if len(a) > 4 else "999,10000").split(",")]
    stacks = [int(x) for x in a[5].split(",")] if len(a) > 5 and a[5] else []
    ladder = os.path.join(build, "progs", "ladder")
    sonde = os.path.join(build, "sonde")
    event = perf_event()
    tmp = tempfile.mkdtemp()
    spool = os.path.join(tmp, "bench.spool")
    pdata = os.path.join(tmp, "perf.data")

    def modes(hz):
        f = str(hz)
        sonde_argv = [sonde, "record", "-q", "-F", f, "-o", spool]
        m = {"unprofiled": []}
        if stacks:
            for size in stacks:
                m["sonde-%d" % size] = sonde_argv + ["--stack-size", str(size), "--"]
        else:
            m["sonde"] = sonde_argv + ["--"]
        return dict(m, **{
            "perf-dwarf": ["perf", "record", "-q", "-e", event, "-F", f, "--call-graph",
                           "dwarf", "-o", pdata, "--"],
            "perf-fp": ["perf", "record", "-q", "-e", event, "-F", f, "-g", "-o", pdata, "--"],
        })

    res = {}
    for rep in range(reps):
        for w in workloads:
            for hz in rates:
                for m, prefix in modes(hz).items():
                    depth, frame = WORKLOADS[w]
                    r = run_mode(prefix + [ladder, seconds, str(depth), str(frame)])
                    res.setdefault((w, hz, m), []).append(r)
                    print("rep %d %-7s %5d Hz %-11s %10.1f units/CPU-s  target CPU %6.3f s  "
                          "profiler CPU %6.3f s" % (rep + 1, w, hz, m, r["rate"], r["cpu"],
                                                    r["prof"]), flush=True)

    print("\nmedians of %d repetitions, ladder %s s, event %s:" % (reps, seconds, event))
    for w in workloads:
        for hz in rates:
            base = res[(w, hz, "unprofiled")]
            added = {}
            for m in modes(hz):
                runs = res[(w, hz, m)]
                slow = [b["rate"] / r["rate"] for b, r in zip(base, runs)]
                added[m] = [s - 1 for s in slow]
                prof = statistics.median(r["prof"] / r["cpu"] for r in runs)
                print("  %-7s %5d Hz %-11s %10.1f units/CPU-s  slowdown x%.4f  "
                      "profiler CPU %5.1f%% of the target's" %
                      (w, hz, m, statistics.median(r["rate"] for r in runs),
                       statistics.median(slow), prof * 100))
            print("  %-7s %5d Hz added cost: %s" % (w, hz, ", ".join(
                "%s %.2f%%" % (m, statistics.median(added[m]) * 100)
                for m in added if m != "unprofiled")))
            for m in added:
                if not m.startswith("sonde"):
                    continue
                pairs = [s / p for s, p in zip(added[m], added["perf-dwarf"]) if p > 0]
                print("  %-7s %5d Hz %s/perf-dwarf added cost %.3f (median of %d pairs; "
                      "goal <= 0.8)" % (w, hz, m, statistics.median(pairs) if pairs
                                        else float("nan"), len(pairs)))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
