#!/usr/bin/env python3
"""Off-CPU recording: how right `sonde report --metric wall` is, and what `sonde record --off-cpu`
costs a program that switches all the time, against perf.

usage: bench/offcpu.py [BUILD_DIR] [REPS] [SECONDS]
       (from the source tree, after make; defaults build/release 5 3)

(a) wall split. progs/offcpu_split (tests/progs/offcpu_split.c) spends its main thread's wall
    clock 25/50/25 % in burn (on the CPU), nap (nanosleep) and wait_pipe (a blocking read)
    and measures what it really spent. Each repetition records it with `sonde record
    --off-cpu --off-cpu-min 0` and compares the shares of `sonde report --folded --metric
    wall --tid MAIN` with the program's own: the error is the largest of the three
    differences, in points. Debian's perf has no --off-cpu (it is built without BPF
    skeletons), so there is no perf figure to set beside it.

(b) overhead. progs/pingpong (tests/progs/pingpong.c) bounces a byte between two threads
    through pipes, switching on the order of 100k times a second, and prints its round trips
    per second: its own throughput. Modes, run back to back in each repetition so that load
    from other users of the machine hits them alike:

      unprofiled
      sonde          sonde record --off-cpu (its default 32 KiB stack copy per switch-out)
      sonde-8k       sonde record --off-cpu --stack-size 8192 (perf's default copy size)
      perf-dwarf     perf record -e sched:sched_switch --call-graph dwarf (8 KiB copies)

    Figures, medians over the repetitions: throughput; slowdown = unprofiled / profiled,
    paired by repetition; added = slowdown - 1; sonde/perf = sonde's added / perf's added,
    paired by repetition; and the share each profiler lost (sonde: its summary's lost
    records over those plus the switch-outs it read; perf: its "lost N%" line), since a
    profiler that drops records also skips their cost: at these rates both lose much, so
    the cost ratio compares what each managed to record.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

PING_RE = re.compile(r"pingpong: (\d+) round trips in ([\d.]+) s = (\d+) round trips/s")
LOSS_RE = re.compile(r"loss: (\d+) records and (\d+) samples lost")
PERF_LOST_RE = re.compile(r"Processed (\d+) samples and lost ([\d.]+)%")
OFFCPU_RE = re.compile(r"off-CPU: (\d+) switch-outs")


def wall_error(build, tmp, seconds):
    spool, truth = os.path.join(tmp, "wall.spool"), os.path.join(tmp, "wall.truth")
    subprocess.run([os.path.join(build, "sonde"), "record", "--off-cpu", "--off-cpu-min", "0",
                    "-q", "-o", spool, "--", os.path.join(build, "progs", "offcpu_split"),
                    str(seconds), truth], check=True, capture_output=True)
    t = dict(l.split() for l in open(truth))
    want = [float(t[k]) for k in ("burn", "nap", "wait_pipe")]
    out = subprocess.run([os.path.join(build, "sonde"), "report", "--folded", "--metric",
                          "wall", "--tid", t["pid"], spool], check=True, capture_output=True,
                         text=True).stdout
    got = [0.0, 0.0, 0.0]
    for line in out.splitlines():
        stack, us = line.rsplit(" ", 1)
        for i, frame in enumerate((";burn", ";nap;", ";wait_pipe;")):
            if frame in stack:
                got[i] += float(us)
    shares = lambda v: [100 * x / sum(v) for x in v]
    return [g - w for g, w in zip(shares(got), shares(want))]


def run_pingpong(argv, seconds):
    p = subprocess.run(argv, capture_output=True, text=True)
    m = PING_RE.search(p.stdout)
    if p.returncode != 0 or not m:
        sys.exit("%s failed (%d):\n%s%s" % (" ".join(argv), p.returncode, p.stdout, p.stderr))
    return float(m.group(3)), p.stderr


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tmp = tempfile.mkdtemp(prefix="sonde-offcpu-bench.")
    sonde, ping = os.path.join(build, "sonde"), os.path.join(build, "progs", "pingpong")
    spool, pdata = os.path.join(tmp, "pp.spool"), os.path.join(tmp, "perf.data")
    have_perf = shutil.which("perf") is not None
    modes = {
        "unprofiled": [ping, str(seconds)],
        "sonde": [sonde, "record", "--off-cpu", "-o", spool, "--", ping, str(seconds)],
        "sonde-8k": [sonde, "record", "--off-cpu", "--stack-size", "8192", "-o", spool, "--",
                     ping, str(seconds)],
    }
    if have_perf:
        modes["perf-dwarf"] = ["perf", "record", "-e", "sched:sched_switch", "--call-graph",
                               "dwarf", "-o", pdata, "--", ping, str(seconds)]
    errors, rate, lost = [], {m: [] for m in modes}, {m: [] for m in modes}
    for rep in range(reps):
        errors.append(max(abs(e) for e in wall_error(build, tmp, seconds)))
        for m, argv in modes.items():
            r, err = run_pingpong(argv, seconds)
            rate[m].append(r)
            # the share of switch-outs lost: sonde's lost records over those and the
            # switch-outs it read (an upper bound: wakeups and switch records are lost
            # too); perf's own end-of-run line
            if m.startswith("sonde"):
                l, o = LOSS_RE.search(err), OFFCPU_RE.search(err)
                n = int(l.group(1)) + int(l.group(2)) if l else 0
                kept = int(o.group(1)) if o else 0
                lost[m].append(100.0 * n / (n + kept) if n + kept else 0)
            elif m == "perf-dwarf":
                l = PERF_LOST_RE.search(err)
                lost[m].append(float(l.group(2)) if l else 0)
        print("rep %d: wall error %.2f points; %s" % (rep + 1, errors[-1], ", ".join(
            "%s %.0f/s" % (m, rate[m][-1]) for m in modes)), file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)

    print("(a) wall split of offcpu_split, %d recordings of %d s: largest share error, median "
          "%.2f points (max %.2f); goal <= 3" % (reps, seconds, statistics.median(errors),
                                                   max(errors)))
    print("(b) pingpong round trips/s, %d repetitions of %d s (medians):" % (reps, seconds))
    base = rate["unprofiled"]
    added = {}
    for m in modes:
        slow = [b / r for b, r in zip(base, rate[m])]
        added[m] = [s - 1 for s in slow]
        print("  %-11s %9.0f/s  slowdown x%.3f  lost %s" % (
            m, statistics.median(rate[m]), statistics.median(slow),
            "%.1f%%" % statistics.median(lost[m]) if lost[m] else "-"))
    if have_perf:
        for m in ("sonde", "sonde-8k"):
            ratios = [a / p for a, p in zip(added[m], added["perf-dwarf"]) if p > 0]
            if ratios:
                print("  %s/perf-dwarf added cost: %.2f (median of paired ratios)" % (
                    m, statistics.median(ratios)))
    else:
        print("  perf not installed (apt-get install linux-perf): no perf figures")


if __name__ == "__main__":
    main()
