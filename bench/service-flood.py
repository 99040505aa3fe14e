#!/usr/bin/env python3
"""A root session's latency while a local user floods sonded with requests it never reads
the replies of (docs/service.md "Limits": held connections, turns).

usage: bench/service-flood.py [BUILD_DIR] [REPS] [CONNS]
       (as root, from the source tree, after make; defaults build/release 5 64)

Starts a root sonded on sockets in a temporary directory (with its `sonde probes`, which
serve linux.sys_stats) and times `sonde trace -d 500ms linux.sys_stats` REPS times on the
quiet service, then REPS times while a process running as nobody keeps CONNS consumer
connections pipelining 12-byte QueryServiceState requests without reading a reply (each
one the service closes is connected again at once). Prints the median and the worst wall
time of each, the attempts that failed (exit status, or no end within 60 s), how many
flooding connections the service closed, and sonded's RSS: before, its peak (VmHWM) and
after the flood. The trace itself lasts 0.5 s of each figure.
"""
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

B = sys.argv[1] if len(sys.argv) > 1 else "build/release"
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
CONNS = int(sys.argv[3]) if len(sys.argv) > 3 else 64
NOBODY = 65534
QUERY_SERVICE_STATE = 12  # ConsumerPort method id (src/service/host.c)


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def frame(body):
    return len(body).to_bytes(4, "little") + body


def bind_frame():
    # IPCFrame{request_id: 1, msg_bind_service(3){service_name(1)}}
    return frame(field_varint(2, 1) + field_bytes(3, field_bytes(1, b"ConsumerPort")))


def query_frame():
    # IPCFrame{request_id: 2, msg_invoke_method(5){service_id, method_id, args_proto}}
    inv = field_varint(1, 1) + field_varint(2, QUERY_SERVICE_STATE) + field_bytes(3, b"")
    return frame(field_varint(2, 2) + field_bytes(5, inv))


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def flooder(csock, closed_w):
    """As nobody: CONNS connections sending QueryServiceState for ever, never reading."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    bind, query = bind_frame(), query_frame() * 512
    conns = [None] * CONNS

    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(csock)
        except OSError:
            s.close()
            return None
        s.setblocking(False)
        return [s, bind]

    while True:
        progress = False
        for i in range(CONNS):
            if conns[i] is None:
                conns[i] = connect()
                continue
            s, pending = conns[i]
            try:
                n = s.send(pending)
                progress = True
                pending = pending[n:] or query
                conns[i][1] = pending
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                conns[i] = None
                os.write(closed_w, b"x")
        if not progress:
            time.sleep(0.001)


def trace_once(sonde, csock, out):
    t0 = time.monotonic()
    try:
        r = subprocess.run([sonde, "trace", "--socket", csock, "-o", out, "-d", "500ms",
                            "linux.sys_stats"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        ok = r.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    return time.monotonic() - t0, ok


def series(sonde, csock, out):
    times, failed = [], 0
    for _ in range(REPS):
        t, ok = trace_once(sonde, csock, out)
        times.append(t)
        failed += not ok
    return times, failed


def main():
    if os.geteuid() != 0:
        sys.exit("service-flood.py: run as root (the flood runs as nobody)")
    tmp = tempfile.mkdtemp(prefix="sonde-flood.")
    os.chmod(tmp, 0o755)
    psock, csock, xsock = (os.path.join(tmp, n) for n in ("p.sock", "c.sock", "x.sock"))
    sonded = subprocess.Popen([os.path.join(B, "sonded"), "-p", psock, "-c", csock,
                               "-x", xsock], stderr=subprocess.DEVNULL)
    flood_pid = None
    try:
        for _ in range(100):
            if os.path.exists(csock):
                break
            time.sleep(0.1)
        sonde = os.path.join(B, "sonde")
        out = os.path.join(tmp, "t.pftrace")
        trace_once(sonde, csock, out)  # the probes child registers its data sources
        quiet, quiet_failed = series(sonde, csock, out)
        rss0 = status_kb(sonded.pid, "VmRSS")
        closed_r, closed_w = os.pipe()
        flood_pid = os.fork()
        if flood_pid == 0:
            os.close(closed_r)
            try:
                flooder(csock, closed_w)
            finally:
                os._exit(1)
        os.close(closed_w)
        os.set_blocking(closed_r, False)
        time.sleep(2)  # the flood builds up before the first measurement
        flooded, flood_failed = series(sonde, csock, out)
        peak = status_kb(sonded.pid, "VmHWM")
        closes = 0
        try:
            while True:
                b = os.read(closed_r, 65536)
                if not b:
                    break
                closes += len(b)
        except BlockingIOError:
            pass
        os.kill(flood_pid, signal.SIGKILL)
        os.waitpid(flood_pid, 0)
        flood_pid = None
        time.sleep(2)  # housekeeping returns the flooders' memory within a second
        rss1 = status_kb(sonded.pid, "VmRSS")
        print(f"sonde trace -d 500ms linux.sys_stats, {REPS} runs each, "
              f"{CONNS} flooding connections of nobody")
        print(f"quiet:   median {statistics.median(quiet):.3f} s, worst {max(quiet):.3f} s, "
              f"failed {quiet_failed}")
        print(f"flooded: median {statistics.median(flooded):.3f} s, worst {max(flooded):.3f} s, "
              f"failed {flood_failed}; flooding connections closed: {closes}")
        print(f"ratio (median flooded / median quiet): "
              f"{statistics.median(flooded) / statistics.median(quiet):.2f}")
        print(f"sonded RSS: {rss0} kB before, peak {peak} kB, {rss1} kB after the flood")
    finally:
        if flood_pid:
            os.kill(flood_pid, signal.SIGKILL)
            os.waitpid(flood_pid, 0)
        sonded.terminate()
        sonded.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
