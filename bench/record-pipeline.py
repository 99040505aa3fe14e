#!/usr/bin/env python3
"""The recording pipeline at high record rates: the profiler's own CPU time per record and the
records it lost, for one or more sonde binaries and perf, interleaved in one run.

usage: bench/record-pipeline.py [-n RUNS] [-s SECONDS] [-b BUILD] [--no-perf] [--perf-fp]
                                [--off-cpu-backend bpf|perf] [--case NAME]... SONDE [SONDE...]
       (from the source tree, after make; e.g. an old build beside the new one:
        git worktree add /tmp/old-sonde HEAD~N && make -C /tmp/old-sonde -j2
        bench/record-pipeline.py /tmp/old-sonde/build/release/sonde build/release/sonde)

Cases (the workloads are tests/progs, from BUILD/progs, default build/release):

  offcpu    pingpong (two threads bouncing a byte through pipes) launched under
            `sonde record --off-cpu`; perf: `perf record -e sched:sched_switch
            --call-graph dwarf` (the same switch-outs, with 8 KiB stack copies)
  a999      `sonde record -a -F 999` while spin_threads keeps every CPU busy; perf:
            `perf record -a -F 999 --call-graph dwarf`
  a10k      the same at 10,000 Hz

--off-cpu-backend passes that backend to sonde in the offcpu case (the default is sonde's
own choice); a sonde without the option (a build from before the BPF backend) records with
perf events, the only backend it has. --perf-fp records perf with frame-pointer call graphs (`-g`) instead of DWARF
copies: `perf record -a -g -F 10000` is the peer of `sonde record -a -F 10000`.

The profiler's CPU time is its rusage (getrusage of the reaped children, to the microsecond).
In the offcpu case the profiler launches the workload, whose own time /usr/bin/time writes to
a file and is taken off (to 10 ms, a few per cent of the profiler's there). In the system-wide
cases the workload runs beside the profiler, which launches `sleep SECONDS` (under a
millisecond of CPU, the same for every profiler): a recording's fixed cost is tens of
milliseconds, too little to take from the 10 ms figures of a workload's CPU seconds.
Records are what the profiler kept: sonde's samples, switch-outs and wakeups (its summary),
perf's written samples ("Captured and wrote ... (N samples)"). Lost: sonde's lost records and
samples, perf's lost share. Each run goes through every profiler in turn, so the machine's
load hits them alike. Printed: medians and [min-max] over the runs, and ratios of medians of
paired per-run ratios (each binary against the first, and against perf), per record and
of the profiler's whole CPU time.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SAMPLES_RE = re.compile(r"sonde record: (\d+) samples")
LOSS_RE = re.compile(r"loss: (\d+) records and (\d+) samples lost")
OFFCPU_RE = re.compile(r"off-CPU: (\d+) switch-outs")
WAKE_RE = re.compile(r"(\d+) wakeups seen")
PERF_WROTE_RE = re.compile(r"Captured and wrote [\d.]+ MB \S+ \((\d+) samples\)")
PERF_LOST_RE = re.compile(r"Processed (\d+) samples and lost ([\d.]+)%")
PERF_CHUNKS_RE = re.compile(r"lost (\d+) chunks")


def workload(build, case, seconds, timefile):
    """The profiled command and, for the system-wide cases, the load run beside it."""
    if case == "offcpu":
        return (["/usr/bin/time", "-f", "%U %S", "-o", timefile,
                 os.path.join(build, "progs", "pingpong"), str(seconds)], None)
    # the load outlives the recording (killed after it), which runs `sleep`
    load = [os.path.join(build, "progs", "spin_threads"), "4", str(seconds + 30)]
    return ["sleep", str(seconds)], load


HAS_BACKENDS = {}


def has_backends(sonde):
    """Whether this sonde has --off-cpu-backend: a build from before the BPF backend records
    off-CPU with perf events only, which is then what it is measured with."""
    if sonde not in HAS_BACKENDS:
        p = subprocess.run([sonde, "record", "--help"], capture_output=True, text=True)
        HAS_BACKENDS[sonde] = "--off-cpu-backend" in p.stdout + p.stderr
    return HAS_BACKENDS[sonde]


def sonde_argv(sonde, case, out, backend):
    if case == "offcpu":
        extra = ["--off-cpu-backend", backend] if backend and has_backends(sonde) else []
        return [sonde, "record", "--off-cpu"] + extra + ["-o", out, "--"]
    freq = "999" if case == "a999" else "10000"
    return [sonde, "record", "-a", "-F", freq, "-o", out, "--"]


def perf_argv(case, out, fp):
    cg = ["-g"] if fp else ["--call-graph", "dwarf"]
    if case == "offcpu":
        return ["perf", "record", "-e", "sched:sched_switch"] + cg + ["-o", out, "--"]
    freq = "999" if case == "a999" else "10000"
    return ["perf", "record", "-a", "-F", freq] + cg + ["-o", out, "--"]


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def profiler_cpu(argv, timefile, limit):
    """The profiler's CPU seconds and its stderr; a launched workload's own time (timefile,
    when it exists) is taken off."""
    if os.path.exists(timefile):
        os.unlink(timefile)
    before = children_cpu()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        # e.g. perf -a blocked opening a /tmp/perf-PID.map that is a FIFO nobody writes
        sys.exit("%s did not end within %d s" % (" ".join(argv), limit))
    total = children_cpu() - before
    if p.returncode != 0:
        sys.exit("%s failed (%d):\n%s%s" % (" ".join(argv), p.returncode, p.stdout, p.stderr))
    if os.path.exists(timefile):
        with open(timefile) as f:
            u, s = f.read().split()[-2:]
        total -= float(u) + float(s)
    return total, p.stderr


def sonde_counts(err):
    m = SAMPLES_RE.search(err)
    kept = int(m.group(1)) if m else 0
    for rx in (OFFCPU_RE, WAKE_RE):
        m = rx.search(err)
        kept += int(m.group(1)) if m else 0
    m = LOSS_RE.search(err)
    lost = int(m.group(1)) + int(m.group(2)) if m else 0
    return kept, lost


def perf_counts(err):
    m = PERF_WROTE_RE.search(err)
    kept = int(m.group(1)) if m else 0
    m = PERF_LOST_RE.search(err)
    lost = round(int(m.group(1)) * float(m.group(2)) / 100) if m else 0
    if not m:
        m = PERF_CHUNKS_RE.search(err)
        lost = int(m.group(1)) if m else 0
    return kept, lost


def med_range(v, fmt):
    if not v:
        return "-"
    return (fmt + " [" + fmt + "-" + fmt + "]") % (statistics.median(v), min(v), max(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=5)
    ap.add_argument("-s", "--seconds", type=float, default=3)
    ap.add_argument("-b", "--build", default="build/release")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--perf-fp", action="store_true")
    ap.add_argument("--off-cpu-backend", choices=("bpf", "perf"))
    ap.add_argument("--case", action="append", choices=("offcpu", "a999", "a10k"))
    ap.add_argument("sonde", nargs="+")
    a = ap.parse_args()
    cases = a.case or ["offcpu", "a999", "a10k"]
    have_perf = not a.no_perf and shutil.which("perf") is not None
    names = ["sonde%d" % i if len(a.sonde) > 1 else "sonde" for i in range(len(a.sonde))]
    peer = "perf-fp" if a.perf_fp else "perf-dwarf"
    profilers = list(zip(names, a.sonde)) + ([(peer, "perf")] if have_perf else [])
    tmp = tempfile.mkdtemp(prefix="sonde-pipeline-bench.")
    timefile, out = os.path.join(tmp, "time"), os.path.join(tmp, "out")
    res = {c: {n: {"cpu": [], "kept": [], "lost": [], "per": []} for n, _ in profilers}
           for c in cases}
    try:
        for rep in range(a.runs):
            for c in cases:
                line = []
                for name, path in profilers:
                    wl, load = workload(a.build, c, a.seconds, timefile)
                    argv = (perf_argv(c, out + ".data", a.perf_fp) if name == peer
                            else sonde_argv(path, c, out + ".spool", a.off_cpu_backend)) + wl
                    bg = subprocess.Popen(load) if load else None
                    try:
                        if bg:
                            time.sleep(0.2)  # its threads started, as a busy machine's are
                        cpu, err = profiler_cpu(argv, timefile, int(a.seconds) * 10 + 60)
                    finally:
                        if bg:
                            bg.kill()
                            bg.wait()
                    kept, lost = (perf_counts if name == peer else sonde_counts)(err)
                    r = res[c][name]
                    r["cpu"].append(cpu)
                    r["kept"].append(kept)
                    r["lost"].append(lost)
                    r["per"].append(1e6 * cpu / kept if kept else float("nan"))
                    line.append("%s %.3fs %d kept %d lost" % (name, cpu, kept, lost))
                print("run %d %s: %s" % (rep + 1, c, "; ".join(line)), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("%d runs of %g s each; CPU is the profiler's own (user+sys), per record in us" % (
        a.runs, a.seconds))
    for n, p in profilers:
        print("  %s = %s" % (n, p))
    for c in cases:
        print("%s:" % c)
        for name, _ in profilers:
            r = res[c][name]
            print("  %-10s cpu %s s  records %s  lost %s  cpu/record %s us" % (
                name, med_range(r["cpu"], "%.3f"), med_range(r["kept"], "%.0f"),
                med_range(r["lost"], "%.0f"), med_range(r["per"], "%.2f")))
        def paired(name, other, what):
            return [x / y for x, y in zip(res[c][name][what], res[c][other][what]) if y > 0]
        for name in names[1:]:
            for what, label in (("per", "cpu per record"), ("cpu", "cpu")):
                print("  %s/%s %s: %s (paired per run)" % (
                    name, names[0], label, med_range(paired(name, names[0], what), "%.2f")))
        if have_perf:
            for name in names:
                for what, label in (("per", "cpu per record"), ("cpu", "cpu")):
                    print("  %s/%s %s: %s (paired per run)" % (
                        name, peer, label, med_range(paired(name, peer, what), "%.2f")))


if __name__ == "__main__":
    main()
