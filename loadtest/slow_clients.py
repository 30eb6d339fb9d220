#!/usr/bin/env python3
"""Slow clients: sluice against nginx, side by side (issue 12, item 10).

For each proxy: a normal client makes sequential keep-alive GETs for DURATION seconds, first
alone, then while SLOW connections each trickle a request head one byte a second (never
completing it). Reported: the normal client's p50/p99/max with and without the slow ones,
the proxy's RSS (before, peak, after), and when and how the proxy closed the slow ones
(a 408 answer, a plain close, a reset), with the same header timeout on both proxies.

    python3 loadtest/slow_clients.py                 # 2000 slow connections, 20 s per phase
    QUICK=1 python3 loadtest/slow_clients.py         # 200 slow connections, 5 s per phase
    HEADER_TIMEOUT=60 python3 loadtest/slow_clients.py

Everything listens on 127.0.0.1 only; every loop is bounded in time. Standard library only;
needs nginx (Debian: nginx-light) and build/sluice. Writes loadtest/results/slow_clients.md.
"""

import asyncio
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
QUICK = os.environ.get("QUICK") == "1"
SLOW = int(os.environ.get("SLOW", "200" if QUICK else "2000"))
DURATION = float(os.environ.get("DURATION", "5" if QUICK else "20"))
HEADER_TIMEOUT = int(os.environ.get("HEADER_TIMEOUT", "10"))
SLUICE = os.environ.get("SLUICE", os.path.join(ROOT, "build", "sluice"))
RESULTS = os.environ.get("RESULTS", os.path.join(HERE, "results"))
WORKERS = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def child_pids(pid):
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


async def upstream_server(port):
    body = b"ok\n"
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n" + body

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(resp)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 16)


