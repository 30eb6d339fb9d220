#!/usr/bin/env python3
"""Decision capacity with Redis Cluster: one Redis, a 1-master cluster and a 3-master cluster,
side by side, the load spread over 100,000 keys (loadtest/clients.lua: every request from
another X-Forwarded-For client).

    python3 loadtest/cluster_scale.py          (DURATION=10 CONNS=64 WORKERS=2 ROUNDS=2)

For each setup it runs wrk against sluice (token bucket keyed by the client, every request
admitted, so every decision writes) and reads, from each master, the CPU Redis used
(INFO cpu) and the EVALSHA calls it ran (INFO commandstats). On a 2-core machine sluice and
wrk take most of the CPU, so the request rate itself says little about Redis; what scales is
Redis's CPU per decision. The figures:

    req/s                 what wrk got through sluice
    redis µs/decision     Redis CPU (user+sys, all masters) per decision; of it, the kernel's
                          (sys: network, wake-ups) and the script's own run time
                          (commandstats usec)
    batch                 decisions per EVALSHA
    busiest master        its share of all Redis CPU (3 masters: 1/3 when even)
    capacity              decisions per second when the busiest master has a whole core:
                          decisions / CPU-seconds of the busiest master

With CPU_BUDGET=P (percent of one core, e.g. 5) every Redis master is held to P% of a core
(a cgroup CPU quota), so Redis, not sluice or wrk, is what limits: the request rate is then
the store's decision capacity at that budget, measured rather than extrapolated, and the
3-master rate against the 1-master rate is the scaling itself.

On a machine with many cores, pin each role to cores of its own (taskset lists):
CPUS_LOAD (wrk, THREADS threads), CPUS_PROXY (sluice), CPUS_UPSTREAM (nginx), CPUS_REDIS (one
core per master, e.g. "12,13,14": the standalone Redis and the 1-master cluster take the
first). With every master on a core of its own the request rates themselves compare.

The issue's goal: capacity with 3 masters >= 2.5 x capacity with one. Writes
loadtest/results/cluster_scale.md (cluster_scale_budget_P.md with CPU_BUDGET=P).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from harness import RedisServer, free_port, wait_until  # noqa: E402
from redis_setups import RedisClusterSetup  # noqa: E402

DURATION = int(os.environ.get("DURATION", "10"))
CONNS = int(os.environ.get("CONNS", "64"))
WORKERS = int(os.environ.get("WORKERS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
SLUICE = os.environ.get("SLUICE", os.path.join(ROOT, "build", "sluice"))
RESULTS = os.environ.get("RESULTS", os.path.join(HERE, "results"))
CPU_BUDGET = float(os.environ.get("CPU_BUDGET", "0"))  # percent of a core per master; 0: none
THREADS = int(os.environ.get("THREADS", "2"))
UPSTREAM_WORKERS = int(os.environ.get("UPSTREAM_WORKERS", "1"))


def cpu_list(name):
    """The cores of a taskset-style list in the environment ("0-3", "12,13,14"); None: unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    cores = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cores.extend(range(int(lo), int(hi or lo) + 1))
    return cores


CPUS_LOAD, CPUS_PROXY, CPUS_UPSTREAM, CPUS_REDIS = (cpu_list(n) for n in ("CPUS_LOAD", "CPUS_PROXY", "CPUS_UPSTREAM",
                                                                             "CPUS_REDIS"))


def pinned(cores):
    """A preexec_fn that keeps the child (and the threads it starts) on `cores`."""
    if cores is None:
        return None
    return lambda: os.sched_setaffinity(0, cores)


def pin_running(pid, cores):
    """Moves every thread of a running process onto `cores`."""
    if cores is None:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass  # a thread that has just ended
CGROUP_PERIOD_US = 100000  # the quota is at least 1 ms: 1% of a core at the least


def cpu_cgroup_root():
    for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        if os.path.exists(os.path.join(root, "cgroup.procs")):
            return root
    return None


def limit_cpu(pid, percent):
    """Puts `pid` in a cgroup (v1 cpu controller) of its own with a quota of `percent` of a
    core; returns the cgroup's directory (remove it once the process has exited)."""
    root = cpu_cgroup_root()
    if root is None:
        sys.exit("CPU_BUDGET needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    path = os.path.join(root, f"sluice-scale-{pid}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
        f.write(str(CGROUP_PERIOD_US))
    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(max(1000, int(CGROUP_PERIOD_US * percent / 100))))
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(pid))
    return path


def release_cgroups(paths):
    for path in paths:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


