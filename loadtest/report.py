#!/usr/bin/env python3
"""Turns the raw figures run.sh collected into report.md, plot.dat and a table on stdout.

Usage: report.py RESULTS_DIR. Reads runs.tsv (one line per wrk measurement), idle.tsv,
redis_keys.txt, machine.txt and anomalies.txt from RESULTS_DIR. Standard library only.
"""
import os
import statistics
import sys

COLUMNS = ["scenario", "conns", "target", "round", "rps", "p50", "p99", "non2xx", "sockerr",
           "wrk_requests", "requests", "evals", "upstream", "r429", "store_errors", "crashed",
           "rss_kb", "redis_usec", "listen_drops", "upstream_conns", "proxy_ticks", "redis_ticks",
           "backlog_drops", "redis_cpu_usec", "proxy_switches"]

DESCRIPTION = {
    "none": "route without limits",
    "browser": "route without limits, requests with a browser's 12 fields (wrk's have Host only)",
    "paced": "route without limits, each connection pausing PACE_MS between requests (both proxies at one rate)",
    "token_bucket": "token bucket on every request (never runs out)",
    "token_bucket_browser": "the same token bucket, requests with a browser's 12 fields",
    "token_bucket_memory": "the same token bucket, in process (store.type: memory, no Redis)",
    "token_bucket_paced": "the same token bucket, paced as paced (workers idle between batches)",
    "sliding_window": "sliding window on every request (limit 10^7 per 1s)",
    "concurrency": "concurrency limit on every request (one key, 100000 in flight at most: a slot taken and given back per request)",
    "concurrency_clients": "concurrency limit per client (100,000 clients, 8 in flight each at most: a slot taken and given back per request)",
    "reject90": "90 % of requests rejected (9 in 10 to an exhausted limit)",
    "reject100": "every request rejected (429 answered by sluice)",
    "clients100k": "100,000 distinct clients (X-Forwarded-For from a trusted peer), token bucket per client",
    "clients100k_full": "the same 100,000 clients, each bucket full again when its client comes back (rate 1000/s)",
    "clients100k_memory": "the same 100,000 clients, token bucket per client in process (store.type: memory)",
    "clients100k_limit_req": "the same, against nginx with limit_req keyed on the client (per node, like the memory store)",
}
# scenarios where any answer other than 2xx is a fault
ALL_2XX = {"none", "browser", "paced", "token_bucket_paced", "token_bucket", "token_bucket_browser", "token_bucket_memory", "sliding_window", "concurrency", "concurrency_clients", "clients100k", "clients100k_full", "clients100k_memory",
           "clients100k_limit_req"}
# scenarios where every request is one decision by Redis (nothing rejected, nothing remembered)
DECIDED_BY_REDIS = {"token_bucket", "token_bucket_browser", "token_bucket_paced", "sliding_window", "clients100k", "clients100k_full"}
# Redis CPU per decision against the SET PXAT floor, at most (issue 24)
TARGET_FLOOR_RATIO = {"token_bucket": 2.0, "token_bucket_browser": 2.0, "clients100k": 2.0, "clients100k_full": 2.0, "sliding_window": 3.0}
# sluice's CPU per request against nginx's, at most (issue 24)
TARGET_CPU_RATIO = {"none": 1.0, "browser": 1.0, "paced": 1.0, "token_bucket": 1.1, "token_bucket_browser": 1.1,
                    "token_bucket_paced": 1.1}

# Speed targets of the performance issue.
TARGET_KB_PER_IDLE_CONN = 40
TARGET_BYTES_PER_KEY = 100


def read_runs(path):
    runs = []
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(COLUMNS):
                continue
            row = dict(zip(COLUMNS, parts))
            for k in COLUMNS[3:]:
                row[k] = float(row[k])
            row["conns"] = int(row["conns"])
            runs.append(row)
    return runs


