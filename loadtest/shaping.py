#!/usr/bin/env python3
"""Shaping (issue 17): 64 connections bursting at a leaky_bucket route.

    python3 loadtest/shaping.py            full run (about 4 minutes)
    QUICK=1 python3 loadtest/shaping.py    short run (about 1 minute), printed only

Starts, on free 127.0.0.1 ports: redis-server (no persistence), a recording upstream (this
script with --upstream: HTTP/1.1 keep-alive, answers `200 ok`, notes the kernel's receive
timestamp of every request, SO_TIMESTAMPNS, on the monotonic clock), an nginx upstream (for the unthrottled token bucket reference
only) and sluice. It measures:

  evenness   wrk -c64 back to back against a leaky bucket (rate 200/s, and 5000/s), then 64
             connections each pipelining a burst of 5 requests at the same instant every 2 s:
             the intervals between requests as the upstream receives them against 1/rate, the
             most requests in any 1 s (and 100 ms) window against the rate, the waits.
  CPU        sluice's CPU per forwarded request (all threads, /proc/PID/task/*/schedstat, and
             /proc/PID/stat as run.sh reads it) on the shaped route against a token bucket
             route that never limits, at the same request rate (wrk paced by a delay() script)
             and, as in run.sh's token_bucket scenario, unpaced against nginx.
  memory     sluice's VmRSS with WAITING idle keep-alive connections, then with a request held
             on each of them by a leaky bucket of 1 per minute (sluice_requests_waiting read
             from /metrics), MEM_ROUNDS times, Redis flushed in between: bytes per waiting
             request, and whether the memory is reused.

Writes loadtest/results/shaping.md (not with QUICK=1). Everything it starts is stopped at
the end, on an error and on Ctrl-C; every wait is bounded. Standard library only; needs wrk,
redis-server, nginx (Debian: wrk, redis-server, nginx-light) and a sluice binary.

Settings (environment): SLUICE=build/sluice  RESULTS=loadtest/results  DURATION=15 (QUICK 5)
  seconds per wrk run  ROUNDS=2 (QUICK 1) times each run  RATE=200  FAST_RATE=5000  CONNS=64  WORKERS=2  WAITING=10000 (QUICK 2000)
  MEM_ROUNDS=3 (QUICK 2)  BURSTS=8 (QUICK 3)  BURST_SIZE=5 (requests per connection per
  burst)  BURST_PERIOD=2 (s)  KEEP=1 keeps the work directory (configs, logs, raw arrival times, wrk outputs).
"""

import asyncio
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idle_conns import read_response as read_status  # noqa: E402  (one response with a Content-Length body: its status)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
QUICK = os.environ.get("QUICK") == "1"
SLUICE = os.environ.get("SLUICE", os.path.join(ROOT, "build", "sluice"))
RESULTS = os.environ.get("RESULTS", os.path.join(HERE, "results"))
DURATION = int(os.environ.get("DURATION", "5" if QUICK else "15").rstrip("s"))  # seconds; "15s" too
ROUNDS = int(os.environ.get("ROUNDS", "1" if QUICK else "2"))
RATE = int(os.environ.get("RATE", "200"))
FAST_RATE = int(os.environ.get("FAST_RATE", "5000"))
CONNS = int(os.environ.get("CONNS", "64"))
WORKERS = int(os.environ.get("WORKERS", "2"))
WAITING = int(os.environ.get("WAITING", "2000" if QUICK else "10000"))
BURSTS = int(os.environ.get("BURSTS", "3" if QUICK else "8"))
BURST_SIZE = int(os.environ.get("BURST_SIZE", "5"))
BURST_PERIOD = float(os.environ.get("BURST_PERIOD", "2"))
MEM_ROUNDS = int(os.environ.get("MEM_ROUNDS", "2" if QUICK else "3"))
KEEP = os.environ.get("KEEP") == "1"
BUCKET_BURST = 2000  # the shaped routes' burst: far above CONNS, so nothing is limited
EDGE = 1.0  # seconds left out at each end of a run for the evenness figures


