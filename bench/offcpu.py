#!/usr/bin/env python3
"""Off-CPU recording: how right `sonde report --metric wall` is, and what `sonde record --off-cpu`
costs a program that switches all the time, against perf.

usage: bench/offcpu.py [BUILD_DIR] [REPS] [SECONDS] [PEER_BUILD_DIR]
       (from the source tree, after make, as root; defaults build/release 5 3; with
       PEER_BUILD_DIR, another build's sonde, e.g. a copy of main's, is run launched and
       -a as peer-bpf-only and a:peer-bpf-only in the same repetitions, to compare two
       versions interleaved; OFFCPU_BENCH_MODES=m1,m2,... runs only those modes,
       OFFCPU_BENCH_WALL=0 skips (a), and OFFCPU_BENCH_PIN=CPU runs both pingpong threads
       on that CPU alone: each round trip is then two direct switches, where unpinned its
       cost depends on whether the threads share a CPU, which the profiler's load and the
       machine's change from run to run)

(a) wall split. progs/offcpu_split (tests/progs/offcpu_split.c) spends its main thread's wall
    clock 25/50/25 % in burn (on the CPU), nap (nanosleep) and wait_pipe (a blocking read)
    and measures what it really spent. Each repetition records it with `sonde record
    --off-cpu --off-cpu-min 0`, once per off-CPU backend (bpf, perf), and compares the
    shares of `sonde report --folded --metric wall --tid MAIN` with the program's own: the
    error is the largest of the three differences, in points. Debian's perf has no
    --off-cpu (it is built without BPF skeletons), so there is no perf figure to set
    beside it.

(b) overhead. progs/pingpong (tests/progs/pingpong.c) bounces a byte between two threads
    through pipes, switching on the order of 100k times a second, and prints its round trips
    per second: its own throughput. Modes, run back to back in each repetition so that load
    from other users of the machine hits them alike. Launched (the profiler starts the
    program):

      unprofiled
      sonde-bpf      sonde record --off-cpu --off-cpu-backend bpf: on-CPU samples (999 Hz,
                     DWARF copies, per-thread events) and off-CPU waits, switches tracked in
                     the kernel, waits under 1 ms summed there, the long ones stacked
      sonde-bpf-only sonde record -e sched:sched_switch --off-cpu --off-cpu-backend bpf: off
                     CPU only, what offcputime and perf's sched_switch recordings measure
      sonde-perf-only  the same with --off-cpu-backend perf (a sample with a 32 KiB stack
                     copy per switch-out)
      perf-fp        perf record -e sched:sched_switch -g (frame-pointer stacks, every switch)
      perf-dwarf     perf record -e sched:sched_switch --call-graph dwarf (8 KiB copies)

    System-wide (the profiler runs first, the program is started under it, the profiler
    is stopped with SIGINT once it ended; its own CPU time and peak RSS come from wait4):

      a:sonde-bpf-only  sonde record -a -e sched:sched_switch --off-cpu --off-cpu-backend bpf
      a:sonde-bpf-nosw  the same with --comm pingpong: the programs still track every
                     process (a --comm filter is applied in user space), but no CPU's switch
                     sequence is kept (it is kept only over every process): the sequence's
                     cost is the difference (the filter also spares unwinding and writing the
                     other processes' long waits)
      a:offcputime   libbpf-tools offcputime (BPF, in-kernel aggregation, frame pointers)
      a:perf-fp      perf record -a -e sched:sched_switch -g

    Figures, medians over the repetitions: throughput; slowdown = unprofiled / profiled,
    paired by repetition; added = slowdown - 1; ratios of slowdowns to the peers', paired by
    repetition, with their range (the launched bpf-only recording's is set against
    offcputime's -a too, the issue's goal for both); the same for the program's CPU time per round trip (pingpong's getrusage:
    what the profiler adds in the program's own context, BPF programs and perf samples
    alike), which the load of other users of the machine sways far less than throughput
    (a round trip waits for a CPU, or for its partner woken on the other one); the share each profiler lost (sonde: its summary's lost records over those
    plus the switch-outs it saw; perf: its "lost N%" line; offcputime reports none), since a
    profiler that drops records also skips their cost; the profiler's CPU seconds and
    peak RSS in the system-wide modes.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import signal

PING_RE = re.compile(r"pingpong: (\d+) round trips in ([\d.]+) s = (\d+) round trips/s, "
                     r"([\d.]+) us of CPU each")
LOSS_RE = re.compile(r"loss: (\d+) records and (\d+) samples lost")
PERF_LOST_RE = re.compile(r"Processed (\d+) samples and lost ([\d.]+)%")
OFFCPU_RE = re.compile(r"off-CPU: (\d+) switch-outs")
BACKENDS = ("bpf", "perf")


def wall_error(build, tmp, seconds, backend):
    spool, truth = os.path.join(tmp, "wall.spool"), os.path.join(tmp, "wall.truth")
    subprocess.run([os.path.join(build, "sonde"), "record", "--off-cpu", "--off-cpu-min", "0",
                    "--off-cpu-backend", backend, "-q", "-o", spool, "--", os.path.join(build, "progs", "offcpu_split"),
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
    return float(m.group(3)), float(m.group(4)), p.stderr


def run_system_wide(prof_argv, ping_argv):
    """Starts prof_argv, runs ping_argv under it, stops it: (rate, CPU us per round trip, its
    stderr, CPU s, RSS MiB)."""
    prof = subprocess.Popen(prof_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(2)  # loading programs, reading /proc
    r, c, _ = run_pingpong(ping_argv, 0)
    prof.send_signal(signal.SIGINT)
    err = prof.stderr.read()
    _, status, ru = os.wait4(prof.pid, 0)
    prof.returncode = status
    return r, c, err, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tmp = tempfile.mkdtemp(prefix="sonde-offcpu-bench.")
    sonde, ping = os.path.join(build, "sonde"), os.path.join(build, "progs", "pingpong")
    spool, pdata = os.path.join(tmp, "pp.spool"), os.path.join(tmp, "perf.data")
    pin = os.environ.get("OFFCPU_BENCH_PIN")
    pp = [str(seconds)] + (["4000", pin] if pin else [])
    have_perf = shutil.which("perf") is not None
    offcputime = shutil.which("offcputime") or (
        "/usr/sbin/offcputime" if os.access("/usr/sbin/offcputime", os.X_OK) else None)
    modes = {
        "unprofiled": [ping] + pp,
        "sonde-bpf": [sonde, "record", "--off-cpu", "--off-cpu-backend", "bpf", "-o", spool,
                      "--", ping] + pp,
        "sonde-bpf-only": [sonde, "record", "-e", "sched:sched_switch", "--off-cpu",
                           "--off-cpu-backend", "bpf", "-o", spool, "--", ping] + pp,
        "sonde-perf-only": [sonde, "record", "-e", "sched:sched_switch", "--off-cpu",
                            "--off-cpu-backend", "perf", "-o", spool, "--", ping] + pp,
    }
    if have_perf:
        modes["perf-fp"] = ["perf", "record", "-e", "sched:sched_switch", "-g", "-o", pdata,
                            "--", ping] + pp
        modes["perf-dwarf"] = ["perf", "record", "-e", "sched:sched_switch", "--call-graph",
                               "dwarf", "-o", pdata, "--", ping] + pp
    system = {"a:sonde-bpf-only": [sonde, "record", "-a", "-e", "sched:sched_switch",
                                   "--off-cpu", "--off-cpu-backend", "bpf", "-o", spool]}
    system["a:sonde-bpf-nosw"] = system["a:sonde-bpf-only"] + ["--comm", "pingpong"]
    if len(sys.argv) > 4:
        modes["peer-bpf-only"] = [os.path.join(sys.argv[4], "sonde")] + modes[
            "sonde-bpf-only"][1:]
        system["a:peer-bpf-only"] = [os.path.join(sys.argv[4], "sonde")] + system[
            "a:sonde-bpf-only"][1:]
    if offcputime:
        system["a:offcputime"] = [offcputime]
    if have_perf:
        system["a:perf-fp"] = ["perf", "record", "-a", "-e", "sched:sched_switch", "-g", "-o",
                               pdata]
    only = os.environ.get("OFFCPU_BENCH_MODES")
    if only:
        keep = set(only.split(",")) | {"unprofiled"}
        modes = {m: a for m, a in modes.items() if m in keep}
        system = {m: a for m, a in system.items() if m in keep}
    every = list(modes) + list(system)
    errors, rate, lost = {b: [] for b in BACKENDS}, {m: [] for m in every}, {m: [] for m in every}
    cpurt = {m: [] for m in every}
    wall = os.environ.get("OFFCPU_BENCH_WALL", "1") != "0"
    cpu, rss = {m: [] for m in system}, {m: [] for m in system}

    def note_loss(m, err):
        # the share of switch-outs lost: sonde's lost records over those and the
        # switch-outs it read (an upper bound: wakeups and switch records are lost too);
        # perf's own end-of-run line
        if "sonde" in m or "peer" in m:
            l, o = LOSS_RE.search(err), OFFCPU_RE.search(err)
            n = int(l.group(1)) + int(l.group(2)) if l else 0
            kept = int(o.group(1)) if o else 0
            lost[m].append(100.0 * n / (n + kept) if n + kept else 0)
        elif "perf" in m:
            l = PERF_LOST_RE.search(err)
            lost[m].append(float(l.group(2)) if l else 0)

    for rep in range(reps):
        for b in BACKENDS if wall else ():
            errors[b].append(max(abs(e) for e in wall_error(build, tmp, seconds, b)))
        for m, argv in modes.items():
            r, us, err = run_pingpong(argv, seconds)
            rate[m].append(r)
            cpurt[m].append(us)
            note_loss(m, err)
        for m, argv in system.items():
            r, us, err, c, mem = run_system_wide(argv, [ping] + pp)
            rate[m].append(r)
            cpurt[m].append(us)
            cpu[m].append(c)
            rss[m].append(mem)
            note_loss(m, err)
        print("rep %d: wall error %s; %s" % (rep + 1, ", ".join(
            "%s %.2f points" % (b, errors[b][-1]) for b in BACKENDS if errors[b]), ", ".join(
            "%s %.0f/s %.2f us" % (m, rate[m][-1], cpurt[m][-1]) for m in every)),
              file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)

    for b in BACKENDS if wall else ():
        print("(a) wall split of offcpu_split, backend %s, %d recordings of %d s: largest share "
              "error, median %.2f points (max %.2f); goal <= 1" % (
                  b, reps, seconds, statistics.median(errors[b]), max(errors[b])))
    print("(b) pingpong round trips/s, %d repetitions of %d s (medians):" % (reps, seconds))
    base = rate["unprofiled"]
    slow, cslow = {}, {}
    for m in every:
        slow[m] = [b / r for b, r in zip(base, rate[m])]
        cslow[m] = [c / b for b, c in zip(cpurt["unprofiled"], cpurt[m])]
        extra = ""
        if m in cpu:
            extra = "  profiler CPU %.2f s, RSS %.0f MiB" % (statistics.median(cpu[m]),
                                                          statistics.median(rss[m]))
        print("  %-16s %9.0f/s  slowdown x%.3f  CPU/round trip %.2f us x%.3f  lost %s%s" % (
            m, statistics.median(rate[m]), statistics.median(slow[m]),
            statistics.median(cpurt[m]), statistics.median(cslow[m]),
            "%.1f%%" % statistics.median(lost[m]) if lost[m] else "-", extra))

    def ratio(a, b):
        if a in slow and b in slow:
            r = [x / y for x, y in zip(slow[a], slow[b])]
            c = [x / y for x, y in zip(cslow[a], cslow[b])]
            print("  slowdown %s / %s: %.3f (%.3f-%.3f), CPU per round trip %.3f "
                  "(%.3f-%.3f) (medians and ranges of paired ratios)" % (
                      a, b, statistics.median(r), min(r), max(r), statistics.median(c),
                      min(c), max(c)))

    ratio("sonde-bpf-only", "sonde-perf-only")
    ratio("sonde-bpf-only", "perf-fp")
    ratio("sonde-bpf-only", "perf-dwarf")
    ratio("sonde-bpf-only", "peer-bpf-only")
    # the goal for a launched recording is set against offcputime, which runs -a
    ratio("sonde-bpf-only", "a:offcputime")
    ratio("peer-bpf-only", "perf-fp")
    ratio("a:sonde-bpf-only", "a:sonde-bpf-nosw")
    ratio("a:sonde-bpf-only", "a:offcputime")
    ratio("a:sonde-bpf-nosw", "a:offcputime")
    ratio("a:peer-bpf-only", "a:offcputime")
    ratio("a:sonde-bpf-only", "a:peer-bpf-only")
    ratio("a:sonde-bpf-only", "a:perf-fp")
    if not have_perf:
        print("  perf not installed (apt-get install linux-perf): no perf figures")
    if not offcputime:
        print("  offcputime not installed (apt-get install libbpf-tools): no BPF peer")

if __name__ == "__main__":
    main()