def read_kv(path):
    kv = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, _, v = line.rstrip("\n").partition("=")
                    kv[k] = v
    return kv


def summarize(runs):
    """One entry per (scenario, conns), in the order they ran."""
    order, groups = [], {}
    for r in runs:
        key = (r["scenario"], r["conns"])
        if key not in groups:
            order.append(key)
            groups[key] = {"nginx": [], "sluice": []}
        groups[key][r["target"]].append(r)
    rows = []
    for key in order:
        g = groups[key]
        row = {"scenario": key[0], "conns": key[1]}
        for target in ("nginx", "sluice"):
            ok = [r for r in g[target] if not r["crashed"]]
            row[target] = {
                "rps": statistics.mean(r["rps"] for r in ok) if ok else None,
                "p50": statistics.mean(r["p50"] for r in ok) if ok else None,
                "p99": statistics.mean(r["p99"] for r in ok) if ok else None,
                "rps_each": [r["rps"] for r in ok],
                "non2xx": sum(r["non2xx"] for r in g[target]),
                "sockerr": sum(r["sockerr"] for r in g[target]),
                "wrk_requests": sum(r["wrk_requests"] for r in g[target]),
                "requests": sum(r["requests"] for r in ok),
                "evals": sum(r["evals"] for r in ok),
                "upstream": sum(r["upstream"] for r in ok),
                "r429": sum(r["r429"] for r in ok),
                "store_errors": sum(r["store_errors"] for r in ok),
                "redis_usec": sum(r["redis_usec"] for r in ok),
                "listen_drops": sum(r["listen_drops"] for r in g[target]),
                "backlog_drops": sum(r["backlog_drops"] for r in g[target]),
                "upstream_conns": sum(r["upstream_conns"] for r in g[target]),
                # CPU time (clock ticks of 10 ms) of the proxy and of redis-server while wrk ran
                "proxy_ticks": sum(r["proxy_ticks"] for r in ok),
                "redis_ticks": sum(r["redis_ticks"] for r in ok),
                "redis_cpu_usec": sum(r["redis_cpu_usec"] for r in ok),
                # context switches of the proxy's threads (voluntary and not) while wrk ran
                "proxy_switches": sum(r["proxy_switches"] for r in ok),
                "crashed": any(r["crashed"] for r in g[target]),
                "rss_kb": g[target][-1]["rss_kb"] if g[target] else 0,
            }
        n, s = row["nginx"], row["sluice"]
        row["ratio"] = s["rps"] / n["rps"] if s["rps"] and n["rps"] else None
        row["calls"] = s["evals"] / s["requests"] if s["requests"] else None
        row["up_per_req"] = s["upstream"] / s["requests"] if s["requests"] else None
        row["usec_per_call"] = s["redis_usec"] / s["evals"] if s["evals"] else None
        # CPU µs per request answered (wrk's count: every request, forwarded or not)
        for target in ("nginx", "sluice"):
            t = row[target]
            done = sum(r["wrk_requests"] for r in g[target] if not r["crashed"])
            t["cpu_us"] = 10000.0 * t["proxy_ticks"] / done if done and t["proxy_ticks"] else None
            t["redis_cpu_us"] = 10000.0 * t["redis_ticks"] / done if done and t["redis_ticks"] else None
            t["switches"] = t["proxy_switches"] / done if done else None
        row["limited_pct"] = 100.0 * s["r429"] / s["requests"] if s["requests"] else None
        # Redis CPU (INFO cpu, microseconds) per decision and decisions per call, where every
        # request is one decision by Redis
        decided = key[0] in DECIDED_BY_REDIS and s["requests"]
        row["redis_per_decision"] = s["redis_cpu_usec"] / s["requests"] if decided and s["redis_cpu_usec"] else None
        row["per_call"] = s["requests"] / s["evals"] if decided and s["evals"] else None
        notes = []
        if s["crashed"]:
            notes.append("SLUICE CRASHED")
        if n["non2xx"]:
            notes.append(f"nginx non-2xx {int(n['non2xx'])}")
        if n["sockerr"]:
            notes.append(f"nginx socket errors {int(n['sockerr'])}")
        if s["non2xx"] and row["scenario"] in ALL_2XX:
            notes.append(f"sluice non-2xx {int(s['non2xx'])}")
        if s["sockerr"]:
            notes.append(f"sluice socket errors {int(s['sockerr'])}")
        if n["listen_drops"]:
            notes.append(f"nginx accept-queue drops {int(n['listen_drops'])}")
        if s["listen_drops"]:
            notes.append(f"sluice accept-queue drops {int(s['listen_drops'])}")
        for who, t in (("nginx", n), ("sluice", s)):
            if t["backlog_drops"]:
                notes.append(f"packets dropped by the kernel during {who}'s runs {int(t['backlog_drops'])}")
        for who, t in (("nginx", n), ("sluice", s)):
            # new upstream connections: a pool that keeps too few idle connections reconnects
            if t["upstream"] and t["upstream_conns"] > 0.01 * t["upstream"]:
                notes.append(f"{who} opened {int(t['upstream_conns'])} upstream connections "
                             f"({1000 * t['upstream_conns'] / t['upstream']:.0f} per 1000 forwarded)")
        if s["store_errors"]:
            notes.append(f"sluice store errors {int(s['store_errors'])}")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return rows