def say(msg):
    print(f"shaping: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The recording upstream (runs as `shaping.py --upstream PORT` in a process of its own).

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; the Python module does not name it


def upstream_main(port):
    """Answers every request `200 ok` on keep-alive connections and notes when each arrived:
    the kernel's receive timestamp of the segment that carried it (SO_TIMESTAMPNS, taken
    when sluice's write reached the socket, whatever this process was doing), converted to
    the monotonic clock, and this process's own time.monotonic_ns() when it read it.
    GET /__take returns the pairs noted since the last take, one "kernel user" a line, and
    forgets them."""
    import selectors
    import struct

    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n"
    arrivals = []
    offset = time.time_ns() - time.monotonic_ns()  # realtime (the stamps) to monotonic
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    try:
        listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # accepted sockets inherit it
    except OSError:
        pass
    listener.listen(4096)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    parent = os.getppid()
    space = socket.CMSG_SPACE(16)
    while os.getppid() == parent:  # ends with its parent, whatever happens to the parent
        for key, _ in sel.select(0.5):
            if key.data is None:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                except OSError:
                    pass
                conn.settimeout(5)
                sel.register(conn, selectors.EVENT_READ, [b""])
                continue
            conn, state = key.fileobj, key.data
            try:
                data, ancillary, _, _ = conn.recvmsg(65536, space)
            except OSError:
                data = b""
            if not data:
                sel.unregister(conn)
                conn.close()
                continue
            user = time.monotonic_ns()
            kernel = user
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack("qq", value[:16])
                    kernel = sec * 1_000_000_000 + nsec - offset
            buf = state[0] + data
            out = []
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, buf = buf[:end + 4], buf[end + 4:]
                if head.startswith(b"GET /__take "):
                    body = "".join(f"{k} {u}\n" for k, u in arrivals).encode()
                    arrivals.clear()
                    out.append(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                else:
                    arrivals.append((kernel, user))
                    out.append(ok)
            state[0] = buf
            try:
                conn.sendall(b"".join(out))
            except OSError:
                sel.unregister(conn)
                conn.close()


# ---------------------------------------------------------------------------------------------
# Processes: every one started is recorded and stopped at the end (TERM, then KILL).

PROCS = []


def spawn(args, log=None, **kw):
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, **kw)
    if log:
        out.close()
    PROCS.append(proc)
    return proc


def stop(proc, sig=signal.SIGTERM, grace=10.0):
    """Stops one process we started; returns its exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            say(f"pid {proc.pid} ({os.path.basename(proc.args[0])}) did not stop: SIGKILL")
            proc.kill()
            proc.wait(5)
    if proc in PROCS:
        PROCS.remove(proc)
    return proc.returncode


def stop_all():
    for proc in list(PROCS):
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + 10
    for proc in list(PROCS):
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    PROCS.clear()


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# ---------------------------------------------------------------------------------------------
# Helpers.

def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_until(predicate, timeout, what, proc=None, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with status {proc.returncode}")
        time.sleep(interval)
    raise RuntimeError(f"{what}: not within {timeout} s")


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sched_ns(pid):
    """CPU time of every thread of `pid` (user + system), in ns, from schedstat."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def stat_ticks(pid):
    """user + system CPU of the process (all threads, exited ones included), clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


TICK = os.sysconf("SC_CLK_TCK")


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def worst_window(times_ns, width_ns):
    """The most timestamps in any window [t, t + width)."""
    best, i = 0, 0
    for j, t in enumerate(times_ns):
        while t - times_ns[i] >= width_ns:
            i += 1
        best = max(best, j - i + 1)
    return best


# ---------------------------------------------------------------------------------------------
# The test bed.

class Bed:
    def __init__(self, workdir):
        self.w = workdir
        self.redis_port, self.rec_port, self.nginx_port = free_ports(3)
        self.sluice = None
        self.sluice_log = None
        self.anomalies = []

    # -- processes ------------------------------------------------------------------------
    def start_redis(self):
        self.redis = spawn(["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "",
                            "--appendonly", "no", "--daemonize", "no", "--dir", self.w,
                            "--logfile", os.path.join(self.w, "redis.log")])
        wait_until(lambda: self.redis_cli("PING") == "PONG", 10, "redis-server", self.redis)

    def redis_cli(self, *args):
        try:
            return subprocess.run(["redis-cli", "-p", str(self.redis_port), *args], capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except subprocess.TimeoutExpired:
            return ""

    def redis_calls(self):
        text = self.redis_cli("INFO", "commandstats")
        return sum(int(c) for c in re.findall(r"cmdstat_(?:eval|evalsha|fcall):calls=(\d+)", text))

    def start_recorder(self):
        self.recorder = spawn([sys.executable, os.path.abspath(__file__), "--upstream", str(self.rec_port)],
                              log=os.path.join(self.w, "recorder.log"))
        wait_until(lambda: accepts(self.rec_port), 10, "recording upstream", self.recorder)

    def take_arrivals(self, lags=None, raw=None):
        """The arrival times (kernel stamps, monotonic ns, sorted) since the last take; the
        recorder's own lag behind each stamp (ms) is appended to `lags` when given, with KEEP
        the "stamp lag_ns" pairs are written to the file `raw`."""
        _, body = http_get(f"http://127.0.0.1:{self.rec_port}/__take", timeout=30)
        pairs = sorted(tuple(map(int, line.split())) for line in body.decode().splitlines() if line)
        if lags is not None:
            lags.extend((u - k) / 1e6 for k, u in pairs)
        if KEEP and raw:
            with open(os.path.join(self.w, raw), "w") as f:
                f.write("".join(f"{k} {u - k}\n" for k, u in pairs))
        return [k for k, _ in pairs]

    def start_nginx(self):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        d = os.path.join(self.w, "nginx")
        os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
        user = "user root;" if os.getuid() == 0 else ""
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""{user}
daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; default_type text/plain;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  keepalive_requests 1000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{self.nginx_port} backlog=4096; location / {{ return 200 "ok\\n"; }} }}
}}
""")
        self.nginx = spawn([nginx, "-e", os.path.join(d, "error.log"), "-p", d, "-c", conf])
        wait_until(lambda: accepts(self.nginx_port), 10, "nginx upstream", self.nginx)

    def start_sluice(self, name, routes, server_extra=""):
        self.port, self.admin = free_ports(2)
        conf = os.path.join(self.w, f"sluice-{name}.yaml")
        with open(conf, "w") as f:
            f.write(f"""# generated by loadtest/shaping.py ({name})
server:
  listen: ["127.0.0.1:{self.port}"]
  workers: {WORKERS}
  idle_timeout: 600s
{server_extra}admin:
  listen: "127.0.0.1:{self.admin}"
store:
  type: redis
  redis: {{address: "127.0.0.1:{self.redis_port}", timeout: 2s}}
upstreams:
  rec: {{servers: ["127.0.0.1:{self.rec_port}"]}}
  nginx: {{servers: ["127.0.0.1:{self.nginx_port}"]}}
routes:
{routes}
logging:
  level: info
  access_log: "off"
  summary_interval: 0
""")
        check = subprocess.run([SLUICE, "--check", "-c", conf], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"sluice refused the generated config {conf}:\n{check.stdout}{check.stderr}")
        self.sluice_log = os.path.join(self.w, f"sluice-{name}.log")
        self.sluice = spawn([SLUICE, "-c", conf], log=self.sluice_log)

        def ready():
            try:
                return http_get(f"http://127.0.0.1:{self.admin}/readyz", timeout=1)[0] == 200
            except OSError:
                return False
        wait_until(ready, 20, "sluice ready", self.sluice)

    def stop_sluice(self, name):
        rc = stop(self.sluice, grace=40)
        if rc != 0:
            self.anomalies.append(f"{name}: sluice exited with status {rc} on SIGTERM")
        with open(self.sluice_log, errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 1 and parts[1] in ("warn", "warning", "error", "err", "critical"):
                    self.anomalies.append(f"{name}: sluice log: {line.strip()}")
        self.sluice = None

    def alive(self):
        return self.sluice is not None and self.sluice.poll() is None

    # -- sluice's /metrics ----------------------------------------------------------------
    def metrics(self):
        _, body = http_get(f"http://127.0.0.1:{self.admin}/metrics", timeout=10)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    # -- one measured wrk run -------------------------------------------------------------
    def cpu(self):
        return {"sluice_ns": sched_ns(self.sluice.pid), "sluice_ticks": stat_ticks(self.sluice.pid),
                "redis_ns": sched_ns(self.redis.pid), "redis_calls": self.redis_calls()}

    def wrk(self, path, seconds, label, script=None, conns=CONNS):
        out = os.path.join(self.w, f"wrk-{label}.txt")
        args = ["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s", "--latency"]
        if script:
            args += ["-s", script]
        args.append(f"http://127.0.0.1:{self.port}{path}")
        with open(out, "w") as f:
            proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            PROCS.append(proc)
            try:
                proc.wait(seconds + 30)
            except subprocess.TimeoutExpired:
                self.anomalies.append(f"{label}: wrk did not finish within {seconds + 30} s")
            stop(proc, grace=5)
        with open(out) as f:
            return parse_wrk(f.read())


def parse_wrk(text):
    def ms(v):
        m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
        if not m:
            return float("nan")
        return float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[m.group(2)]
    r = {"rps": 0.0, "requests": 0, "non2xx": 0, "errors": 0, "p50": float("nan"), "p99": float("nan")}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "50%":
            r["p50"] = ms(f[1])
        elif len(f) >= 2 and f[0] == "99%":
            r["p99"] = ms(f[1])
        elif line.startswith("Requests/sec:"):
            r["rps"] = float(f[1])
        elif "requests in" in line:
            r["requests"] = int(f[0])
        elif line.strip().startswith("Non-2xx or 3xx responses:"):
            r["non2xx"] = int(f[-1])
        elif line.strip().startswith("Socket errors:"):
            r["errors"] = sum(int(x) for x in re.findall(r"\d+", line))
    return r


def route_count(m, route, code=None):
    total = 0
    for k, v in m.items():
        if k.startswith("sluice_requests_total{") and f'route="{route}"' in k:
            if code is None or f'code="{code}"' in k:
                total += v
    return total


def decision_count(m, route, decision):
    return sum(v for k, v in m.items() if k.startswith("sluice_ratelimit_decisions_total{")
               and f'route="{route}"' in k and f'decision="{decision}"' in k)


def decisions(m, route):
    return sum(v for k, v in m.items() if k.startswith("sluice_ratelimit_decisions_total{")
               and f'route="{route}"' in k)


def pacing_script(workdir, rate):
    """A wrk script that holds each connection to about rate / CONNS requests a second: a
    random delay (mean CONNS / rate) before each request, so the connections do not move in
    step."""
    mean_ms = 1000.0 * CONNS / rate
    path = os.path.join(workdir, f"pace-{rate}.lua")
    with open(path, "w") as f:
        f.write(f"-- generated by loadtest/shaping.py: about {rate} requests/s over {CONNS} connections\n"
                f"math.randomseed(os.time())\n"
                f"function delay() return math.floor(math.random() * {2 * mean_ms:.3f} + 0.5) end\n")
    return path


# ---------------------------------------------------------------------------------------------
# Phase 1: steady load, evenness and CPU per request.

def leaky(name, prefix, rate, upstream="rec"):
    return (f"  - name: {name}\n    match: {{path_prefix: {prefix}}}\n    upstream: {upstream}\n    limits:\n"
            f"      - {{name: shape, algorithm: leaky_bucket, rate: {rate}, per: 1s, burst: {BUCKET_BURST}, key: []}}\n")


def token_bucket(name, prefix, upstream):
    return (f"  - name: {name}\n    match: {{path_prefix: {prefix}}}\n    upstream: {upstream}\n    limits:\n"
            "      - {name: per_client, algorithm: token_bucket, rate: 1000000, per: 1s, burst: 1000000, "
            "key: [client_ip]}\n")


def evenness(times, rate):
    """Figures of the arrival times (ns, sorted) of one steady stretch."""
    n = len(times)
    t_ms = 1000.0 / rate
    if n < 3:
        return {"n": n}
    iv = [(b - a) / 1e6 for a, b in zip(times, times[1:])]
    mean = (times[-1] - times[0]) / 1e6 / (n - 1)
    # Offset of each arrival from an exact schedule, one per T from the first: the bucket never
    # empties here, so its turns are exactly that; what sluice adds (rounding, timers, the
    # decision's return trip) shows as the spread of these offsets, a rate error as a drift.
    t_ns = 1e9 / rate
    offsets = [(t - times[0] - i * t_ns) / 1e6 for i, t in enumerate(times)]
    return {
        "spread": max(offsets) - min(offsets),
        "n": n, "seconds": (times[-1] - times[0]) / 1e9, "mean": mean, "ratio": mean / t_ms,
        "min": min(iv), "p1": pct(iv, 1), "p50": pct(iv, 50), "p99": pct(iv, 99), "max": max(iv),
        "stdev": statistics.pstdev(iv), "early": sum(1 for x in iv if x < t_ms / 2),
        "w1s": worst_window(times, 1_000_000_000), "w100ms": worst_window(times, 100_000_000),
    }


def measured_run(bed, label, route, path, seconds, script=None):
    """One wrk run; sluice's CPU and decisions over it and the upstream's arrival times."""
    bed.take_arrivals()
    m0, c0 = bed.metrics(), bed.cpu()
    t0 = time.monotonic_ns()
    w = bed.wrk(path, seconds, label, script)
    t1 = time.monotonic_ns()
    time.sleep(0.3)  # the last answers (and the 499s of the requests left waiting) counted
    if not bed.alive():
        raise RuntimeError(f"sluice died during {label}; log: {bed.sluice_log}")
    c1, m1 = bed.cpu(), bed.metrics()
    lags = []
    arrivals = bed.take_arrivals(lags, f"arrivals-{label}.txt")
    forwarded = route_count(m1, route, 200) - route_count(m0, route, 200)
    answered = route_count(m1, route) - route_count(m0, route)
    wcount = m1.get("sluice_ratelimit_wait_seconds_count", 0) - m0.get("sluice_ratelimit_wait_seconds_count", 0)
    wsum = m1.get("sluice_ratelimit_wait_seconds_sum", 0) - m0.get("sluice_ratelimit_wait_seconds_sum", 0)
    r = {
        "label": label, "route": route, "wrk": w, "forwarded": forwarded, "other": answered - forwarded,
        "rps": forwarded / ((t1 - t0) / 1e9),
        "sluice_us": (c1["sluice_ns"] - c0["sluice_ns"]) / 1e3 / max(forwarded, 1),
        "sluice_tick_us": (c1["sluice_ticks"] - c0["sluice_ticks"]) * 1e6 / TICK / max(forwarded, 1),
        "redis_us": (c1["redis_ns"] - c0["redis_ns"]) / 1e3 / max(forwarded, 1),
        "calls": (c1["redis_calls"] - c0["redis_calls"]) / max(decisions(m1, route) - decisions(m0, route), 1),
        "delayed": decision_count(m1, route, "delayed") - decision_count(m0, route, "delayed"),
        "limited": decision_count(m1, route, "limited") - decision_count(m0, route, "limited"),
        "wait_ms": wsum / wcount * 1000 if wcount else 0.0, "waits": wcount,
        "arrivals": len(arrivals), "t0": t0, "t1": t1, "lags": lags,
        "store_errors": m1.get("sluice_store_errors_total", 0) - m0.get("sluice_store_errors_total", 0),
    }
    r["times"] = arrivals
    if KEEP:
        with open(os.path.join(bed.w, "runs.txt"), "a") as f:
            f.write(f"{label} t0={t0} t1={t1}\n")
    problems = []
    if w["non2xx"]:
        problems.append(f"{w['non2xx']} non-2xx answers (wrk)")
    if w["errors"]:
        problems.append(f"wrk socket errors {w['errors']}")
    if r["limited"]:
        problems.append(f"{r['limited']:.0f} limited")
    if r["store_errors"]:
        problems.append(f"{r['store_errors']:.0f} store errors")
    # Every 200 reached the upstream; so may a request whose client (wrk, stopping) went away
    # while the upstream answered (499): anything else is wrong.
    if (route.startswith("tb_rec") or route.startswith("shaped")) and not (
            forwarded <= len(arrivals) <= forwarded + r["other"]):
        problems.append(f"the upstream received {len(arrivals)}, sluice answered {forwarded:.0f} 200s "
                        f"and {r['other']:.0f} others")
    if r["other"] > CONNS:
        problems.append(f"{r['other']:.0f} answers other than 200 (at most {CONNS} expected: the requests "
                        "in flight when wrk stopped)")
    r["problems"] = problems
    for p in problems:
        bed.anomalies.append(f"{label}: {p}")
    return r


def phase_steady(bed):
    routes = (leaky("shaped_slow", "/slow", RATE) + leaky("shaped_fast", "/fast", FAST_RATE)
              + leaky("burst_slow", "/burst", RATE) + token_bucket("tb_rec", "/tb", "rec")
              + token_bucket("tb_nginx", "/max", "nginx"))
    bed.start_sluice("steady", routes, f"  max_waiting: 4096\n  max_connections: {CONNS * 4 + 1000}\n")
    say(f"sluice {bed.port} (admin {bed.admin}); warm-up")
    for path in ("/tb", "/max", "/slow", "/fast"):  # connections, pools, the Lua script
        bed.wrk(path, 1, f"warm{path.replace('/', '-')}")
    time.sleep(2)  # the warm-up's waiting requests are gone and the buckets empty again
    bed.take_arrivals()
    idle_s = 3 if QUICK else 5
    c0 = bed.cpu()
    time.sleep(idle_s)
    c1 = bed.cpu()
    idle_us_per_s = ((c1["sluice_ns"] - c0["sluice_ns"]) / 1e3 / idle_s,
                     (c1["redis_ns"] - c0["redis_ns"]) / 1e3 / idle_s)

    runs = {}
    plan = [
        ("shaped@slow", "shaped_slow", "/slow", None),
        ("token_bucket@slow", "tb_rec", "/tb", pacing_script(bed.w, RATE)),
        ("shaped@fast", "shaped_fast", "/fast", None),
        ("token_bucket@fast", "tb_rec", "/tb", pacing_script(bed.w, FAST_RATE)),
        ("token_bucket@max", "tb_nginx", "/max", None),
    ]
    for k in range(1, ROUNDS + 1):  # A B A B: noise that drifts over time hits both
        for label, route, path, script in plan:
            say(f"{label}, round {k}: wrk -c{CONNS} {DURATION} s on {path}")
            runs.setdefault(label, []).append(measured_run(bed, f"{label}-{k}", route, path, DURATION, script))
            time.sleep(1.5)
    bursts = phase_bursts(bed)
    bed.stop_sluice("steady")
    return runs, idle_us_per_s, bursts


# ---------------------------------------------------------------------------------------------
# Phase 2: bursts (64 connections, each pipelining BURST_SIZE requests every BURST_PERIOD s).

async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return status


async def burst_client(port, path, starts, results):
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: sluice-shaping\r\n\r\n".encode()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (OSError, asyncio.TimeoutError) as e:
        results.append((-1, "connect", repr(e), 0))
        return
    try:
        for k, start in enumerate(starts):
            await asyncio.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
            sent = time.monotonic_ns()
            writer.write(req * BURST_SIZE)
            for _ in range(BURST_SIZE):
                try:
                    status = await asyncio.wait_for(read_response(reader), BURST_PERIOD * 5)
                except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                    results.append((k, "error", repr(e), 0))
                    return
                results.append((k, status, "", time.monotonic_ns() - sent))
    finally:
        writer.close()


def phase_bursts(bed):
    say(f"bursts: {CONNS} connections x {BURST_SIZE} pipelined requests every {BURST_PERIOD:g} s, "
        f"{BURSTS} times, rate {RATE}/s")
    bed.take_arrivals()
    m0 = bed.metrics()
    first = time.monotonic_ns() + 500_000_000
    starts = [first + int(k * BURST_PERIOD * 1e9) for k in range(BURSTS)]
    results = []

    async def run():
        await asyncio.gather(*(burst_client(bed.port, "/burst", starts, results) for _ in range(CONNS)))
    asyncio.run(asyncio.wait_for(run(), BURSTS * BURST_PERIOD + 60))
    time.sleep(0.3)
    m1 = bed.metrics()
    lags = []
    arrivals = bed.take_arrivals(lags, "arrivals-bursts.txt")
    t_ms = 1000.0 / RATE
    per_burst = []
    intervals = []
    for k, start in enumerate(starts):
        end = start + int(BURST_PERIOD * 1e9)
        ts = [t for t in arrivals if start <= t < end]
        if not ts:
            continue
        intervals += [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
        per_burst.append({"n": len(ts), "first_ms": (ts[0] - start) / 1e6, "span_ms": (ts[-1] - ts[0]) / 1e6})
    statuses = {}
    for _, status, _, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    lat = [lat_ns / 1e6 for _, status, _, lat_ns in results if status == 200]
    wc = m1.get("sluice_ratelimit_wait_seconds_count", 0) - m0.get("sluice_ratelimit_wait_seconds_count", 0)
    ws = m1.get("sluice_ratelimit_wait_seconds_sum", 0) - m0.get("sluice_ratelimit_wait_seconds_sum", 0)
    b = {
        "statuses": statuses, "arrivals": len(arrivals), "per_burst": per_burst, "intervals": intervals,
        "lat": lat, "w1s": worst_window(arrivals, 1_000_000_000), "w100ms": worst_window(arrivals, 100_000_000),
        "expected_span": (CONNS * BURST_SIZE - 1) * t_ms, "wait_ms": ws / wc * 1000 if wc else 0.0,
        "delayed": decision_count(m1, "burst_slow", "delayed") - decision_count(m0, "burst_slow", "delayed"),
        "limited": decision_count(m1, "burst_slow", "limited") - decision_count(m0, "burst_slow", "limited"),
        "errors": [r for r in results if r[1] in ("error", "connect")][:3], "lags": lags,
    }
    sent = CONNS * BURST_SIZE * BURSTS
    if statuses.get(200, 0) != sent:
        bed.anomalies.append(f"bursts: {statuses.get(200, 0)} of {sent} requests answered 200 ({statuses})")
    if len(arrivals) != statuses.get(200, 0):
        bed.anomalies.append(f"bursts: the upstream received {len(arrivals)}, the clients got {statuses.get(200, 0)} 200s")
    return b


# ---------------------------------------------------------------------------------------------
# Phase 3: memory per waiting request.

def http_request(path, port):
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: sluice-shaping\r\n\r\n".encode()


def settle_rss(pid, seconds=2.0):
    """VmRSS once it stops moving (at most `seconds` of sampling)."""
    last, deadline = rss_kib(pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_kib(pid)
        if now == last:
            break
        last = now
    return last


def memory_round(bed, n, k):
    pid = bed.sluice.pid
    bed.redis_cli("FLUSHALL")
    m0 = bed.metrics()
    base = settle_rss(pid)
    socks, failed, first_error = [], 0, None
    idle_req, hold_req = http_request("/idle", bed.port), http_request("/hold", bed.port)
    t = time.monotonic()
    deadline = t + 120
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        s = socket.socket()
        try:
            s.settimeout(10)
            s.connect(("127.0.0.1", bed.port))
            s.sendall(idle_req)
            if read_status(s) != 200:
                raise ConnectionError("not a 200")
            socks.append(s)
        except OSError as e:
            failed += 1
            first_error = first_error or repr(e)
            s.close()
            if failed > 100 and not socks:
                break
    opened = len(socks)
    time.sleep(0.5)
    idle = settle_rss(pid)
    active = bed.metrics().get("sluice_connections_active", 0)
    t_hold = time.monotonic()
    for s in socks:
        try:
            s.sendall(hold_req)
        except OSError as e:
            failed += 1
            first_error = first_error or repr(e)
    # every one but the first (the bucket was empty: it goes at once) is held
    want = opened - 1
    waiting, seen_at = 0, time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now_waiting = bed.metrics().get("sluice_requests_waiting", 0)
        if now_waiting != waiting:
            waiting, seen_at = now_waiting, time.monotonic()
        if waiting >= want or time.monotonic() - seen_at > 5:
            break
        time.sleep(0.2)
    held_in = time.monotonic() - t_hold
    time.sleep(1)
    held = settle_rss(pid)
    m1 = bed.metrics()
    waiting = m1.get("sluice_requests_waiting", 0)
    # Hang up: every held request ends (499), nothing reaches the upstream.
    t_close = time.monotonic()
    for s in socks:
        s.close()
    released = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if bed.metrics().get("sluice_requests_waiting", 0) == 0:
            released = time.monotonic() - t_close
            break
        time.sleep(0.2)
    time.sleep(1)
    after = settle_rss(pid)
    m2 = bed.metrics()
    r = {
        "round": k, "opened": opened, "failed": failed, "first_error": first_error, "active": active,
        "waiting": waiting, "held_in": held_in, "base": base, "idle": idle, "held": held, "after": after,
        "released": released, "waiting_after": m2.get("sluice_requests_waiting", 0),
        "hold_499": route_count(m2, "hold", 499) - route_count(m0, "hold", 499),
        "hold_200": route_count(m2, "hold", 200) - route_count(m0, "hold", 200),
        "hold_other": route_count(m2, "hold") - route_count(m2, "hold", 499) - route_count(m2, "hold", 200)
        - (route_count(m0, "hold") - route_count(m0, "hold", 499) - route_count(m0, "hold", 200)),
    }
    if opened < n:
        bed.anomalies.append(f"memory round {k}: {opened} of {n} connections opened ({failed} failed: {first_error})")
    if waiting < want:
        bed.anomalies.append(f"memory round {k}: {waiting:.0f} requests waiting, expected {want}")
    if released is None:
        bed.anomalies.append(f"memory round {k}: sluice_requests_waiting still {r['waiting_after']:.0f} "
                             "30 s after the clients hung up")
    return r


def phase_memory(bed, n):
    routes = ("  - name: idle\n    match: {path_prefix: /idle}\n    upstream: rec\n"
              "  - name: hold\n    match: {path_prefix: /hold}\n    upstream: rec\n    limits:\n"
              f"      - {{name: shape, algorithm: leaky_bucket, rate: 1, per: 1m, burst: {n + 100}, key: []}}\n")
    bed.start_sluice("memory", routes, f"  max_waiting: {n + 1000}\n  max_connections: {n + 2000}\n")
    # warm: the Lua script, a few connections
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", bed.port), timeout=5)
        s.sendall(http_request("/idle", bed.port))
        read_status(s)
        s.close()
    bed.take_arrivals()
    rounds = []
    for k in range(1, MEM_ROUNDS + 1):
        say(f"memory round {k}: {n} idle keep-alive connections, then a request held on each")
        rounds.append(memory_round(bed, n, k))
        time.sleep(1)
    arrivals = len(bed.take_arrivals())
    forwarded_idle = sum(r["opened"] for r in rounds)
    hold_200 = sum(r["hold_200"] for r in rounds)
    if arrivals != forwarded_idle + hold_200:
        bed.anomalies.append(f"memory: the upstream received {arrivals}, expected {forwarded_idle} /idle + "
                             f"{hold_200:.0f} /hold (nothing held may reach it after its client hung up)")
    bed.stop_sluice("memory")
    return rounds


# ---------------------------------------------------------------------------------------------
# Report.

def machine():
    def run(args):
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=10)
            return (p.stdout + p.stderr).strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1048576
    osname = "?"
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return {
        "cpu": f"{os.cpu_count()} cores, {cpu}; memory {mem:.1f} GiB",
        "os": f"{osname}, kernel {os.uname().sysname} {os.uname().release}",
        "versions": (f"{run([SLUICE, '--version']).splitlines()[0]} (binary {SLUICE}; source tree at "
                     f"{run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD']) or '?'}), "
                     f"{run([nginx, '-v']).split(': ')[-1]}, "
                     f"wrk {' '.join(run(['wrk', '-v']).split()[1:2])}, "
                     f"Redis {re.sub(r'^v=', '', run(['redis-server', '--version']).split()[2])}, "
                     f"Python {sys.version.split()[0]}"),
    }


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def lag_text(lags):
    if not lags:
        return "no arrivals"
    return f"p50 {pct(lags, 50):.3f} / p99 {pct(lags, 99):.3f} / max {max(lags):.3f} ms"


def report(runs, idle, bursts, mem, started, load_before):
    info = machine()
    idle_sluice, idle_redis = idle
    t_slow, t_fast = 1000.0 / RATE, 1000.0 / FAST_RATE
    lines = [
        f"# Shaping: {CONNS} connections bursting at a leaky_bucket route",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `{'QUICK=1 ' if QUICK else ''}python3 "
        f"loadtest/shaping.py` with DURATION={DURATION} RATE={RATE} FAST_RATE={FAST_RATE} CONNS={CONNS} "
        f"WORKERS={WORKERS} WAITING={WAITING} MEM_ROUNDS={MEM_ROUNDS} BURSTS={BURSTS} BURST_SIZE={BURST_SIZE} "
        f"BURST_PERIOD={BURST_PERIOD:g}; took {time.monotonic() - started:.0f} s.",
        "",
        "## Machine",
        "",
        f"- CPU: {info['cpu']}",
        f"- {info['os']}; load average before: {load_before}, after: {loadavg()}",
        f"- {info['versions']}",
        "- Everything on 127.0.0.1 of this one machine: wrk (2 threads), sluice "
        f"({WORKERS} workers, Redis store), redis-server, the recording upstream (this script, one "
        "process) and, for the unpaced token bucket only, an nginx upstream.",
        "",
        "## How evenly the upstream sees requests",
        "",
        f"wrk -t2 -c{CONNS}, {DURATION} s per round, back to back (each connection sends its next request when "
        f"the last is answered) against `leaky_bucket` rate R per 1s, burst {BUCKET_BURST}, `key: []`: "
        f"about {CONNS} requests wait at any time, so the bucket never empties and never overflows. "
        "The upstream notes each request's arrival by the kernel's receive timestamp of its segment "
        "(SO_TIMESTAMPNS: when sluice's write reached the socket, independent of the recorder's own "
        f"scheduling); the first and last {EDGE:g} s of each run are left out. T = 1/R.",
        "",
        "| R (T) | requests | mean interval ms (/ T) | intervals min / p1 / p50 / p99 / max ms | stdev ms | "
        "intervals < T/2 | offset from an exact T schedule: spread ms | most in any 1 s (R + 1) | "
        "most in any 100 ms (R/10 + 1) | wrk p50 / p99 ms (C×T) | sluice mean wait ms | "
        "delayed / forwarded / 499 at the end | 429 |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    lags = []
    checks = []  # (passed, text)
    for label, rate, t_ms, r in [(label, rate, t_ms, r) for label, rate, t_ms in (
            ("shaped@slow", RATE, t_slow), ("shaped@fast", FAST_RATE, t_fast)) for r in runs[label]]:
        lags += r["lags"]
        lo, hi = r["t0"] + int(EDGE * 1e9), r["t1"] - int(EDGE * 1e9)
        e = evenness([t for t in r["times"] if lo <= t < hi], rate)
        name = f"{rate}/s ({t_ms:g} ms){', round ' + r['label'].rsplit('-', 1)[1] if ROUNDS > 1 else ''}"
        if e["n"] < 3:
            lines.append(f"| {name} | {e['n']} | - | - | - | - | - | - | - | - | - | - | - |")
            continue
        rname = f"{rate}/s{', round ' + r['label'].rsplit('-', 1)[1] if ROUNDS > 1 else ''}"
        checks.append((abs(e["ratio"] - 1) <= 0.01, f"{rname}: mean interval {e['mean']:.4f} ms = "
                       f"{e['ratio']:.4f} × T (within 1%)"))
        allowed = rate + 1 + int(e["spread"] / t_ms + 1)
        if e["w1s"] <= rate + 1:
            checks.append((True, f"{rname}: at most {e['w1s']} requests in any 1 s (R + 1 = {rate + 1})"))
        else:
            checks.append((e["w1s"] <= allowed,
                           f"{rname}: {e['w1s']} requests in the busiest 1 s, {e['w1s'] - rate - 1} above R + 1; "
                           f"the spread of {e['spread']:.2f} ms of late sends allows up to {allowed} (sends "
                           "that came late, then on time: none early)"))
        p50 = r["wrk"]["p50"]
        checks.append((abs(p50 - CONNS * t_ms) <= max(0.05 * CONNS * t_ms, 1.5),
                       f"{rname}: wrk p50 {p50:.1f} ms against C × T = {CONNS * t_ms:.1f} ms"))
        lines.append(
            f"| {name} | {e['n']} | {e['mean']:.4f} ({e['ratio']:.4f}) | "
            f"{e['min']:.3f} / {e['p1']:.3f} / {e['p50']:.3f} / {e['p99']:.3f} / {e['max']:.3f} | "
            f"{e['stdev']:.3f} | {e['early']} | {e['spread']:.2f} | {e['w1s']} ({rate + 1}) | "
            f"{e['w100ms']} ({rate // 10 + 1}) | {r['wrk']['p50']:.1f} / {r['wrk']['p99']:.1f} "
            f"({CONNS * t_ms:.1f}) | {r['wait_ms']:.1f} | {r['delayed']:.0f} / {r['forwarded']:.0f} / "
            f"{r['other']:.0f} | {r['limited']:.0f} |")
    lines += [
        "",
        "- mean interval = (last arrival - first arrival) / (requests - 1) in the steady stretch; "
        "its ratio to T is the outflow rate against the configured one (1.0000: exact).",
        "- offset spread: each arrival's distance from an exact schedule (the first arrival plus i × T), "
        "max - min. The bucket stays full here, so its turns are exactly one per T; the spread is how "
        "far sluice's actual sends stray from them (and a rate error would show as a drift growing "
        "with the run). A count in a window can exceed R × window + 1 by at most spread / T.",
        "- sluice holds a request for its wait (in microseconds, from Redis TIME) on a timer started "
        "when the store's answer arrives, so a request leaves the decision's return trip and the "
        "timer's wake-up after its exact turn, never before it; a stall of the machine makes the "
        "requests due meanwhile leave late and together. Above 1000/s (T < 1 ms) the intervals say "
        "little, the mean, the spread and the window counts are the figures.",
        "- wrk's latency is the wait plus a round trip; with C connections back to back each request "
        f"waits about C × T ({CONNS} × T). sluice mean wait = `sluice_ratelimit_wait_seconds` sum / "
        "count over the run, which also counts the first C requests (waits 0 to (C-1) × T while the "
        "bucket filled) and the requests cut short when wrk stopped (499 at the end: wrk closed their "
        "connections while they waited; nothing of them was forwarded).",
        f"- the recorder read each request this long after its kernel timestamp: {lag_text(lags)} "
        "(what timing it in the recorder itself would have added).",
        "",
        f"### Bursts: {CONNS} connections, each pipelining {BURST_SIZE} requests at the same instant "
        f"every {BURST_PERIOD:g} s",
        "",
        f"{BURSTS} bursts of {CONNS * BURST_SIZE} requests against rate {RATE}/s, burst {BUCKET_BURST} "
        "(another route, same settings; asyncio client). sluice reads a connection's pipelined requests "
        f"one after the other, so at most {CONNS} are in the bucket at once and the rest wait in the "
        f"sockets. Draining a burst takes ({CONNS * BURST_SIZE} - 1) × T = {bursts['expected_span']:.0f} ms, "
        "inside the period, so each burst starts on an empty bucket (its first request goes at once).",
        "",
    ]
    pb = bursts["per_burst"]
    iv = bursts["intervals"]
    if pb and iv:
        spans = [p["span_ms"] for p in pb]
        checks.append((all(abs(x - bursts["expected_span"]) <= 0.01 * bursts["expected_span"] + 2 for x in spans)
                       and bursts["w1s"] <= RATE + 1,
                       f"bursts: each drained in {min(spans):.0f}-{max(spans):.0f} ms against "
                       f"{bursts['expected_span']:.0f}, at most {bursts['w1s']} in any 1 s (R + 1 = {RATE + 1})"))
        lines += [
            "| answers | upstream received | first forwarded after ms (min-max over bursts) | "
            "first to last forwarded ms (expected) | intervals inside bursts min / p50 / mean / p99 / max ms | "
            "most in any 1 s (R + 1) | most in any 100 ms (R/10 + 1) | client latency p50 / max ms | "
            "sluice mean wait ms | delayed / limited |",
            "|---|---:|---|---|---|---:|---:|---:|---:|---:|",
            f"| {', '.join(f'{k}: {v}' for k, v in sorted(bursts['statuses'].items(), key=str))} | "
            f"{bursts['arrivals']} | {min(p['first_ms'] for p in pb):.1f}-{max(p['first_ms'] for p in pb):.1f} | "
            f"{min(spans):.0f}-{max(spans):.0f} ({bursts['expected_span']:.0f}) | "
            f"{min(iv):.3f} / {pct(iv, 50):.3f} / {statistics.mean(iv):.3f} / {pct(iv, 99):.3f} / {max(iv):.3f} | "
            f"{bursts['w1s']} ({RATE + 1}) | {bursts['w100ms']} ({RATE // 10 + 1}) | "
            f"{pct(bursts['lat'], 50):.0f} / {max(bursts['lat'] or [0]):.0f} | {bursts['wait_ms']:.0f} | "
            f"{bursts['delayed']:.0f} / {bursts['limited']:.0f} |",
            "",
            "- client latency: from writing the burst to reading each answer; the last of a burst is "
            f"answered after about ({CONNS * BURST_SIZE} - 1) × T.",
        ]
    else:
        lines.append(f"no burst reached the upstream: {bursts['statuses']} {bursts['errors']}")
    lines += [
        "",
        "## CPU per request: leaky bucket against token bucket",
        "",
        f"The same sluice process (one config, a route per case), wrk -t2 -c{CONNS}, {DURATION} s each, "
        f"{ROUNDS} round{'s' if ROUNDS > 1 else ''} (A B A B: the cases alternate; the figure is the "
        "rounds' total CPU over their total requests). "
        "`shaped` is the leaky bucket above (every request held on a timer, then forwarded); "
        "`token_bucket` is run.sh's token bucket (rate 1000000/s, burst 1000000: never limits), "
        f"paced by wrk to about the same request rate (a random delay of mean {CONNS}/R before each "
        "request, `delay()` in a generated wrk script), and unpaced against an nginx upstream "
        f"(run.sh's `token_bucket` scenario at {CONNS} connections). sluice CPU = user + system time of all "
        "its threads (`/proc/PID/task/*/schedstat`, ns) / requests it forwarded (200s); the "
        "`/proc/PID/stat` figure (10 ms ticks, what run.sh reads) is shown beside it as a check. Redis: "
        "redis-server's CPU per forwarded request, and EVALSHA/EVAL calls per decision (below 1: "
        "decisions batched in one call).",
        "",
        f"With no traffic sluice used {idle_sluice:.0f} µs of CPU per second and Redis {idle_redis:.0f}: "
        f"{idle_sluice / RATE:.1f} and {idle_redis / RATE:.1f} µs per request at {RATE}/s, "
        f"{idle_sluice / FAST_RATE:.2f} and {idle_redis / FAST_RATE:.2f} at {FAST_RATE}/s, included below "
        "for both algorithms alike.",
        "",
        "| case | upstream | req/s forwarded | sluice CPU µs/req (per round) [stat] | Redis CPU µs/req | "
        "Redis calls/decision | wrk latency (per round) | non-2xx, socket errors |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    def combined(rs, key):  # over the rounds, weighted by requests: total CPU / total requests
        return sum(r[key] * r["forwarded"] for r in rs) / max(sum(r["forwarded"] for r in rs), 1)

    def each(rs, key):
        return f" ({' / '.join(f'{r[key]:.1f}' for r in rs)})" if len(rs) > 1 else ""

    agg = {}
    for label in ("shaped@slow", "token_bucket@slow", "shaped@fast", "token_bucket@fast", "token_bucket@max"):
        rs = runs[label]
        a = agg[label] = {k: combined(rs, k) for k in ("sluice_us", "sluice_tick_us", "redis_us", "calls", "rps")}
        name = label.replace("@slow", f" @ {RATE}/s").replace("@fast", f" @ {FAST_RATE}/s").replace(
            "@max", " unpaced")
        lines.append(
            f"| {name} | {'nginx' if label.endswith('max') else 'recorder'} | {a['rps']:.0f} | "
            f"**{a['sluice_us']:.1f}**{each(rs, 'sluice_us')} [{a['sluice_tick_us']:.1f}] | "
            f"{a['redis_us']:.1f}{each(rs, 'redis_us')} | {a['calls']:.3f} | "
            f"{' / '.join(format(r['wrk']['p50'], '.2f') for r in rs)} ms p50, "
            f"{' / '.join(format(r['wrk']['p99'], '.2f') for r in rs)} p99 | "
            f"{sum(r['wrk']['non2xx'] for r in rs)}, {sum(r['wrk']['errors'] for r in rs)} |")
    s1, t1 = agg["shaped@slow"], agg["token_bucket@slow"]
    s2, t2 = agg["shaped@fast"], agg["token_bucket@fast"]
    tm = agg["token_bucket@max"]
    lines += [
        "",
        f"Shaped against token bucket at the same rate, sluice CPU per request: "
        f"{s1['sluice_us'] / t1['sluice_us']:.2f}x at {RATE}/s ({s1['sluice_us'] - t1['sluice_us']:+.1f} µs), "
        f"{s2['sluice_us'] / t2['sluice_us']:.2f}x at {FAST_RATE}/s ({s2['sluice_us'] - t2['sluice_us']:+.1f} µs). "
        f"The unpaced token bucket ({tm['rps']:.0f} req/s) costs {tm['sluice_us']:.1f} µs: at a few hundred "
        "or thousand requests a second every request pays for its own wake-ups (nothing to batch: "
        "epoll, the Redis round trip, the upstream), so per-request figures are far above full-load ones "
        "for both algorithms. What the shaped request adds is its hold: a timer and a watch on the client "
        "socket, one more wake-up of a worker per request.",
        "",
        "## Memory per waiting request",
        "",
        f"A fresh sluice, route `/hold` with `leaky_bucket` rate 1 per 1m, burst {WAITING + 100}, "
        f"`key: []`; `server.max_waiting` {WAITING + 1000}, `max_connections` {WAITING + 2000}. The client "
        f"opens {WAITING} keep-alive connections, each makes one request to an unlimited route (RSS with "
        "idle connections), then sends `GET /hold` on every one: the first goes at once, every other is "
        "held (`sluice_requests_waiting`: RSS with them waiting). Then it hangs up on all of them (each "
        f"held request ends as 499, nothing forwarded). {MEM_ROUNDS} rounds in the same process, Redis "
        "flushed in between: the later rounds show whether the memory is reused.",
        "",
        "| round | connections | RSS MB: start / idle conns / waiting / after hang-up | per idle connection KB | "
        "waiting (gauge) | per waiting request over its idle connection | per waiting request with its "
        "connection | all held within s | waiting 0 again after s | 499 / 200 / other |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in mem:
        w = max(r["waiting"], 1)
        lines.append(
            f"| {r['round']} | {r['opened']} ({r['active']:.0f} open) | {r['base'] / 1024:.1f} / "
            f"{r['idle'] / 1024:.1f} / {r['held'] / 1024:.1f} / {r['after'] / 1024:.1f} | "
            f"{(r['idle'] - r['base']) / max(r['opened'], 1):.2f} | {r['waiting']:.0f} | "
            f"{(r['held'] - r['idle']) * 1024 / w:.0f} B | {(r['held'] - r['base']) * 1024 / w:.0f} B | "
            f"{r['held_in']:.1f} | {'-' if r['released'] is None else format(r['released'], '.1f')} | "
            f"{r['hold_499']:.0f} / {r['hold_200']:.0f} / {r['hold_other']:.0f} |")
    lines += [
        "",
        "- RSS = sluice's VmRSS (`/proc/PID/status`), read once it stopped moving. Per waiting request "
        "over its idle connection = (RSS waiting - RSS idle) / waiting: what holding a request adds to a "
        "kept-alive connection (the parsed request, the session's coroutine state, the timer, the "
        "client watch). With its connection = (RSS waiting - RSS start) / waiting. Round 1 is the cost in "
        "a fresh process; later rounds reuse what the allocator kept from the one before.",
        "- 499 / 200: held requests end as 499 when their clients hang up, and none reaches the upstream "
        "(checked: it received only the `/idle` requests and each round's first `/hold`, which found the "
        "bucket empty and went at once).",
        "",
    ]
    for r in mem:
        checks.append((r["waiting"] >= r["opened"] - 1 and r["released"] is not None and r["hold_200"] <= 1,
                       f"memory round {r['round']}: {r['waiting']:.0f} held of {r['opened'] - 1} expected, "
                       f"{'all released' if r['released'] is not None else 'NOT all released'} after the "
                       f"hang-up, {r['hold_200']:.0f} forwarded (1 expected)"))
    if len(mem) > 1:
        first, last = mem[1], mem[-1]
        checks.append((last["held"] <= first["held"] * 1.05 + 2048,
                       f"memory reused: RSS with requests waiting {first['held'] / 1024:.1f} MB in round 2, "
                       f"{last['held'] / 1024:.1f} MB in round {last['round']}"))
    lines += ["## Checks", ""] + [f"- {'ok' if ok else '**FAILED**'}: {text}" for ok, text in checks]
    lines += ["", "## Anomalies", ""]
    lines += [f"- {a}" for a in ANOMALIES] or ["none"]
    return "\n".join(lines) + "\n"


ANOMALIES = []


def main():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    started = time.monotonic()
    for tool in ("wrk", "redis-server", "redis-cli"):
        if not shutil.which(tool):
            sys.exit(f"shaping: needs {tool} (Debian: apt-get install wrk redis-server nginx-light)")
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        sys.exit("shaping: needs nginx (Debian: nginx-light)")
    if not os.access(SLUICE, os.X_OK):
        sys.exit(f"shaping: no sluice binary at {SLUICE} (SLUICE=path, or build it)")
    global WAITING
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if WAITING + 1000 > want:
        WAITING = want - 1000
        say(f"open-file limit {want}: the memory test holds {WAITING} requests")
    load_before = loadavg()
    workdir = tempfile.mkdtemp(prefix="sluice-shaping-")
    os.chmod(workdir, 0o755)
    bed = Bed(workdir)
    try:
        bed.start_redis()
        bed.start_recorder()
        bed.start_nginx()
        say(f"work dir {workdir}; redis {bed.redis_port}, recorder {bed.rec_port}, nginx {bed.nginx_port}")
        runs, idle_us, bursts = phase_steady(bed)
        mem = phase_memory(bed, WAITING)
    except BaseException:
        if bed.sluice_log and os.path.exists(bed.sluice_log):
            with open(bed.sluice_log, errors="replace") as f:
                tail = f.readlines()[-15:]
            say("sluice log tail:\n" + "".join(tail))
        raise
    finally:
        stop_all()
        if KEEP:
            say(f"work dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    ANOMALIES.extend(bed.anomalies)
    text = report(runs, idle_us, bursts, mem, started, load_before)
    print(text)
    if not QUICK:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, "shaping.md"), "w") as f:
            f.write(text)
        say(f"written {os.path.join(RESULTS, 'shaping.md')}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            upstream_main(int(sys.argv[2]))
        except (KeyboardInterrupt, SystemExit):
            pass
        sys.exit(0)
    main()
