"""Reading sluice's admin port: plain requests, /metrics parsing, /stats.json, listeners.

  admin_request(port, path, method)   one request on a new connection: (status, headers, body)
  Metrics.fetch(port)                 /metrics parsed (Prometheus text format 0.0.4)
  stats_json(port)                    /stats.json as a dict
  listening_ports(pid)                TCP ports a process listens on (from /proc)
  wait_admin(port)                    waits until /healthz answers 200
"""

import http.client
import json
import os
import re

from harness import LOOPBACK, wait_until

__all__ = ["admin_request", "Metrics", "stats_json", "listening_ports", "wait_admin"]

_SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)(?: \d+)?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def admin_request(port, path, method="GET", timeout=5.0):
    """(status, {lower-case name: value}, body bytes) for one request on a new connection."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class Metrics:
    """One scrape of /metrics. samples: [(name, {label: value}, float)] in text order."""

    def __init__(self, text):
        self.text = text
        self.samples = []
        self.types = {}
        self.helps = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
                continue
            if line.startswith("# HELP "):
                _, _, name, *rest = line.split(" ", 3)
                self.helps[name] = rest[0] if rest else ""
                continue
            if line.startswith("#"):
                continue
            m = _SAMPLE_RE.match(line)
            if not m:
                raise AssertionError(f"not a Prometheus sample line: {line!r}")
            labels = {}
            raw = m.group("labels") or ""
            pos = 0
            while pos < len(raw):
                lm = _LABEL_RE.match(raw, pos)
                if not lm:
                    raise AssertionError(f"bad label set in {line!r}")
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
            self.samples.append((m.group("name"), labels, float(m.group("value"))))

    @classmethod
    def fetch(cls, port):
        status, headers, body = admin_request(port, "/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {body[:300]!r}")
        return cls(body.decode("utf-8"))

    def get(self, name, **labels):
        """The value of the sample with exactly these labels, or None when it is absent."""
        for n, l, v in self.samples:
            if n == name and l == labels:
                return v
        return None

    def select(self, name, **labels):
        """[(labels, value)] of every sample of `name` whose labels include `labels`."""
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == x for k, x in labels.items())]

    def histogram(self, name):
        """(buckets [(le, cumulative)], sum, count) of a label-less histogram."""
        buckets = [(float(l["le"]) if l["le"] != "+Inf" else float("inf"), v)
                   for l, v in self.select(name + "_bucket")]
        return buckets, self.get(name + "_sum"), self.get(name + "_count")


def stats_json(port):
    status, headers, body = admin_request(port, "/stats.json")
    if status != 200:
        raise AssertionError(f"/stats.json answered {status}: {body[:300]!r}")
    return json.loads(body)


def listening_ports(pid):
    """The TCP ports (IPv4 and IPv6) on which process `pid` has a listening socket."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == "0A" and inode in inodes:  # 0A = LISTEN
                        ports.add(int(local.rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports


def wait_admin(port, timeout=10.0):
    """Waits until the admin port answers /healthz with 200 (it starts listening just after
    the proxy port does)."""
    def healthy():
        try:
            return admin_request(port, "/healthz", timeout=1.0)[0] == 200
        except OSError:
            return False
    wait_until(healthy, timeout, interval=0.05, message=f"admin port {port} answering /healthz")