def f(x, fmt):
    return "-" if x is None else format(x, fmt)


def table(rows, floor=None):
    head = ["scenario", "conns", "nginx req/s", "nginx p50 ms", "nginx p99 ms", "sluice req/s",
            "sluice p50 ms", "sluice p99 ms", "ratio", "nginx CPU µs/req", "sluice CPU µs/req",
            "CPU vs nginx", "switches/req nginx / sluice", "Redis CPU µs/req", "Redis calls/req", "decisions/call", "Redis µs/decision",
            "x SET floor", "Redis µs/call", "upstream/req", "429 %", "sluice RSS MB", "notes"]
    body = []
    for r in rows:
        n, s = r["nginx"], r["sluice"]
        cpu_ratio = s["cpu_us"] / n["cpu_us"] if s["cpu_us"] and n["cpu_us"] else None
        per_decision = r["redis_per_decision"]
        body.append([
            r["scenario"], str(r["conns"]),
            f(n["rps"], ".0f"), f(n["p50"], ".2f"), f(n["p99"], ".2f"),
            f(s["rps"], ".0f"), f(s["p50"], ".2f"), f(s["p99"], ".2f"),
            f(r["ratio"], ".2f"), f(n["cpu_us"], ".1f"), f(s["cpu_us"], ".1f"), f(cpu_ratio, ".2f"),
            f(n["switches"], ".3f") + " / " + f(s["switches"], ".3f"),
            f(s["redis_cpu_us"], ".1f"), f(r["calls"], ".3f"), f(r["per_call"], ".1f"), f(per_decision, ".2f"),
            f(per_decision / floor if per_decision and floor else None, ".2f"),
            f(r["usec_per_call"], ".1f"), f(r["up_per_req"], ".3f"),
            f(r["limited_pct"], ".1f"), f(s["rss_kb"] / 1024 if s["rss_kb"] else None, ".1f"),
            r["notes"],
        ])
    return head, body


def markdown_table(head, body):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i in (0, len(head) - 1) else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(c for c in row) + " |" for row in body]
    return "\n".join(out)


