#!/usr/bin/env python3
"""What a sliding window's decision costs Redis by the cost a request names.

The decide library is built from lua/ as limit/decide_script.cpp joins it (token_bucket,
sliding_window, fixed_window, concurrency, decide, standalone_keys), registered under a test
name, and called with FCALL as a worker calls it, one request per call, over KEYS keys (a
request each in turn). Per case: Redis's time per call (INFO commandstats) and its memory
after the run (INFO memory). With BASE=<git revision>, the same cases run on that revision's
library first (a revision before the weighted windows does not know ",w": its rows
send the plain plan, one member per unit).

    python3 loadtest/window_costs.py            (about 30 s; needs redis-server)
    BASE=809d008 CALLS=1000 KEYS=200 python3 loadtest/window_costs.py

Prints a markdown table on stdout.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ["token_bucket", "sliding_window", "fixed_window", "concurrency", "decide", "standalone_keys"]
CALLS = int(os.environ.get("CALLS", "1000"))
KEYS = int(os.environ.get("KEYS", "200"))
LIMIT = int(os.environ.get("LIMIT", "100000"))
WINDOW_US = 3_600_000_000


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def __call__(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply " + repr(line))


def library(revision):
    code = []
    for part in PARTS:
        if revision:
            text = subprocess.run(["git", "-C", ROOT, "show", f"{revision}:lua/{part}.lua"], check=True,
                                  capture_output=True, text=True).stdout
        else:
            with open(os.path.join(ROOT, "lua", part + ".lua")) as f:
                text = f.read()
        code.append(text + "\n")
    return ("#!lua name=window_costs\n" + "".join(code) +
            "redis.register_function('window_costs', function(keys, args)\n"
            "  local k, a, cluster = inputs(keys, args)\n"
            "  if not k then return a end\n"
            "  return decide(k, a, cluster)\n"
            "end)\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(redis, weighted, cost):
    redis("FLUSHALL")
    redis("CONFIG", "RESETSTAT")
    y = f"{WINDOW_US},w" if weighted else str(WINDOW_US)
    for i in range(CALLS):
        redis("FCALL", "window_costs", 1, f"k{i % KEYS}", 1, f"sliding_window 0 {cost} {LIMIT} {y}")
    stats = redis("INFO", "commandstats").decode()
    per_call = float(stats.split("cmdstat_fcall:")[1].split("usec_per_call=")[1].split(",")[0])
    memory = int(redis("INFO", "memory").decode().split("used_memory:")[1].split("\r\n")[0])
    return per_call, memory


def main():
    server = shutil.which("redis-server")
    if not server:
        sys.exit("window_costs: needs redis-server")
    work = tempfile.mkdtemp(prefix="sluice-window-costs.")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work],
                            stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                redis = Redis(port)
                redis("PING")
                break
            except (ConnectionError, RuntimeError):
                time.sleep(0.02)
        print(f"{CALLS} calls, one request each, over {KEYS} keys; sliding window of {LIMIT:,} an hour\n")
        print("| library | plan | cost | Redis µs per call | Redis memory after (MB) |")
        print("|---|---|---:|---:|---:|")
        builds = ([(os.environ["BASE"], False)] if os.environ.get("BASE") else []) + [(None, True), (None, False)]
        for revision, weighted in builds:
            redis("FUNCTION", "LOAD", "REPLACE", library(revision))
            for cost in (1, 2000, 10000):
                if cost > 1 and revision is None and not weighted:
                    continue  # (this tree sends ",w" wherever a cost can exceed 1)
                per_call, memory = measure(redis, weighted, cost)
                name = revision or "this tree"
                plan = "weighted" if weighted else "plain"
                print(f"| {name} | {plan} | {cost:,} | {per_call:,.1f} | {memory / 1e6:,.1f} |")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
