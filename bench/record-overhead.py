#!/usr/bin/env python3
"""Recording overhead: split unprofiled, under `sonde record`, and under `perf record -g`.

usage: bench/record-overhead.py [BUILD_DIR] [REPS] [SECONDS]   (from the source tree, after make)

Each repetition runs the three modes back to back (interleaved, so load from other users of
the machine hits all of them alike) on `progs/split SECONDS` at 999 Hz; perf samples the same
software event sonde uses on this machine (cpu-clock) with frame-pointer call graphs.

split runs for a fixed wall time, so a profiler's cost does not show in split's duration: it
shows as CPU. The profiler attaches to split by pid, right after split starts, so the target's
and the profiler's CPU are measured apart (wait4 of each):

  work       split's user CPU (what it computes; the in-kernel sampling cost lands in its
             system CPU)
  cost       split's user + system CPU + the profiler's CPU
  slowdown   cost / work, relative to the same ratio unprofiled: the CPU the machine spends
             per unit of split's work. This does not depend on how much CPU split got
             (the machine is shared), unlike wall or raw CPU times, which are printed too.

Medians over the repetitions; the goal is sonde's slowdown <= perf's.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def cpu_of(ru):
    return ru.ru_utime, ru.ru_stime


def run_mode(split_argv, profiler_argv):
    t0 = time.monotonic()
    target = subprocess.Popen(split_argv, stdout=subprocess.DEVNULL)
    prof = None
    if profiler_argv:
        prof = subprocess.Popen(profiler_argv + [str(target.pid)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
    _, status, ru = os.wait4(target.pid, 0)
    target.returncode = os.waitstatus_to_exitcode(status)
    user, system = cpu_of(ru)
    prof_cpu, err = 0.0, ""
    if prof:
        err = prof.stderr.read().decode()
        _, pstatus, pru = os.wait4(prof.pid, 0)
        prof.returncode = os.waitstatus_to_exitcode(pstatus)
        prof_cpu = sum(cpu_of(pru))
        if prof.returncode != 0:
            sys.exit("%s failed (%d): %s" % (profiler_argv[0], prof.returncode, err[-500:]))
    wall = time.monotonic() - t0
    if target.returncode != 0:
        sys.exit("split failed (%d)" % target.returncode)
    return {"wall": wall, "user": user, "sys": system, "prof": prof_cpu, "err": err}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build/release"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    seconds = sys.argv[3] if len(sys.argv) > 3 else "5"
    split = [os.path.join(build, "progs", "split"), seconds]
    sonde = os.path.join(build, "sonde")
    tmp = tempfile.mkdtemp()
    spool = os.path.join(tmp, "bench.spool")
    pdata = os.path.join(tmp, "perf.data")
    modes = {
        "unprofiled": None,
        "sonde": [sonde, "record", "-F", "999", "-o", spool, "-p"],
        "perf": ["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "999", "-o", pdata,
                 "-p"],
    }
    res = {m: [] for m in modes}
    for rep in range(reps):
        for m, argv in modes.items():
            r = run_mode(split, argv)
            r["slow"] = (r["user"] + r["sys"] + r["prof"]) / r["user"]
            res[m].append(r)
            line = ("rep %d %-10s wall %6.3f s  split user %6.3f s sys %5.3f s  profiler %5.3f s"
                    "  cost/work %.4f" % (rep + 1, m, r["wall"], r["user"], r["sys"], r["prof"],
                                          r["slow"]))
            if m == "sonde" and r["err"].strip():
                line += "  | " + r["err"].strip().splitlines()[0].replace("sonde record: ", "")
            print(line, flush=True)

    def med(m, k):
        return statistics.median(r[k] for r in res[m])

    base = med("unprofiled", "slow")
    print("\nmedians of %d repetitions, split %s s, 999 Hz:" % (reps, seconds))
    slow = {}
    for m in modes:
        slow[m] = med(m, "slow") / base
        print("  %-10s wall %6.3f s  split user %6.3f s sys %5.3f s  profiler %5.3f s  "
              "slowdown x%.4f" % (m, med(m, "wall"), med(m, "user"), med(m, "sys"),
                                  med(m, "prof"), slow[m]))
    print("sonde overhead %.2f%%, perf overhead %.2f%%: sonde/perf slowdown ratio %.4f "
          "(<= 1: sonde costs no more than perf)" %
          ((slow["sonde"] - 1) * 100, (slow["perf"] - 1) * 100, slow["sonde"] / slow["perf"]))
    for f in (spool, pdata, pdata + ".old"):
        if os.path.exists(f):
            os.unlink(f)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