def text_table(head, body):
    widths = [max(len(head[i]), *(len(r[i]) for r in body)) if body else len(head[i])
              for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for r in body:
        lines.append("  ".join(c.rjust(w) if 0 < i < len(head) - 1 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)


def read_idle(path):
    idle = {}
    if os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                p = line.split()
                if len(p) == 5:
                    opened, before, after, active = (int(float(x)) for x in p[1:])
                    idle[p[0]] = {"opened": opened, "before": before, "after": after, "active": active,
                                  "kb_per_conn": (after - before) / opened if opened else None}
    return idle


def read_keys(path):
    keys = []
    if os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                p = line.split()
                if len(p) == 4:
                    keys.append({"conns": int(p[0]), "keys": int(p[1]), "memory_usage": float(p[2]),
                                 "used_memory_per_key": float(p[3])})
    return keys


def read_floor(path):
    """The SET PXAT floor (µs of Redis CPU per SET): the mean of the measurements."""
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        values = [float(line) for line in fh if line.strip()]
    return statistics.mean(values) if values else None


def targets(rows, idle, keys, floor=None):
    """(target, measured, verdict) lines for the speed targets of the performance issue."""
    out = []
    by = {(r["scenario"], r["conns"]): r for r in rows}
    for (name, conns), r in by.items():
        most = TARGET_FLOOR_RATIO.get(name)
        if most is None or not floor or r["redis_per_decision"] is None:
            continue
        x = r["redis_per_decision"] / floor
        out.append((f"{name}, {conns} conns: Redis CPU per decision <= {most}x a SET PXAT",
                    f"{r['redis_per_decision']:.2f} µs vs {floor:.2f} µs = {x:.2f}x, "
                    f"{r['per_call']:.1f} decisions per call", x <= most))
    # The memory store (issue 24): throughput at least nginx limit_req's, p99 at most 1.2x
    # nginx plain's.
    for (name, conns), r in by.items():
        if name == "clients100k_limit_req" and r["ratio"] is not None:
            out.append((f"memory store, 100,000 clients, {conns} conns: req/s >= nginx limit_req's",
                        f"{r['ratio']:.2f}x", r["ratio"] >= 1.0))
        if name == "clients100k_memory" and r["sluice"]["p99"] and r["nginx"]["p99"]:
            x = r["sluice"]["p99"] / r["nginx"]["p99"]
            out.append((f"memory store, 100,000 clients, {conns} conns: p99 <= 1.2x nginx plain's",
                        f"{r['sluice']['p99']:.2f} ms vs {r['nginx']['p99']:.2f} ms = {x:.2f}x", x <= 1.2))
    for (name, conns), r in by.items():
        most = TARGET_CPU_RATIO.get(name)
        if most is None or not r["sluice"]["cpu_us"] or not r["nginx"]["cpu_us"]:
            continue
        x = r["sluice"]["cpu_us"] / r["nginx"]["cpu_us"]
        out.append((f"{name}, {conns} conns: sluice CPU per request <= {most}x nginx's",
                    f"{r['sluice']['cpu_us']:.1f} µs vs {r['nginx']['cpu_us']:.1f} µs = {x:.2f}x", x <= most))
    for (name, conns), r in sorted(by.items(), key=lambda kv: kv[0][1]):
        if name != "token_bucket" or r["ratio"] is None:
            continue
        ok = r["ratio"] >= 1.0 and r["sluice"]["p99"] <= r["nginx"]["p99"]
        out.append((f"token bucket, {conns} conns: req/s >= 1.0x nginx and p99 <= nginx",
                    f"{r['ratio']:.2f}x, p99 {r['sluice']['p99']:.2f} ms vs {r['nginx']['p99']:.2f} ms",
                    ok))
    limited = [r for r in rows if r["scenario"] not in ("none", "browser") and r["calls"] is not None]
    if limited:
        worst = max(limited, key=lambda r: r["calls"])
        out.append(("at most one Redis call per request",
                    f"max {worst['calls']:.3f} ({worst['scenario']}@{worst['conns']})",
                    round(worst["calls"], 2) <= 1.0))
    for (name, conns), r in sorted(by.items(), key=lambda kv: kv[0][1]):
        tb = by.get(("token_bucket", conns))
        if name != "reject100" or not tb or not r["sluice"]["rps"] or not tb["sluice"]["rps"]:
            continue
        x = r["sluice"]["rps"] / tb["sluice"]["rps"]
        up = r["up_per_req"]
        out.append((f"rejected answered >= 2x the forwarded rate, {conns} conns, upstream untouched",
                    f"{r['sluice']['rps']:.0f} vs {tb['sluice']['rps']:.0f} req/s = {x:.2f}x"
                    + (f", upstream/req {up:.4f}" if up is not None else ""),
                    x >= 2.0 and (up is None or up < 0.001)))
    if "sluice" in idle and idle["sluice"]["kb_per_conn"] is not None:
        k = idle["sluice"]["kb_per_conn"]
        out.append((f"<= {TARGET_KB_PER_IDLE_CONN} KB RSS per idle keep-alive connection",
                    f"{k:.1f} KB", k <= TARGET_KB_PER_IDLE_CONN))
    for k in keys:
        out.append((f"Redis memory per token-bucket key <= {TARGET_BYTES_PER_KEY} bytes",
                    f"{k['memory_usage']:.0f} B (MEMORY USAGE), {k['used_memory_per_key']:.0f} B "
                    f"(used_memory / keys), {k['keys']} keys after clients100k@{k['conns']}",
                    k["memory_usage"] <= TARGET_BYTES_PER_KEY))
    return out


def main():
    res = sys.argv[1]
    rows = summarize(read_runs(os.path.join(res, "runs.tsv")))
    idle = read_idle(os.path.join(res, "idle.tsv"))
    keys = read_keys(os.path.join(res, "redis_keys.txt"))
    machine = read_kv(os.path.join(res, "machine.txt"))
    anomalies = []
    if os.path.exists(os.path.join(res, "anomalies.txt")):
        with open(os.path.join(res, "anomalies.txt")) as fh:
            anomalies = [l.rstrip("\n") for l in fh if l.strip()]

    floor = read_floor(os.path.join(res, "set_floor.txt"))
    head, body = table(rows, floor)
    print()
    print(text_table(head, body))
    checks = targets(rows, idle, keys, floor)

    with open(os.path.join(res, "plot.dat"), "w") as fh:
        fh.write("# label nginx_rps sluice_rps nginx_p99_ms sluice_p99_ms\n")
        for r in rows:
            fh.write(f"{r['scenario']}@{r['conns']} {r['nginx']['rps'] or 0:.1f} {r['sluice']['rps'] or 0:.1f} "
                     f"{r['nginx']['p99'] or 0:.3f} {r['sluice']['p99'] or 0:.3f}\n")

    md = ["# sluice load test", ""]
    threads = next((p.split('=', 1)[1] for p in machine.get('settings', '').split() if p.startswith('THREADS=')), '?')
    md.append(f"{machine.get('date', '?')}; `loadtest/run.sh` with {machine.get('settings', '?')}; "
              f"took {machine.get('elapsed', '?')}.")
    md += ["", "## Machine", "",
           f"- CPU: {machine.get('nproc', '?')} cores, {machine.get('cpu', '?')}; memory {machine.get('memory', '?')}",
           f"- {machine.get('os', '?')}, kernel {machine.get('kernel', '?')}; load average at the end: {machine.get('load', '?')}",
           f"- nginx {machine.get('nginx', '?')}, {machine.get('wrk', '?')}, Redis {machine.get('redis', '?')}, "
           f"{machine.get('sluice', '?')}, {machine.get('gnuplot', '?')}",
           f"- Everything on 127.0.0.1 of this one machine: wrk ({threads} threads), the proxy under test, the "
           "nginx upstream, Redis. They share the cores, so the figures compare the two proxies under the "
           "same conditions; they are not absolute capacities.",
           f"- Cores: {machine.get('pinning', 'any')} (taskset; `any`: the scheduler's choice).",
           "", "## Results", "",
           markdown_table(head, body), "",
           "- req/s, p50 and p99 are means over the rounds (wrk `--latency`, latency in ms); each round "
           "ran nginx then sluice, alternating, so drifting machine noise hits both.",
           "- ratio = sluice req/s / nginx req/s. In reject90/reject100 nginx forwards everything (it "
           "has no limits), so the ratio there compares sluice's 429 answers with nginx's proxying. In "
           "clients100k_limit_req the nginx side limits too (`limit_req`, zone keyed on "
           "`$http_x_forwarded_for`, 1r/m, burst 1000000 nodelay) and sluice uses its memory store.",
           "- CPU µs/req = user + system CPU time the proxy (nginx: master and workers; sluice: its one "
           "process) used during the rounds, from `/proc/PID/stat`, divided by wrk's request count. "
           "Redis CPU µs/req is the same for redis-server during sluice's rounds: on this one machine "
           "it competes with the proxies for the same two cores, so it is part of what the limiter costs here.",
           "- CPU vs nginx = sluice CPU µs/req / nginx CPU µs/req.",
           "- switches/req = context switches of the proxy's threads (voluntary and involuntary, "
           "`/proc/PID/task/*/status`) during the rounds / wrk's request count: a worker that finds "
           "nothing to do sleeps and is woken again, which on shared cores costs CPU of its own.",
           "- Redis calls/req = decide calls (FCALL, EVALSHA, EVAL in Redis `INFO commandstats`) / "
           "requests counted in sluice's `sluice_requests_total`, over the sluice runs; decisions/call "
           "is its inverse where every request is one decision by Redis (token_bucket, sliding_window, "
           "clients100k).",
           "- Redis µs/decision = Redis's CPU (user + system, `INFO cpu`: the script, the network, "
           "the wake-ups) during sluice's runs / decisions, in the same scenarios; x SET floor = that "
           f"against Redis's CPU per plain `SET key value PXAT t` ({f(floor, '.2f')} µs): 100,000 keys, "
           "redis-benchmark with 50 connections pipelining 16 deep, on the same Redis at the start and "
           "at the end of the run (the mean).",
           "- Redis µs/call = Redis's own time per decide call (`usec` of FCALL, EVALSHA, EVAL in "
           "`INFO commandstats`): the script's cost, without the network.",
           "- upstream/req = requests the upstream nginx served (its `stub_status`) / sluice's requests: "
           "1 when everything is forwarded, 0.1 in reject90, 0 in reject100.",
           "- 429 % = sluice's 429 answers / its requests (from /metrics).",
           "- sluice RSS: VmRSS of the sluice process after the last round of the scenario (a fresh "
           "sluice per scenario).",
           "- notes: anything that should not happen: non-2xx answers where every request should "
           "pass, wrk socket errors (connect/read/write/timeout), connections the kernel dropped because "
           "the proxy's accept queue was full (`ListenDrops`, whole machine, during that run; a "
           "dropped SYN is retried after 1 s, which shows as a p99 around 1 s), packets the kernel "
           "dropped because a CPU's input backlog was full (`/proc/net/softnet_stat`, whole machine, "
           "during the runs: on loopback a burst of 1000 connections can overflow "
           "`net.core.netdev_max_backlog`; each drop costs a retransmission 200 ms to 1 s later, "
           "which lands in the tail latencies of whichever proxy ran), store errors "
           "(`sluice_store_errors_total`: no Redis answer within `store.redis.timeout`, request "
           "forwarded anyway), new upstream connections opened during the runs when they exceed 1 % of "
           "the forwarded requests (counted by the upstream's `stub_status`: a keep-alive pool "
           "that closes and reopens connections), a crash.",
           ""]
    md += ["## Speed targets", "", "| target | measured | |", "|---|---|---|"]
    for name, measured, ok in checks:
        md.append(f"| {name} | {measured} | {'met' if ok else '**not met**'} |")
    md.append("")
    if idle:
        md += ["## Idle keep-alive connections", "",
               "Each connection made one request, read the answer, and stayed open and silent. "
               "RSS measured before and after (summed over the master and workers for nginx).", "",
               "| proxy | connections | still open (proxy's count) | RSS before KB | RSS after KB | KB per connection |",
               "|---|---:|---:|---:|---:|---:|"]
        for name in ("sluice", "nginx"):
            if name in idle:
                i = idle[name]
                md.append(f"| {name} | {i['opened']} | {i['active']} | {i['before']} | {i['after']} | "
                          f"{f(i['kb_per_conn'], '.1f')} |")
        md.append("")
    if keys:
        md += ["## Redis memory per token-bucket key", "",
               "After clients100k: `MEMORY USAGE` (SAMPLES 0) averaged over up to 1000 keys found "
               "with `SCAN MATCH sluice:*`, and the growth of `used_memory` since the scenario "
               "started divided by the number of keys (this one includes the key space and expiry "
               "tables).", "",
               "| scenario | keys | MEMORY USAGE, bytes/key | used_memory growth, bytes/key |",
               "|---|---:|---:|---:|"]
        for k in keys:
            md.append(f"| clients100k@{k['conns']} | {k['keys']} | {k['memory_usage']:.0f} | "
                      f"{k['used_memory_per_key']:.0f} |")
        md.append("")
    md += ["## Set-up", "",
           "- Both proxies: access log off (sluice `logging.access_log: off`, `summary_interval: 0`; "
           "nginx `access_log off`), the same worker count (sluice `server.workers` = nginx "
           "`worker_processes`), keep-alive to the upstream (nginx `keepalive 64` per worker, "
           "`proxy_http_version 1.1`, `Connection \"\"`; sluice `max_idle: 64` per worker), "
           "`X-Forwarded-For`, `X-Forwarded-Proto` and `Via` set by both. nginx "
           "`keepalive_requests` raised to 1000000 (client and upstream side) so neither proxy "
           "closes busy connections.",
           "- The upstream is one more nginx answering `200 ok` to everything.",
           "- Redis: no persistence, on loopback TCP; sluice's default `store.redis.timeout` (25ms).",
           "- Limits (configs in `configs/`): token bucket rate 1000000 per 1s, burst 1000000 (never "
           "runs out); sliding window limit 10000000 per 1s (nothing rejected; the set holds one "
           "member per request of the last second); reject: rate 1 per 1h, burst 1; clients100k: "
           "rate 1 per 1m, burst 1000000, keyed on the forwarded client address (`trusted_proxies: "
           "[127.0.0.1/32]`), wrk rotating `X-Forwarded-For` over 10.0.0.0-10.1.134.159.",
           "- wrk: `--timeout 5s`; a short unmeasured warm-up run against both before each scenario.",
           "- Raw wrk outputs in `wrk/`, sluice logs in `logs/`, sluice's /metrics at the end of each "
           "scenario in `metrics/` (store and upstream latency histograms), per-run figures in `runs.tsv`.",
           ""]
    if anomalies:
        md += ["## Anomalies seen during the run", "", "```"] + anomalies[:60] + ["```", ""]
    md += ["![req/s and p99, nginx vs sluice](plot.png)", ""]
    with open(os.path.join(res, "report.md"), "w") as fh:
        fh.write("\n".join(md))

    print()
    for name, measured, ok in checks:
        print(f"  [{'met' if ok else 'NOT MET'}] {name}: {measured}")
    for name in ("sluice", "nginx"):
        if name in idle:
            i = idle[name]
            print(f"  idle {name}: {i['opened']} connections, {f(i['kb_per_conn'], '.1f')} KB each "
                  f"(RSS {i['before']} -> {i['after']} KB, {i['active']} still open)")
    if anomalies:
        print(f"  anomalies ({len(anomalies)}): see {os.path.join(res, 'anomalies.txt')}")
        for a in anomalies[:10]:
            print("    " + a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