def need(tool, package):
    if shutil.which(tool):
        return
    subprocess.run(["apt-get", "install", "-y", "-q", package], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def start_upstream(workdir):
    """nginx answering 200 "ok" to everything (the same upstream as loadtest/run.sh)."""
    port = free_port()
    conf = os.path.join(workdir, "nginx-up.conf")
    os.makedirs(os.path.join(workdir, "nginx-tmp"), exist_ok=True)
    user = "user root;" if os.getuid() == 0 else ""
    with open(conf, "w") as f:
        f.write(f"""{user}
daemon off; worker_processes {UPSTREAM_WORKERS}; pid {workdir}/nginx.pid; error_log {workdir}/nginx.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; client_body_temp_path {workdir}/nginx-tmp;
  keepalive_requests 1000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ return 200 "ok\\n"; }} }} }}
""")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen([nginx, "-c", conf, "-p", workdir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=pinned(CPUS_UPSTREAM))
    wait_until(lambda: _accepts(port), 10, message="nginx upstream")
    return proc, port


def _accepts(port):
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def start_sluice(workdir, upstream_port, redis):
    port = free_port()
    admin = free_port()
    path = os.path.join(workdir, f"sluice-{port}.yaml")
    with open(path, "w") as f:
        f.write(f"""server: {{listen: ["127.0.0.1:{port}"], workers: {WORKERS}, max_connections: 100000}}
admin: {{listen: "127.0.0.1:{admin}"}}
client_ip: {{trusted_proxies: ["127.0.0.1/32"]}}
store:
  type: redis
  on_error: allow
  redis:
{redis}
    timeout: 1s
upstreams:
  app: {{servers: ["127.0.0.1:{upstream_port}"]}}
routes:
  - name: all
    match: {{path_prefix: /}}
    upstream: app
    limits:
      - {{name: per_client, algorithm: token_bucket, rate: 1000, per: 1s, burst: 1000}}
logging: {{access_log: "off", level: warn}}
""")
    proc = subprocess.Popen([SLUICE, "-c", path], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(workdir, f"sluice-{port}.log"), "wb"),
                            preexec_fn=pinned(CPUS_PROXY))
    import urllib.request

    def ready():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1).status == 200
        except Exception:
            return False
    wait_until(ready, 20, 0.05, "sluice ready")
    return proc, port, admin


