#!/usr/bin/env python3
"""System-wide recording: `sonde record -a` against `perf record -a -g` and
`perf record -a --call-graph dwarf`, on a machine running two busy processes.

usage: bench/system-wide.py [BUILD_DIR] [REPS] [SECONDS]   (from the source tree, after make)

Each repetition starts two `progs/split` processes (never named to the profilers), then runs
the three recorders one after the other for SECONDS each (interleaved, so load from other
users of the machine hits all of them alike), at 999 Hz on the software cpu-clock (the
event sonde uses on this machine), each with kernel frames (perf's default; sonde's with -a):

  cpu     the profiler's own user + system CPU (wait4), the whole run: start-up (sonde reads
          /proc and builds the CFI tables of the running processes, perf synthesizes) included
  rss     the profiler's peak resident memory (ru_maxrss), ring pages it touched included
  lost    samples and records the kernel dropped (sonde: its summary's loss line; perf: its
          end-of-run "Processed N samples and lost P%" line, as a count)
  samples samples written

Medians over the repetitions and sonde's ratios to each perf mode; the goal is lost = 0.
perf writes raw stack copies for --call-graph dwarf and unwinds later (perf report), so its
CPU figure leaves that work out; sonde unwinds while recording.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(argv):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("%s failed (%d): %s" % (argv[0], code, err[-800:]))
    return {"wall": time.monotonic() - t0, "cpu": ru.ru_utime + ru.ru_stime,
            "rss": ru.ru_maxrss / 1024.0, "err": err}


def sonde_counts(err):
    m = re.search(r"(\d+) samples \((\d+) written", err)
    l = re.search(r"loss: (\d+) records and (\d+) samples lost", err)
    return int(m.group(2)), int(l.group(1)) + int(l.group(2))


def perf_counts(pdata, err):
    out = subprocess.run(["perf", "report", "-i", pdata, "--stats"], capture_output=True,
                         text=True).stdout
    samples = re.search(r"SAMPLE events:\s+(\d+)", out)
    n = int(samples.group(1)) if samples else 0
    # perf record's own end-of-run line: "Processed N samples and lost P%!"
    lost = re.search(r"Processed (\d+) samples and lost ([0-9.]+)%", err)
    n_lost = round(int(lost.group(1)) * float(lost.group(2)) / 100) if lost else 0
    return n, n_lost


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    seconds = sys.argv[3] if len(sys.argv) > 3 else "5"
    split = [os.path.join(build, "progs", "split"), str(int(float(seconds)) * 3 + 10)]
    sonde = os.path.join(build, "sonde")
    tmp = tempfile.mkdtemp()
    spool = os.path.join(tmp, "bench.spool")
    pdata = os.path.join(tmp, "perf.data")
    modes = {
        "sonde -a": [sonde, "record", "-a", "-F", "999", "-d", seconds, "-o", spool],
        "perf -a -g": ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "999",
                       "-o", pdata, "--", "sleep", seconds],
        "perf -a dwarf": ["perf", "record", "-a", "--call-graph", "dwarf", "-e",
                          "cpu-clock", "-F", "999", "-o", pdata, "--", "sleep", seconds],
    }
    res = {m: [] for m in modes}
    for rep in range(reps):
        busy = [subprocess.Popen(split, stdout=subprocess.DEVNULL) for _ in range(2)]
        time.sleep(0.5)
        try:
            for m, argv in modes.items():
                r = run(argv)
                if m.startswith("sonde"):
                    r["samples"], r["lost"] = sonde_counts(r["err"])
                else:
                    r["samples"], r["lost"] = perf_counts(pdata, r["err"])
                res[m].append(r)
                print("rep %d %-14s wall %6.2f s  cpu %6.3f s  rss %7.1f MiB  samples %6d  "
                      "lost %d" % (rep + 1, m, r["wall"], r["cpu"], r["rss"], r["samples"],
                                   r["lost"]), flush=True)
        finally:
            for b in busy:
                b.kill()
                b.wait()

    def med(m, k):
        return statistics.median(r[k] for r in res[m])

    print("\nmedians of %d repetitions, %s s each, 999 Hz, two busy processes:" % (reps, seconds))
    for m in modes:
        print("  %-14s cpu %6.3f s  rss %7.1f MiB  samples %6d  lost %d (max %d)" %
              (m, med(m, "cpu"), med(m, "rss"), med(m, "samples"), med(m, "lost"),
               max(r["lost"] for r in res[m])))
    for m in ("perf -a -g", "perf -a dwarf"):
        print("sonde/%s: cpu x%.2f, rss x%.2f" %
              (m.replace("perf ", "perf record "), med("sonde -a", "cpu") / med(m, "cpu"),
               med("sonde -a", "rss") / med(m, "rss")))
    # the recordings and what the recorders kept of earlier ones (FILE.old, perf.data.old)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