def start_sluice(workdir, port, upstream_port):
    conf = os.path.join(workdir, "sluice.yaml")
    with open(conf, "w") as f:
        f.write(f"""server:
  listen: ["127.0.0.1:{port}"]
  workers: {WORKERS}
  header_timeout: {HEADER_TIMEOUT}s
  idle_timeout: 60s
admin: {{listen: ""}}
store: {{type: memory}}
upstreams:
  app: {{servers: ["127.0.0.1:{upstream_port}"]}}
routes:
  - name: all
    match: {{path_prefix: /}}
    upstream: app
logging: {{access_log: "off", summary_interval: "0", level: warn}}
""")
    proc = subprocess.Popen([SLUICE, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, [proc.pid]


def start_nginx(workdir, port, upstream_port):
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes {WORKERS};
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log crit;
daemon off;
events {{ worker_connections 10000; }}
http {{
  access_log off;
  client_header_timeout {HEADER_TIMEOUT}s;
  keepalive_timeout 60s;
  keepalive_requests 1000000;
  client_body_temp_path {workdir}/body; proxy_temp_path {workdir}/proxy;
  fastcgi_temp_path {workdir}/fcgi; uwsgi_temp_path {workdir}/uwsgi; scgi_temp_path {workdir}/scgi;
  upstream app {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}
}}
""")
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", workdir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, None


async def wait_port(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return True
        except OSError:
            await asyncio.sleep(0.05)
    return False


async def normal_client(port, seconds, stop_at=None):
    """Sequential keep-alive GETs; latencies in ms, and failures."""
    lat, failures = [], 0
    end = time.monotonic() + seconds
    reader = writer = None
    while time.monotonic() < end:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            t0 = time.perf_counter()
            writer.write(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await asyncio.wait_for(reader.readexactly(length), 5)
            lat.append((time.perf_counter() - t0) * 1000)
            if not head.startswith(b"HTTP/1.1 200"):
                failures += 1
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            failures += 1
            if writer is not None:
                writer.close()
            writer = None
    if writer is not None:
        writer.close()
    return lat, failures


async def slow_client(port, started, outcome, stop):
    """Trickles a head one byte a second until the proxy ends the connection or `stop`."""
    head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: " + b"a" * 4096
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        outcome.append(("connect failed", 0.0))
        return
    t0 = time.monotonic()
    received = b""
    try:
        for i in range(len(head)):
            if stop.is_set():
                outcome.append(("still open", time.monotonic() - t0))
                return
            writer.write(head[i:i + 1])
            try:
                await writer.drain()
                data = await asyncio.wait_for(reader.read(4096), 1.0)
            except asyncio.TimeoutError:
                continue
            received += data
            if not data or received:
                # The proxy answered or closed.
                kind = "408" if received.startswith(b"HTTP/1.1 408") else (
                    "other answer " + received[:12].decode("latin-1") if received else "closed")
                outcome.append((kind, time.monotonic() - t0))
                return
    except (ConnectionResetError, BrokenPipeError):
        outcome.append(("408" if received.startswith(b"HTTP/1.1 408") else "reset", time.monotonic() - t0))
    finally:
        writer.close()


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def measure(name, start, upstream_port):
    workdir = tempfile.mkdtemp(prefix=f"slow-{name}-")
    port = free_port()
    proc, pids = start(workdir, port, upstream_port)
    try:
        if not await wait_port(port):
            raise RuntimeError(f"{name} did not start")
        await asyncio.sleep(0.5)
        pids = pids or child_pids(proc.pid)
        rss_before = rss_kib(child_pids(proc.pid))
        alone, fail_alone = await normal_client(port, DURATION)

        stop = asyncio.Event()
        outcome = []
        started = time.monotonic()
        slow = [asyncio.create_task(slow_client(port, started, outcome, stop)) for _ in range(SLOW)]
        peak = rss_before
        open_over_time = []

        async def sample():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, rss_kib(child_pids(proc.pid)))
                open_over_time.append((round(time.monotonic() - started), SLOW - len(outcome)))
                await asyncio.sleep(1)

        sampler = asyncio.create_task(sample())
        await asyncio.sleep(1)  # the slow ones connect and start trickling
        loaded, fail_loaded = await normal_client(port, DURATION)
        # Give the proxy its header timeout (plus a margin) to close them.
        deadline = started + HEADER_TIMEOUT + 5
        while len(outcome) < SLOW and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*slow, return_exceptions=True)
        await sampler
        await asyncio.sleep(1)
        rss_after = rss_kib(child_pids(proc.pid))
        kinds = {}
        for kind, t in outcome:
            kinds.setdefault(kind, []).append(t)
        return {
            "name": name, "alone": alone, "fail_alone": fail_alone, "loaded": loaded,
            "fail_loaded": fail_loaded, "rss_before": rss_before, "rss_peak": peak, "rss_after": rss_after,
            "kinds": kinds,
        }
    finally:
        proc.send_signal(signal.SIGTERM if name == "sluice" else signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def row(r):
    a, l = r["alone"], r["loaded"]
    closes = "; ".join(f"{k}: {len(v)} after {min(v):.1f}-{max(v):.1f} s" for k, v in sorted(r["kinds"].items()))
    return (f"| {r['name']} | {len(a)} | {pct(a, 50):.2f} / {pct(a, 99):.2f} / {max(a or [0]):.2f} | "
            f"{len(l)} | {pct(l, 50):.2f} / {pct(l, 99):.2f} / {max(l or [0]):.2f} | "
            f"{r['fail_alone']} / {r['fail_loaded']} | {r['rss_before'] // 1024} / {r['rss_peak'] // 1024} / "
            f"{r['rss_after'] // 1024} | {closes} |")


async def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    if not shutil.which("nginx") or not os.path.exists(SLUICE):
        sys.exit("slow_clients: needs nginx and build/sluice")
    upstream_port = free_port()
    server = await upstream_server(upstream_port)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    results = []
    for name, start in (("nginx", start_nginx), ("sluice", start_sluice)):
        results.append(await measure(name, start, upstream_port))
    server.close()
    lines = [
        f"# Slow clients: {SLOW} connections trickling a head byte a second",
        "",
        f"header timeout {HEADER_TIMEOUT} s on both (nginx `client_header_timeout`, sluice `server.header_timeout`), "
        f"{WORKERS} workers each, no rate limits; the normal client makes sequential keep-alive GETs for "
        f"{DURATION:.0f} s alone, then {DURATION:.0f} s while the slow ones trickle. Load average before: "
        f"{' '.join(load)}.",
        "",
        "| proxy | requests alone | p50 / p99 / max ms alone | requests with slow | p50 / p99 / max ms with slow | "
        "failed alone / with slow | RSS MB before / peak / after | how the slow ones ended (seconds after their start) |",
        "|---|---|---|---|---|---|---|---|",
    ] + [row(r) for r in results]
    text = "\n".join(lines) + "\n"
    print(text)
    if not QUICK:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, f"slow_clients_{HEADER_TIMEOUT}s.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    asyncio.run(main())