def wrk(port, seconds):
    out = subprocess.run(["wrk", f"-t{THREADS}", f"-c{CONNS}", f"-d{seconds}s", "-s", os.path.join(HERE, "clients.lua"),
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True,
                         preexec_fn=pinned(CPUS_LOAD)).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return requests, rate, int(non2xx.group(1)) if non2xx else 0


def redis_state(node):
    cpu = node.command("INFO", "cpu")
    user = float(re.search(r"used_cpu_user:([\d.]+)", cpu).group(1))
    system = float(re.search(r"used_cpu_sys:([\d.]+)", cpu).group(1))
    stats = node.command("INFO", "commandstats")
    calls = sum(int(c) for c in re.findall(r"cmdstat_(?:eval|evalsha|fcall):calls=(\d+)", stats))
    script_us = sum(int(c) for c in re.findall(r"cmdstat_(?:eval|evalsha|fcall):calls=\d+,usec=(\d+)", stats))
    return user + system, calls, system, script_us


def measure(name, masters, store_yaml, upstream_port, workdir):
    if CPUS_REDIS is not None:
        for i, m in enumerate(masters):
            pin_running(m.proc.pid, [CPUS_REDIS[i % len(CPUS_REDIS)]])
    cgroups = [limit_cpu(m.proc.pid, CPU_BUDGET) for m in masters] if CPU_BUDGET else []
    proc, port, _ = start_sluice(workdir, upstream_port, store_yaml)
    try:
        wrk(port, 1)  # warm-up: connections, scripts, pools
        rows = []
        for _ in range(ROUNDS):
            before = [redis_state(m) for m in masters]
            requests, rate, non2xx = wrk(port, DURATION)
            after = [redis_state(m) for m in masters]
            cpu = [a[0] - b[0] for a, b in zip(after, before)]
            calls = sum(a[1] - b[1] for a, b in zip(after, before))
            system = sum(a[2] - b[2] for a, b in zip(after, before))
            script_us = sum(a[3] - b[3] for a, b in zip(after, before))
            total = sum(cpu)
            rows.append({
                "rate": rate, "requests": requests, "non2xx": non2xx,
                "us_per_decision": total * 1e6 / requests,
                "sys_per_decision": system * 1e6 / requests,
                "script_per_decision": script_us / requests,
                "batch": requests / max(calls, 1),
                "busiest": max(cpu) / total if total else 0.0,
                "capacity": requests / max(cpu) if max(cpu) > 0 else 0.0,
                "busiest_load": max(cpu) / DURATION,
            })
        key = "rate" if CPU_BUDGET else "capacity"
        best = max(rows, key=lambda r: r[key])
        best["name"] = name
        best["masters"] = len(masters)
        return best
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        for m in masters:
            if cgroups:
                m.stop()
        release_cgroups(cgroups)


def main():
    need("wrk", "wrk")
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        need("nginx", "nginx-light")
    if not os.path.exists(SLUICE):
        sys.exit(f"no sluice binary at {SLUICE}: build it first (cmake --build build)")
    workdir = tempfile.mkdtemp(prefix="sluice-cluster-scale-")
    upstream, upstream_port = start_upstream(workdir)
    results = []
    try:
        single = RedisServer().start()
        try:
            results.append(measure("one Redis (standalone)", [single],
                                   f'    address: "{single.address}"', upstream_port, workdir))
        finally:
            single.cleanup()
        for n in (1, 3):
            cluster = RedisClusterSetup(masters=n, replicas_per_master=0).start()
            try:
                seeds = ", ".join(f'"{s}"' for s in cluster.seeds)
                results.append(measure(f"Redis Cluster, {n} master{'s' if n > 1 else ''}", cluster.masters(),
                                       f"    mode: cluster\n    nodes: [{seeds}]", upstream_port, workdir))
            finally:
                cluster.cleanup()
    finally:
        upstream.send_signal(signal.SIGQUIT)
        upstream.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    one = next(r for r in results if r["name"].startswith("Redis Cluster, 1"))
    if CPU_BUDGET:
        lines = [
            f"# Decision capacity with every Redis master held to {CPU_BUDGET:g}% of a core",
            "",
            f"`CPU_BUDGET={CPU_BUDGET:g} python3 loadtest/cluster_scale.py`: each master in a cgroup with a CPU "
            f"quota of {CPU_BUDGET:g}% of one core, so Redis is what limits; wrk -t{THREADS} -c{CONNS}, {DURATION} s x "
            f"{ROUNDS} rounds (best shown), sluice {WORKERS} workers, token bucket per client, 100,000 clients, "
            "every request admitted. The request rate is the store's decision capacity at that budget.",
            "",
            "| setup | decisions/s | vs 1 master | busiest master's CPU (of its budget) | decisions/EVALSHA | redis µs/decision | non-2xx |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(f"| {r['name']} | {r['rate']:.0f} | {r['rate'] / one['rate']:.2f}x | "
                         f"{r['busiest_load'] * 100:.1f}% ({r['busiest_load'] * 100 / CPU_BUDGET * 100:.0f}%) | "
                         f"{r['batch']:.1f} | {r['us_per_decision']:.2f} | {r['non2xx']} |")
    else:
        lines = [
            "# Decision capacity: one Redis, 1-master and 3-master Redis Cluster",
            "",
            f"`python3 loadtest/cluster_scale.py`: wrk -t{THREADS} -c{CONNS}, {DURATION} s x {ROUNDS} rounds (best shown), "
            f"sluice {WORKERS} workers, token bucket per client, 100,000 clients (clients.lua), every request "
            "admitted. Capacity = decisions per CPU-second of the busiest master (a core per master)." +
            (f" Pinned: wrk on {os.environ['CPUS_LOAD']}, sluice on {os.environ.get('CPUS_PROXY', 'any')}, upstream on "
             f"{os.environ.get('CPUS_UPSTREAM', 'any')}, Redis masters on {os.environ['CPUS_REDIS']} (one core each)."
             if CPUS_LOAD is not None and CPUS_REDIS is not None else ""),
            "",
            "| setup | req/s | req/s vs 1 master | redis µs/decision (of it: kernel, script) | decisions/EVALSHA | busiest master's CPU share | capacity (decisions/s) | vs 1 master |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(f"| {r['name']} | {r['rate']:.0f} | {r['rate'] / one['rate']:.2f}x | "
                         f"{r['us_per_decision']:.2f} ({r['sys_per_decision']:.2f}, "
                         f"{r['script_per_decision']:.2f}) | {r['batch']:.1f} | "
                         f"{r['busiest'] * 100:.0f}% | {r['capacity']:.0f} | {r['capacity'] / one['capacity']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    name = f"cluster_scale_budget_{CPU_BUDGET:g}.md" if CPU_BUDGET else "cluster_scale.md"
    with open(os.path.join(RESULTS, name), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
