"""Integration test harness for sluice (Python standard library only).

Pieces:
  free_port()            a free loopback TCP port (bind port 0, read it back)
  to_yaml(value)         a small block-style YAML emitter for config dicts
  proxy_config(...)      a sluice config dict with test-friendly defaults
  Sluice                 runs `$SLUICE_BIN -c FILE`, waits until it listens, stops it
  run_cli(args)          runs the binary once and returns the CompletedProcess
  Upstream               a raw-socket threaded HTTP/1.1 server that records everything
                         it receives; what it answers is a per-test "behaviour"
  RawClient              sends exact bytes, parses responses itself (status line,
                         headers, body by Content-Length / chunked / close)
  simple_request(...)    one request through http.client, for simple cases
  SluiceTestCase         unittest.TestCase with start_upstream / start_sluice / client /
                         start_redis helpers that register their own cleanup
  RedisServer            a throwaway redis-server on a free loopback port (no persistence):
                         command(), pause() (CLIENT PAUSE), stop(), restart() on the same port
  RedisClient            a minimal RESP client (one connection)
  redis_store(...)       the `store` config section for a RedisServer
  token_bucket / sliding_window / leaky_bucket / limited_route
                         limit and route dicts for configs
  ratelimit_headers(r)   RateLimit-Policy / RateLimit / X-RateLimit-* of a response, parsed
  retry_after(r)         Retry-After as an integer (fails unless it is one)

Every socket has a timeout and every wait has a deadline, so a broken proxy makes a test
fail, never hang.
"""

import atexit
import collections
import hashlib
import http.client
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http import HTTPStatus

LOOPBACK = "127.0.0.1"
SOCKET_TIMEOUT = 5.0  # default for every client and upstream socket
READY_TIMEOUT = 10.0  # sluice must listen within this after start

__all__ = [
    "LOOPBACK", "free_port", "wait_until", "WaitTimeout", "pattern_bytes", "sha256_hex",
    "to_yaml", "proxy_config", "sluice_binary", "run_cli", "Sluice", "Upstream",
    "UpstreamRequest", "UpstreamConnection", "respond", "echo", "echo_body", "big_response",
    "close_delimited", "delayed", "informational", "reset", "close_without_answer",
    "head_then_late_body", "EarlyAnswerUpstream",
    "send_raw", "garbage", "by_path", "http_response_bytes", "build_request", "chunked_body",
    "Response", "RawClient", "IncompleteResponse", "ConnectionClosed", "simple_request",
    "parse_access_line", "SluiceTestCase", "RedisError", "RedisClient", "RedisServer",
    "redis_binary", "redis_store", "token_bucket", "sliding_window", "leaky_bucket",
    "limited_route",
    "ratelimit_headers", "retry_after",
]


# ---------------------------------------------------------------------------------------
# Small utilities

class WaitTimeout(AssertionError):
    """A bounded wait ran out. An AssertionError, so unittest reports it as a failure."""


# The ports free_port() handed out last, in this process.
_recent_ports = collections.deque(maxlen=256)
# Ports handed out by the test processes running now: a file per port naming its process.
_PORTS_DIR = os.path.join(tempfile.gettempdir(), "sluice-test-ports")
_reserved_here = []


def _port_range():
    """Where free_port() looks: below the kernel's ephemeral range (or above it), so that no
    outgoing connection of any process (a client, sluice to its upstream or Redis) is given
    the port between its choice and the listener's bind; None where the range leaves no room."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - 1024 >= 4096:
        return max(1024, low - 12000), low - 1
    if 65535 - high >= 4096:
        return high + 1, 65535
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reserve(port):
    """Claims `port` for this process among the test processes running beside it (ctest -j):
    False where a live one holds it. A claim of a process that ended is taken over."""
    os.makedirs(_PORTS_DIR, exist_ok=True)
    path = os.path.join(_PORTS_DIR, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(path) as f:
                    holder = int(f.read() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder == os.getpid() or (holder and _alive(holder)):
                return False
            try:
                os.unlink(path)  # (its process ended)
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _reserved_here.append(path)
        return True
    return False


@atexit.register
def _release_ports():
    for path in _reserved_here:
        try:
            os.unlink(path)
        except OSError:
            pass


def free_port(host=LOOPBACK):
    """A TCP port nobody listens on right now, that no other test process running meanwhile
    was given, and none of the last 256 this process handed out (a process given two ports, a
    cluster node's data and bus ports or a listener and an admin port, binds both). Taken
    outside the kernel's ephemeral range: a port the kernel picked for port 0 was free only
    until some outgoing connection was given it, and a listener then failed to bind
    ("Address already in use")."""
    span = _port_range()
    for _ in range(1000):
        if span is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        else:
            port = random.randint(*span)
        if port in _recent_ports:
            continue
        if span is not None:
            if not _reserve(port):
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, port))
            except OSError:
                continue  # (kept: some other program listens there)
        _recent_ports.append(port)
        return port
    raise AssertionError("no free port found in 1000 tries")


def wait_until(predicate, timeout, interval=0.02, message="condition"):
    """Polls predicate() until it returns a truthy value; returns that value.
    Raises WaitTimeout when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}")
        time.sleep(interval)


def pattern_bytes(size, seed=1):
    """Deterministic pseudo-random bytes: a body whose corruption, reordering or
    truncation shows up in its hash."""
    return random.Random(seed).randbytes(size)


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# YAML emitting (block style; every string double-quoted so nothing is re-typed)

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _yaml_scalar(value):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid YAML double-quoted scalar.
        return json.dumps(value)
    raise TypeError(f"cannot emit {type(value).__name__} as YAML")


def _yaml_key(key):
    key = str(key)
    return key if _PLAIN_KEY.match(key) else json.dumps(key)


def _yaml_lines(value, indent):
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict) and item:
                lines.append(f"{pad}{_yaml_key(key)}:")
                lines.extend(_yaml_lines(item, indent + 2))
            elif isinstance(item, (list, tuple)) and item:
                lines.append(f"{pad}{_yaml_key(key)}:")
                lines.extend(_yaml_lines(item, indent + 2))
            else:
                lines.append(f"{pad}{_yaml_key(key)}: {_yaml_inline(item)}")
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, dict) and item:
                sub = _yaml_lines(item, indent + 2)
                sub[0] = f"{pad}- " + sub[0][indent + 2:]
                lines.extend(sub)
            elif isinstance(item, (list, tuple)) and item:
                lines.append(f"{pad}- {_yaml_inline(item)}")
            else:
                lines.append(f"{pad}- {_yaml_inline(item)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return lines


def _yaml_inline(value):
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml_key(k)}: {_yaml_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_inline(v) for v in value) + "]"
    return _yaml_scalar(value)


def to_yaml(value):
    """Block-style YAML for a tree of dict / list / str / int / float / bool / None."""
    if not isinstance(value, dict):
        raise TypeError("the top level of a config is a mapping")
    return "\n".join(_yaml_lines(value, 0)) + "\n"


# ---------------------------------------------------------------------------------------
# Config

def _merge(base, override):
    """Recursive dict merge; override wins; returns base."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def proxy_config(listen_port, upstreams, routes=None, *, server=None, client_ip=None,
                 logging=None, extra=None):
    """A sluice config dict for tests.

    upstreams: {name: "127.0.0.1:PORT" | [addresses] | {full upstream dict}}; plain
               addresses get connect_timeout 1s and timeout 5s.
    routes:    list of route dicts; default: one route "main", path_prefix "/", to the
               first upstream.
    server / client_ip / logging / extra: merged over the defaults.
    Always: admin disabled, memory store, debug logging, 2 workers.
    """
    ups = {}
    for name, spec in upstreams.items():
        if isinstance(spec, str):
            spec = {"servers": [spec]}
        elif isinstance(spec, (list, tuple)):
            spec = {"servers": list(spec)}
        ups[name] = _merge({"connect_timeout": "1s", "timeout": "5s"}, dict(spec))
    if routes is None:
        routes = [{"name": "main", "match": {"path_prefix": "/"}, "upstream": next(iter(ups))}]
    cfg = {
        "server": {
            "listen": [f"{LOOPBACK}:{listen_port}"],
            "workers": 2,
            "header_timeout": "2s",
            "idle_timeout": "10s",
            "shutdown_timeout": "3s",
        },
        "admin": {"listen": ""},
        "client_ip": {"trusted_proxies": []},
        "store": {"type": "memory"},
        "upstreams": ups,
        "routes": routes,
        "logging": {"level": "debug"},
    }
    if server:
        _merge(cfg["server"], server)
    if client_ip:
        _merge(cfg["client_ip"], client_ip)
    if logging:
        _merge(cfg["logging"], logging)
    if extra:
        _merge(cfg, extra)
    return cfg


# ---------------------------------------------------------------------------------------
# The sluice process

def sluice_binary():
    """$SLUICE_BIN; the test is skipped when it is not set (ctest always sets it)."""
    path = os.environ.get("SLUICE_BIN")
    if not path:
        raise unittest.SkipTest("SLUICE_BIN is not set (run through ctest)")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"SLUICE_BIN={path} is not an executable file")
    # sluice runs in its temp dir: a relative SLUICE_BIN (../../build/sluice) must not
    # be resolved from there.
    return os.path.abspath(path)


def run_cli(args, timeout=10.0):
    """Runs the binary with args; returns subprocess.CompletedProcess (text output)."""
    return subprocess.run([sluice_binary(), *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def _listen_port_of(config):
    try:
        listen = config["server"]["listen"][0]
        return int(listen.rsplit(":", 1)[1])
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return None


def _port_accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Sluice:
    """One sluice process with its config file and its captured output.

        s = Sluice(proxy_config(port, {...})).start()   # waits until the port accepts
        ...
        rc = s.stop()                                    # SIGTERM, returns exit code
        s.log_text()                                     # stdout + stderr so far
    """

    def __init__(self, config, *, port=None, workdir=None):
        self.binary = sluice_binary()
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="sluice-it-")
        self.config_path = os.path.join(self.workdir, "sluice.yaml")
        self.stdout_path = os.path.join(self.workdir, "stdout.log")
        self.stderr_path = os.path.join(self.workdir, "stderr.log")
        self.port = port
        self.proc = None
        self.returncode = None
        self.write_config(config)

    # config ------------------------------------------------------------------------
    def write_config(self, config):
        """config: a dict (emitted as YAML) or a YAML string (written as is)."""
        if isinstance(config, dict):
            text = to_yaml(config)
            if self.port is None:
                self.port = _listen_port_of(config)
        else:
            text = config
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(text)
        self.config_text = text

    @property
    def address(self):
        return (LOOPBACK, self.port)

    # life cycle --------------------------------------------------------------------
    def start(self, wait=True, timeout=READY_TIMEOUT, args=()):
        self._stdout = open(self.stdout_path, "wb")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([self.binary, "-c", self.config_path, *args],
                                     stdin=subprocess.DEVNULL, stdout=self._stdout,
                                     stderr=self._stderr, cwd=self.workdir)
        if wait:
            self.wait_ready(timeout)
        return self

    def _start_line_expected(self):
        """Whether the configuration logs at info, so that the start line comes."""
        return not re.search(r"^\s*level:\s*[\"']?(warn|error|critical|off)\b", self.config_text, re.M)

    def wait_ready(self, timeout=READY_TIMEOUT):
        """Waits until the listen port accepts a connection and the start line ("listening
        on ...") is out; fails early if the process exits. The port accepts as soon as it is
        bound; the other listeners, the admin port and the pid file come just after it, and
        the start line once they all are."""
        if self.port is None:
            raise AssertionError("Sluice.wait_ready needs the listen port (port=...)")
        deadline = time.monotonic() + timeout
        accepted = False  # (probed once: the probes wait in the backlog until the workers accept)
        while True:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise AssertionError(f"sluice exited with {self.returncode} before listening:\n"
                                     + self.log_text())
            accepted = accepted or _port_accepts(LOOPBACK, self.port)
            if accepted and (not self._start_line_expected()
                             or "listening on" in self.stdout_text() + self.stderr_text()):
                return
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"sluice did not listen on port {self.port} within "
                                  f"{timeout}s:\n" + self.log_text())
            time.sleep(0.02)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, timeout=10.0):
        """Waits for exit; returns the exit code (negative: killed by that signal).
        Raises WaitTimeout if the process is still running at the deadline."""
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(f"sluice still running {timeout}s later") from None
        self._close_files()
        return self.returncode

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Sends sig and waits for exit; returns the exit code. Kills (SIGKILL) and
        fails when the process does not exit within timeout."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.wait(timeout)
            except WaitTimeout:
                self.kill()
                raise
        self.returncode = self.proc.returncode
        self._close_files()
        return self.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc is not None:
            self.returncode = self.proc.returncode
        self._close_files()

    def _close_files(self):
        for name in ("_stdout", "_stderr"):
            f = getattr(self, name, None)
            if f is not None and not f.closed:
                f.close()

    def cleanup(self, grace=6.0):
        """Stops the process whatever state it is in (SIGTERM, then SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._close_files()

    def remove_workdir(self):
        if self._own_workdir and not os.environ.get("SLUICE_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # output ------------------------------------------------------------------------
    @staticmethod
    def _read(path):
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stdout_text(self):
        return self._read(self.stdout_path)

    def stderr_text(self):
        return self._read(self.stderr_path)

    def log_text(self):
        return ("--- sluice stdout ---\n" + self.stdout_text()
                + "--- sluice stderr ---\n" + self.stderr_text())

    def access_entries(self):
        """Every access-log line seen so far (stdout and stderr), parsed."""
        entries = []
        for line in (self.stdout_text() + "\n" + self.stderr_text()).splitlines():
            entry = parse_access_line(line)
            if entry:
                entries.append(entry)
        return entries

    def wait_access(self, timeout=5.0, **match):
        """Waits for an access-log entry whose fields equal every match item
        (e.g. target="/x", status="200"); returns it."""
        def find():
            for entry in self.access_entries():
                if all(entry.get(k) == v for k, v in match.items()):
                    return entry
            return None
        try:
            return wait_until(find, timeout, message=f"access line {match}")
        except WaitTimeout as e:
            raise WaitTimeout(f"{e}\n{self.log_text()}") from None

    def wait_store_connected(self, connections, timeout=5.0):
        """Waits until `connections` "redis: connected to" lines were logged (one per
        worker at start-up). sluice listens before its Redis connections are up and a
        decision asked for in that gap is a store error ("not connected to redis"), so
        tests that expect decisions wait for this first."""
        def count():
            text = self.stdout_text() + self.stderr_text()
            n = text.count("redis: connected to")
            return n if n >= connections else None
        try:
            return wait_until(count, timeout, message=f"{connections} redis connection(s)")
        except WaitTimeout as e:
            raise WaitTimeout(f"{e}\n{self.log_text()}") from None

    def wait_log(self, pattern, timeout=5.0):
        """Waits until the regex pattern matches somewhere in the output; returns the match."""
        rx = re.compile(pattern)
        try:
            return wait_until(lambda: rx.search(self.stdout_text() + self.stderr_text()),
                              timeout, message=f"log matching {pattern!r}")
        except WaitTimeout as e:
            raise WaitTimeout(f"{e}\n{self.log_text()}") from None


_ACCESS_RE = re.compile(
    r'^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(?:Z|[+-]\d\d:\d\d)) '
    r'(?P<client>\S+) "(?P<method>\S+) (?P<target>\S+) (?P<version>HTTP/\d\.\d)" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-)(?P<fields>(?: [A-Za-z_]+=(?:"[^"]*"|\S*))*)\s*$')
_FIELD_RE = re.compile(r'([A-Za-z_]+)=("[^"]*"|\S*)')


def parse_access_line(line):
    """The fields of a standard text access-log line as a dict of strings, or None.
    Keys: time client method target version status bytes, plus every key=value
    (route, limit, decision, remaining, upstream_ms, total_ms, peer, request_id, host,
    upstream, user_agent, ...; a quoted value without its quotes)."""
    m = _ACCESS_RE.search(line)
    if not m:
        return None
    entry = {k: m.group(k) for k in ("time", "client", "method", "target", "version", "status", "bytes")}
    for key, value in _FIELD_RE.findall(m.group("fields")):
        entry[key] = value[1:-1] if value.startswith('"') else value
    entry["line"] = line
    return entry


# ---------------------------------------------------------------------------------------
# Header lists

class _Headers:
    """Mixin for objects with .headers = [(name, value), ...] in received order."""

    def header_values(self, name):
        name = name.lower()
        return [v for n, v in self.headers if n.lower() == name]

    def header(self, name, default=None):
        values = self.header_values(name)
        return values[0] if values else default

    def joined(self, name):
        """All field lines of that name joined with ", " (None when absent)."""
        values = self.header_values(name)
        return ", ".join(values) if values else None

    def has_header(self, name):
        return bool(self.header_values(name))

    def header_names(self):
        return [n.lower() for n, _ in self.headers]


def _parse_header_line(line):
    text = line.rstrip(b"\r\n").decode("latin-1")
    name, sep, value = text.partition(":")
    if not sep:
        raise ValueError(f"header line without colon: {text!r}")
    return name, value.strip(" \t")


def _connection_tokens(headers):
    tokens = set()
    for n, v in headers:
        if n.lower() == "connection":
            tokens.update(t.strip().lower() for t in v.split(",") if t.strip())
    return tokens


# ---------------------------------------------------------------------------------------
# Buffered socket reading

class IncompleteResponse(AssertionError):
    """The peer closed (or reset) the connection in the middle of a message."""

    def __init__(self, message, partial=None):
        super().__init__(message)
        self.partial = partial


class ConnectionClosed(AssertionError):
    """The peer closed the connection before a message started."""


class _Reader:
    def __init__(self, sock, on_bytes=None):
        self.sock = sock
        self.buf = bytearray()
        self.eof = False
        self.on_bytes = on_bytes
        self.in_message = False  # the upstream sets it while reading a request

    def _fill(self):
        if self.eof:
            return False
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
            return False
        if self.on_bytes:
            self.on_bytes(len(data))
        self.buf += data
        return True

    def read_line(self, limit=1 << 20):
        """One line including its LF; b"" at a clean EOF before any byte of it."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return line
            start = len(self.buf)
            if len(self.buf) > limit:
                raise ValueError("line too long")
            if not self._fill():
                if self.buf:
                    partial = bytes(self.buf)
                    self.buf.clear()
                    raise IncompleteResponse(f"connection closed inside a line: {partial[:200]!r}")
                return b""

    def read_exact(self, n):
        out = bytearray()
        if self.buf:
            take = min(n, len(self.buf))
            out += self.buf[:take]
            del self.buf[:take]
        while len(out) < n:
            data = self.sock.recv(min(1 << 20, n - len(out)))
            if not data:
                self.eof = True
                raise IncompleteResponse(f"connection closed after {len(out)} of {n} bytes",
                                         bytes(out))
            if self.on_bytes:
                self.on_bytes(len(data))
            out += data
        return bytes(out)

    def read_until_close(self):
        out = bytearray(self.buf)
        self.buf.clear()
        while not self.eof:
            data = self.sock.recv(1 << 20)
            if not data:
                self.eof = True
                break
            if self.on_bytes:
                self.on_bytes(len(data))
            out += data
        return bytes(out)

    def read_headers(self):
        """Header lines up to the empty line: [(name, value)]."""
        headers = []
        while True:
            line = self.read_line()
            if line == b"":
                raise IncompleteResponse("connection closed inside the header section")
            if line in (b"\r\n", b"\n"):
                return headers
            headers.append(_parse_header_line(line))

    def read_chunked(self):
        """A chunked body; returns (body, trailers)."""
        body = bytearray()
        while True:
            line = self.read_line()
            if line == b"":
                raise IncompleteResponse("connection closed before a chunk header", bytes(body))
            size_text = line.split(b";", 1)[0].strip()
            size = int(size_text, 16)
            if size == 0:
                trailers = self.read_headers()
                return bytes(body), trailers
            try:
                body += self.read_exact(size)
            except IncompleteResponse as e:
                raise IncompleteResponse(str(e), bytes(body) + (e.partial or b"")) from None
            crlf = self.read_line()
            if crlf not in (b"\r\n", b"\n"):
                raise ValueError(f"chunk data not followed by CRLF: {crlf[:50]!r}")


# ---------------------------------------------------------------------------------------
# Upstream server

class UpstreamRequest(_Headers):
    """One complete request as the upstream received it."""

    def __init__(self, method, target, version, headers, body, conn_id, index_on_conn,
                 chunked, trailers, raw_head):
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers          # [(name, value)] in received order, names as sent
        self.body = body
        self.conn_id = conn_id          # 1, 2, ... in accept order
        self.index_on_conn = index_on_conn  # 0 for the first request on its connection
        self.chunked = chunked          # body arrived with Transfer-Encoding: chunked
        self.trailers = trailers
        self.raw_head = raw_head        # request line + header section, exact bytes

    def wants_close(self):
        tokens = _connection_tokens(self.headers)
        if self.version == "HTTP/1.0":
            return "keep-alive" not in tokens
        return "close" in tokens

    def __repr__(self):
        return f"<UpstreamRequest {self.method} {self.target} conn={self.conn_id}>"


class UpstreamConnection:
    """What a behaviour gets to answer with."""

    def __init__(self, upstream, sock, conn_id):
        self.upstream = upstream
        self.sock = sock
        self.id = conn_id
        self.closed = False
        self.keep_alive = True   # a behaviour sets False to close after its answer

    def send(self, data):
        self.sock.sendall(data)

    def send_response(self, status=200, headers=(), body=b"", **kw):
        self.send(http_response_bytes(status, headers, body, **kw))

    def sleep(self, seconds):
        """Sleeps unless the upstream is being stopped; True when the full time passed."""
        return not self.upstream._stopping.wait(seconds)

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()

    def reset(self):
        """Closes with a TCP RST (SO_LINGER 0)."""
        if not self.closed:
            self.closed = True
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()


class EarlyAnswerUpstream:
    """Answers every request as soon as its head has arrived, without reading its body, and
    closes: with body bytes unread, the close resets the connection (as Go's net/http does
    past 256 KB of unread body, or a server that rejects an upload by its Content-Length).
    `heads`: the request heads it got, in order."""

    def __init__(self, answer):
        self.answer = answer
        self.heads = []
        self._stopping = threading.Event()
        self._listener = socket.socket()
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(8)
        self.address = f"{LOOPBACK}:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="early-answer", daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stopping.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.1)
            if not ready:
                continue
            sock, _ = self._listener.accept()
            with sock:
                sock.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    got = sock.recv(65536)
                    if not got:
                        break
                    data += got
                self.heads.append(data.split(b"\r\n\r\n")[0])
                sock.sendall(self.answer)

    def close(self):
        self._stopping.set()
        self._thread.join(5)
        self._listener.close()


class Upstream:
    """A threaded HTTP/1.1 server on a free loopback port that records every request.

        up = Upstream(respond(200, body=b"hi")).start()
        up.address           "127.0.0.1:PORT"
        up.requests          [UpstreamRequest], complete requests in arrival order
        up.connections       number of TCP connections accepted
        up.open_connections()  of those, how many are still open
        up.bytes_received    bytes received over all connections
        up.incomplete        connections that closed inside a request
        up.behaviour = ...   change what it answers (callable(request, conn))
        up.stop()

    tls: an ssl.SSLContext (server side) makes it an HTTPS server; up.tls_failures then
    lists the handshakes that failed (exceptions) and up.peer_certs the client certificate
    (getpeercert(), None without one) of every connection whose handshake succeeded.
    """

    def __init__(self, behaviour=None, name="upstream", sock_timeout=10.0, tls=None):
        self.behaviour = behaviour or echo()
        self.name = name
        self.sock_timeout = sock_timeout
        self.tls = tls
        self.tls_failures = []
        self.peer_certs = []
        self.requests = []
        self.connections = 0
        self.bytes_received = 0
        self.incomplete = 0
        self.errors = []  # exceptions raised by behaviours or parsing (for debugging)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._conn_socks = set()
        self._threads = []
        self._listener = None
        self.port = None

    @property
    def address(self):
        return f"{LOOPBACK}:{self.port}"

    def start(self):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        t = threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self):
        self._stopping.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            socks = list(self._conn_socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self._threads):
            t.join(5)

    # statistics --------------------------------------------------------------------
    def snapshot(self):
        """(requests, connections, bytes_received, incomplete) right now."""
        with self._lock:
            return len(self.requests), self.connections, self.bytes_received, self.incomplete

    def wait_requests(self, n, timeout=5.0):
        """Waits until at least n complete requests arrived; returns the list."""
        wait_until(lambda: len(self.requests) >= n, timeout,
                   message=f"{n} request(s) at {self.name} (have {len(self.requests)})")
        with self._lock:
            return list(self.requests)

    def open_connections(self):
        """Connections accepted and not yet closed by either side."""
        with self._lock:
            return len(self._conn_socks)

    def conn_ids(self):
        with self._lock:
            return sorted({r.conn_id for r in self.requests})

    def last(self):
        with self._lock:
            return self.requests[-1] if self.requests else None

    # serving -----------------------------------------------------------------------
    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.1)
                if not ready:
                    continue
                sock, _ = self._listener.accept()
            except (OSError, ValueError):
                return
            with self._lock:
                self.connections += 1
                conn_id = self.connections
                self._conn_socks.add(sock)
            t = threading.Thread(target=self._serve, args=(sock, conn_id),
                                 name=f"{self.name}-conn{conn_id}", daemon=True)
            t.start()
            self._threads.append(t)

    def _count(self, n):
        with self._lock:
            self.bytes_received += n

    def _serve(self, sock, conn_id):
        sock.settimeout(self.sock_timeout)
        if self.tls is not None:
            raw = sock
            try:
                sock = self.tls.wrap_socket(raw, server_side=True)
            except (OSError, ValueError) as e:
                with self._lock:
                    self.tls_failures.append(e)
                    self._conn_socks.discard(raw)
                raw.close()
                return
            with self._lock:  # the SSL socket took over the descriptor
                self.peer_certs.append(sock.getpeercert())
                self._conn_socks.discard(raw)
                self._conn_socks.add(sock)
        conn = UpstreamConnection(self, sock, conn_id)
        reader = _Reader(sock, self._count)
        index = 0
        try:
            while not conn.closed and not self._stopping.is_set():
                request = self._read_request(reader, conn_id, index)
                if request is None:
                    break
                with self._lock:
                    self.requests.append(request)
                index += 1
                self.behaviour(request, conn)
                if conn.closed:
                    break
                if not conn.keep_alive or request.wants_close():
                    break
        except IncompleteResponse:
            with self._lock:
                self.incomplete += 1
        except (OSError, ValueError) as e:
            with self._lock:
                self.errors.append(e)
                if reader.in_message or reader.buf:
                    self.incomplete += 1
        except Exception as e:  # a behaviour bug: keep it for the test to see
            with self._lock:
                self.errors.append(e)
        finally:
            with self._lock:
                self._conn_socks.discard(sock)
            conn.close()

    def _read_request(self, reader, conn_id, index):
        reader.in_message = False
        line = reader.read_line()
        if line == b"":
            return None
        reader.in_message = True
        raw = bytearray(line)
        parts = line.rstrip(b"\r\n").decode("latin-1").split(" ")
        if len(parts) != 3:
            raise ValueError(f"bad request line {line!r}")
        method, target, version = parts
        headers = []
        while True:
            hl = reader.read_line()
            if hl == b"":
                raise IncompleteResponse("closed inside request head")
            raw += hl
            if hl in (b"\r\n", b"\n"):
                break
            headers.append(_parse_header_line(hl))
        lower = [(n.lower(), v) for n, v in headers]
        te = ", ".join(v for n, v in lower if n == "transfer-encoding").lower()
        cl = [v for n, v in lower if n == "content-length"]
        trailers = []
        chunked = False
        if "chunked" in te:
            chunked = True
            body, trailers = reader.read_chunked()
        elif cl:
            body = reader.read_exact(int(cl[0]))
        else:
            body = b""
        reader.in_message = False
        return UpstreamRequest(method, target, version, headers, body, conn_id, index,
                               chunked, trailers, bytes(raw))


# ---------------------------------------------------------------------------------------
# Upstream behaviours: callables (request, conn) -> None

def _reason(status):
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def http_response_bytes(status, headers=(), body=b"", *, reason=None, chunked=False,
                        add_length=True, version="HTTP/1.1", head_only=False):
    """A response as bytes. Content-Length is added (unless chunked, add_length=False, a
    Content-Length is already in headers, or the status has no body). head_only leaves
    the body out but keeps the framing headers (an answer to HEAD)."""
    headers = list(headers)
    names = {n.lower() for n, _ in headers}
    bodiless = 100 <= status < 200 or status in (204, 304)
    if chunked and "transfer-encoding" not in names:
        headers.append(("Transfer-Encoding", "chunked"))
    elif add_length and not bodiless and "content-length" not in names and not chunked:
        headers.append(("Content-Length", str(len(body))))
    head = f"{version} {status} {reason if reason is not None else _reason(status)}\r\n"
    head += "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n"
    out = head.encode("latin-1")
    if head_only or bodiless:
        return out
    if chunked:
        return out + (chunked_body(body) if body else b"0\r\n\r\n")
    return out + body


def chunked_body(data, sizes=(65536,), extension_on=None):
    """data in chunked coding. sizes is cycled to cut chunks (e.g. (1, 1000, 65536));
    extension_on: index of a chunk that gets a ';ext=1' chunk extension."""
    out = bytearray()
    pos = 0
    i = 0
    while pos < len(data):
        size = min(sizes[i % len(sizes)], len(data) - pos)
        ext = ";ext=1" if extension_on == i else ""
        out += f"{size:x}{ext}\r\n".encode() + data[pos:pos + size] + b"\r\n"
        pos += size
        i += 1
    out += b"0\r\n\r\n"
    return bytes(out)


class respond:
    """A fixed response. HEAD requests get the head only (with the same Content-Length)."""

    def __init__(self, status=200, body=b"", headers=(), *, reason=None, chunked=False,
                 add_length=True, close=False):
        self.status, self.body, self.headers = status, body, list(headers)
        self.reason, self.chunked, self.add_length, self.close = reason, chunked, add_length, close

    def __call__(self, req, conn):
        conn.send(http_response_bytes(self.status, self.headers, self.body, reason=self.reason,
                                      chunked=self.chunked, add_length=self.add_length,
                                      head_only=req.method == "HEAD"))
        if self.close:
            conn.keep_alive = False


class echo:
    """200 application/json describing the request: method, target, version, headers
    ([[name, value]] in received order), body_length, body_sha256, and body (latin-1
    text, only when at most 64 KiB)."""

    def __call__(self, req, conn):
        doc = {
            "method": req.method, "target": req.target, "version": req.version,
            "headers": [[n, v] for n, v in req.headers],
            "body_length": len(req.body), "body_sha256": sha256_hex(req.body),
            "body": req.body.decode("latin-1") if len(req.body) <= 65536 else None,
        }
        body = json.dumps(doc).encode()
        conn.send(http_response_bytes(200, [("Content-Type", "application/json")], body,
                                      head_only=req.method == "HEAD"))


class echo_body:
    """200 whose body is exactly the request body (with X-Body-Sha256)."""

    def __init__(self, chunked=False):
        self.chunked = chunked

    def __call__(self, req, conn):
        conn.send(http_response_bytes(
            200, [("Content-Type", "application/octet-stream"),
                  ("X-Body-Sha256", sha256_hex(req.body))],
            req.body, chunked=self.chunked, head_only=req.method == "HEAD"))


class big_response:
    """A large deterministic body streamed in slices, chunked or with Content-Length.
    .data and .sha256 describe what was sent."""

    def __init__(self, size, chunked=False, seed=7, slice_size=65536):
        self.data = pattern_bytes(size, seed)
        self.sha256 = sha256_hex(self.data)
        self.size = size
        self.chunked = chunked
        self.slice_size = slice_size

    def __call__(self, req, conn):
        headers = [("Content-Type", "application/octet-stream"), ("X-Body-Sha256", self.sha256)]
        if self.chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        else:
            headers.append(("Content-Length", str(self.size)))
        conn.send(http_response_bytes(200, headers, b"", add_length=False, head_only=True))
        if req.method == "HEAD":
            return
        view = memoryview(self.data)
        for pos in range(0, self.size, self.slice_size):
            piece = view[pos:pos + self.slice_size]
            if self.chunked:
                conn.send(f"{len(piece):x}\r\n".encode() + bytes(piece) + b"\r\n")
            else:
                conn.send(piece)
        if self.chunked:
            conn.send(b"0\r\n\r\n")


class close_delimited:
    """HTTP/1.1 200 without Content-Length or Transfer-Encoding: the body ends when the
    upstream closes the connection."""

    def __init__(self, body=b"close-delimited body", headers=()):
        self.body, self.headers = body, list(headers)

    def __call__(self, req, conn):
        conn.send(http_response_bytes(200, self.headers, b"", add_length=False, head_only=True))
        if req.method != "HEAD":
            conn.send(self.body)
        conn.close()


class delayed:
    """Waits `seconds`, then behaves like `then` (default 200 "delayed")."""

    def __init__(self, seconds, then=None):
        self.seconds = seconds
        self.then = then or respond(200, b"delayed")

    def __call__(self, req, conn):
        if conn.sleep(self.seconds):
            self.then(req, conn)
        else:
            conn.close()


class informational:
    """Sends interim responses first, e.g. [(103, [("Link", "</a.css>; rel=preload")])],
    then behaves like `then`."""

    def __init__(self, interims, then=None, pause=0.05):
        self.interims = interims
        self.then = then or respond(200, b"final")
        self.pause = pause

    def __call__(self, req, conn):
        for status, headers in self.interims:
            conn.send(http_response_bytes(status, headers))
            conn.sleep(self.pause)
        self.then(req, conn)


def head_then_late_body(late, pause=0.002):
    """Answers HEAD as it should (a Content-Length of len(late), no body), then sends `late`
    anyway in a write of its own `pause` later (held back by Nagle until the answer is
    acknowledged); any other request gets its target as its body."""
    def behaviour(req, conn):
        if req.method == "HEAD":
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(late))
            time.sleep(pause)
            conn.send(late)
        else:
            body = req.target.encode()
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return behaviour


def reset():
    """Reads the request, then resets the connection (RST)."""
    return lambda req, conn: conn.reset()


def close_without_answer():
    """Reads the request, then closes the connection cleanly without a byte."""
    return lambda req, conn: conn.close()


class send_raw:
    """Sends these exact bytes, then closes (close=True) or keeps the connection."""

    def __init__(self, data, close=True):
        self.data, self.close = data, close

    def __call__(self, req, conn):
        conn.send(self.data)
        if self.close:
            conn.close()


def garbage(data=b"THIS IS NOT HTTP\r\n\r\n"):
    return send_raw(data, close=True)


class by_path:
    """Chooses a behaviour by path prefix of the request target (longest prefix wins)."""

    def __init__(self, mapping, default=None):
        self.mapping = sorted(mapping.items(), key=lambda kv: -len(kv[0]))
        self.default = default or echo()

    def __call__(self, req, conn):
        for prefix, behaviour in self.mapping:
            if req.target.startswith(prefix):
                return behaviour(req, conn)
        return self.default(req, conn)


# ---------------------------------------------------------------------------------------
# Client side

def build_request(method, target, headers=(), body=None, *, version="HTTP/1.1",
                  host="test.local", chunked=False, content_length=True):
    """Request bytes. Adds Host (unless host is None or a Host is in headers) and, for a
    body, Content-Length (or chunked coding with chunked=True)."""
    headers = list(headers)
    names = {n.lower() for n, _ in headers}
    if host is not None and "host" not in names:
        headers.insert(0, ("Host", host))
    payload = b""
    if body is not None:
        if chunked:
            if "transfer-encoding" not in names:
                headers.append(("Transfer-Encoding", "chunked"))
            payload = chunked_body(body)
        else:
            if content_length and "content-length" not in names:
                headers.append(("Content-Length", str(len(body))))
            payload = body
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return head.encode("latin-1") + b"\r\n" + payload


class Response(_Headers):
    """A response parsed by RawClient."""

    def __init__(self, version, status, reason, headers, body=b"", framing="none",
                 trailers=None, informational=None, raw_head=b""):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.framing = framing            # "length" | "chunked" | "close" | "none"
        self.trailers = trailers or []
        self.informational = informational or []  # interim (1xx) Responses before this one
        self.raw_head = raw_head

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def connection_close(self):
        return "close" in _connection_tokens(self.headers)

    def __repr__(self):
        return f"<Response {self.status} {len(self.body)} bytes {self.framing}>"


class RawClient:
    """A client connection that sends exact bytes and parses responses itself.

        c = RawClient(port)
        c.send(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        r = c.read_response()               # final response; r.informational = 1xx list
        r = c.request("GET", "/x")          # build + send + read
        data = c.wait_closed(3)             # bytes received until EOF/RST (fails if open)
    """

    def __init__(self, port, host=LOOPBACK, timeout=SOCKET_TIMEOUT, source=None):
        """source: the local address to connect from (another loopback address, 127.0.0.2,
        is another peer)."""
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _Reader(self.sock)

    def send(self, data):
        self.sock.sendall(data)

    def send_slowly(self, data, pieces, interval):
        """Sends data cut into `pieces` parts, `interval` seconds apart."""
        step = max(1, -(-len(data) // pieces))
        for pos in range(0, len(data), step):
            self.sock.sendall(data[pos:pos + step])
            time.sleep(interval)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def request(self, method, target, headers=(), body=None, **kw):
        """Sends one request (see build_request) and reads its final response."""
        timeout = kw.pop("timeout", None)
        self.send(build_request(method, target, headers, body, **kw))
        return self.read_response(method=method, timeout=timeout)

    def read_response(self, method="GET", timeout=None, informational="collect"):
        """Reads one response. Interim 1xx responses are collected into .informational of
        the final one (informational="collect") or returned as they come ("return").
        method: the request's method (HEAD responses have no body).
        Raises ConnectionClosed when the connection ends before a status line and
        IncompleteResponse when it ends inside the response."""
        old = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            interims = []
            while True:
                try:
                    line = self.reader.read_line()
                except ConnectionResetError:
                    if not self.reader.buf:
                        raise ConnectionClosed("connection reset before a response") from None
                    raise
                if line == b"":
                    raise ConnectionClosed("connection closed before a response")
                raw = bytearray(line)
                m = re.match(rb"^(HTTP/\d\.\d) (\d{3})(?: (.*))?\r?\n$", line)
                if not m:
                    raise AssertionError(f"bad status line {line[:200]!r}")
                version = m.group(1).decode()
                status = int(m.group(2))
                reason = (m.group(3) or b"").decode("latin-1")
                headers = self.reader.read_headers()
                resp = Response(version, status, reason, headers, raw_head=bytes(raw))
                if 100 <= status < 200 and status != 101:
                    if informational == "return":
                        return resp
                    interims.append(resp)
                    continue
                resp.informational = interims
                self._read_body(resp, method)
                return resp
        finally:
            self.sock.settimeout(old)

    def _read_body(self, resp, method):
        if method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200:
            resp.framing = "none"
            return
        te = resp.joined("transfer-encoding")
        cl = resp.header_values("content-length")
        try:
            if te is not None:
                if te.split(",")[-1].strip().lower() == "chunked":
                    resp.framing = "chunked"
                    resp.body, resp.trailers = self.reader.read_chunked()
                else:
                    resp.framing = "close"
                    resp.body = self.reader.read_until_close()
            elif cl:
                resp.framing = "length"
                resp.body = self.reader.read_exact(int(cl[0]))
            else:
                resp.framing = "close"
                resp.body = self.reader.read_until_close()
        except IncompleteResponse as e:
            e.partial_response = resp
            raise
        except ConnectionResetError as e:
            raise IncompleteResponse(f"connection reset inside the body of {resp}") from e

    def read_available(self, wait=0.2):
        """Whatever arrives within `wait` seconds (b"" if nothing; raises nothing)."""
        data = bytes(self.reader.buf)
        self.reader.buf.clear()
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return data
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return data
            if not chunk:
                self.reader.eof = True
                return data
            data += chunk

    def is_closed(self, timeout=3.0):
        """True when the peer closed/reset the connection within timeout (discarding any
        bytes that arrive first), False when it is still open at the deadline."""
        try:
            self.wait_closed(timeout)
            return True
        except WaitTimeout:
            return False

    def wait_closed(self, timeout=3.0):
        """Waits for EOF or RST; returns the bytes that arrived before it. Raises
        WaitTimeout when the connection is still open at the deadline."""
        data = bytearray(self.reader.buf)
        self.reader.buf.clear()
        if self.reader.eof:
            return bytes(data)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"connection still open after {timeout}s "
                                  f"(received {bytes(data[:200])!r})")
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
                self.reader.eof = True
                return bytes(data)
            if not chunk:
                self.reader.eof = True
                return bytes(data)
            data += chunk

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def simple_request(port, method="GET", path="/", headers=None, body=None, timeout=SOCKET_TIMEOUT):
    """One request through http.client.HTTPConnection; returns (status, [(name, value)], body)."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------
# Redis: a throwaway redis-server and a minimal RESP client

class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def _resp_encode(args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode("utf-8")
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            data = str(arg).encode("ascii")
        else:
            raise TypeError(f"cannot send {type(arg).__name__} to Redis")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _resp_read(reader):
    """One RESP2 reply. Simple and bulk strings come back as str, integers as int, arrays
    as lists, nil as None, and an error reply as a RedisError *value* (raised by the
    caller when it is the whole reply)."""
    line = reader.read_line()
    if line == b"":
        raise ConnectionClosed("redis closed the connection before a reply")
    kind, rest = line[:1], line[1:].rstrip(b"\r\n")
    if kind == b"+":
        return rest.decode("utf-8", "replace")
    if kind == b"-":
        return RedisError(rest.decode("utf-8", "replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        return reader.read_exact(n + 2)[:-2].decode("utf-8", "replace")
    if kind == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_resp_read(reader) for _ in range(n)]
    raise ValueError(f"bad RESP reply line {line[:100]!r}")


class RedisClient:
    """One RESP connection: client.command("GET", "k") -> reply (raises RedisError on an
    error reply)."""

    def __init__(self, port, host=LOOPBACK, timeout=SOCKET_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _Reader(self.sock)

    def command(self, *args):
        self.sock.sendall(_resp_encode(args))
        reply = _resp_read(self.reader)
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def redis_binary():
    """The redis-server to run: $REDIS_SERVER or redis-server on PATH."""
    path = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not path:
        raise AssertionError("redis-server not found (install redis-server, or set REDIS_SERVER)")
    return path


class RedisServer:
    """A throwaway redis-server on a free loopback port, no persistence.

        r = RedisServer().start()        # waits until it answers PING
        r.address                        "127.0.0.1:PORT" (for store.redis.address)
        r.command("SCRIPT", "FLUSH")     one command on a fresh connection -> reply
        r.pause(2000)                    CLIENT PAUSE 2000 (every client's commands wait)
        r.stop(); r.restart()            stop it / start it again on the same port
        r.cleanup()                      stop and remove its directory
    """

    def __init__(self, port=None, extra_args=()):
        self.binary = redis_binary()
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.workdir = tempfile.mkdtemp(prefix="sluice-redis-")
        self.log_path = os.path.join(self.workdir, "redis.log")
        self.proc = None
        self._log = None

    @property
    def address(self):
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout=READY_TIMEOUT):
        if self.running():
            raise AssertionError("redis-server is already running")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
             "--appendonly", "no", "--dir", self.workdir, "--daemonize", "no",
             "--logfile", "", *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode} on port "
                                     f"{self.port}:\n{self.log_text()}")
            try:
                if self.command("PING") == "PONG":
                    return self
            except (OSError, RedisError, ConnectionClosed, IncompleteResponse):
                pass  # not listening yet, or still loading
            if time.monotonic() >= deadline:
                self.kill()
                raise WaitTimeout(f"redis-server did not answer on port {self.port} within "
                                  f"{timeout}s:\n{self.log_text()}")
            time.sleep(0.02)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def command(self, *args, timeout=SOCKET_TIMEOUT):
        """Sends one command on a new connection and returns its reply."""
        with RedisClient(self.port, timeout=timeout) as client:
            return client.command(*args)

    def client(self, timeout=SOCKET_TIMEOUT):
        return RedisClient(self.port, timeout=timeout)

    def pause(self, milliseconds, mode="ALL"):
        """CLIENT PAUSE: Redis holds every other client's commands for that long."""
        return self.command("CLIENT", "PAUSE", int(milliseconds), mode)

    def unpause(self):
        return self.command("CLIENT", "UNPAUSE")

    def keys(self, pattern="*"):
        return sorted(self.command("KEYS", pattern))

    def stop(self, timeout=10.0):
        """SIGTERM (no persistence, so it exits at once) and wait; SIGKILL when slow."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._close_log()

    def restart(self, timeout=READY_TIMEOUT):
        """Stops it (when running) and starts a fresh, empty one on the same port."""
        self.stop()
        deadline = time.monotonic() + timeout
        while _port_accepts(LOOPBACK, self.port):
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"port {self.port} still accepts after redis-server stopped")
            time.sleep(0.02)
        return self.start(timeout)

    def _close_log(self):
        if self._log is not None and not self._log.closed:
            self._log.close()

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        if not os.environ.get("SLUICE_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)


def decide_calls(redis):
    """Decide calls a RedisServer has run (FCALL or EVALSHA), from INFO commandstats."""
    stats = redis.command("INFO", "commandstats")
    if isinstance(stats, bytes):
        stats = stats.decode()
    return sum(int(c) for c in re.findall(r"cmdstat_(?:fcall|evalsha):calls=(\d+)", stats))


def window_units(redis, key):
    """The units a sliding window's set `key` holds: a request of several units is one member
    where the limit's costs may exceed 1, and the member "w" holds minus the units beyond one
    of those (lua/sliding_window.lua)."""
    beyond = redis.command("ZSCORE", key, "w")
    if beyond is None:
        return redis.command("ZCARD", key)
    return redis.command("ZCARD", key) - 1 - int(float(beyond))


def redis_store(redis, *, timeout="2s", on_error="allow", key_prefix="sluice"):
    """The `store` section for a RedisServer (merge it with extra={"store": ...}).

    The deadline defaults to 2 s, not sluice's 25 ms: on a loaded CI machine a working
    Redis can miss 25 ms, and a test that counts decisions would see a store error. Tests
    of the deadline itself pass a short one."""
    address = redis.address if isinstance(redis, RedisServer) else str(redis)
    return {"type": "redis",
            "redis": {"address": address, "timeout": timeout, "key_prefix": key_prefix},
            "on_error": on_error}


# ---------------------------------------------------------------------------------------
# Rate limits: config pieces and the response headers

def token_bucket(name, rate, per, burst, key=None, shadow=None):
    """A token_bucket limit dict (key: list of key parts, default left to sluice)."""
    limit = {"name": name, "algorithm": "token_bucket", "rate": rate, "per": per, "burst": burst}
    if key is not None:
        limit["key"] = list(key)
    if shadow is not None:
        limit["shadow"] = shadow
    return limit


def sliding_window(name, limit, window, key=None, shadow=None):
    """A sliding_window limit dict."""
    out = {"name": name, "algorithm": "sliding_window", "limit": limit, "window": window}
    if key is not None:
        out["key"] = list(key)
    if shadow is not None:
        out["shadow"] = shadow
    return out


def leaky_bucket(name, rate, per, burst, key=None, *, delay=None, nodelay=None, max_wait=None,
                 shadow=None):
    """A leaky_bucket limit dict (shaping: requests leave at rate/per, the bucket holds
    `burst`); delay, nodelay and max_wait are left out unless given."""
    limit = {"name": name, "algorithm": "leaky_bucket", "rate": rate, "per": per, "burst": burst}
    if delay is not None:
        limit["delay"] = delay
    if nodelay is not None:
        limit["nodelay"] = nodelay
    if max_wait is not None:
        limit["max_wait"] = max_wait
    if key is not None:
        limit["key"] = list(key)
    if shadow is not None:
        limit["shadow"] = shadow
    return limit


def limited_route(name, limits, *, upstream="app", path_prefix=None, path=None,
                  on_error=None):
    """A route dict with limits; matches path_prefix "/NAME" unless told otherwise."""
    match = {"path": path} if path else {"path_prefix": path_prefix or f"/{name}"}
    route = {"name": name, "match": match, "upstream": upstream}
    if on_error is not None:
        route["on_error"] = on_error
    if limits is not None:
        route["limits"] = list(limits)
    return route


_POLICY_RE = re.compile(r'^"(?P<name>[^"]*)";q=(?P<q>\d+);w=(?P<w>\d+)$')
_RATELIMIT_RE = re.compile(r'^"(?P<name>[^"]*)";r=(?P<r>\d+);t=(?P<t>\d+)$')


def ratelimit_headers(resp):
    """The rate-limit headers of a response, parsed:
        {"policy": (name, quota, window) | None, "state": (name, remaining, reset) | None,
         "limit": int | None, "remaining": int | None, "reset": int | None,
         "names": set of the rate-limit header names present (lower case)}
    A header that is present but does not have the exact expected syntax raises
    AssertionError."""
    out = {"policy": None, "state": None, "limit": None, "remaining": None, "reset": None}
    names = {"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining",
             "x-ratelimit-reset"}
    present = set()
    for name, value in resp.headers:
        lname = name.lower()
        if lname not in names:
            continue
        if lname in present:
            raise AssertionError(f"{name} appears more than once: {resp.headers}")
        present.add(lname)
        if lname == "ratelimit-policy":
            m = _POLICY_RE.match(value)
            if not m:
                raise AssertionError(f"bad RateLimit-Policy {value!r}")
            out["policy"] = (m["name"], int(m["q"]), int(m["w"]))
        elif lname == "ratelimit":
            m = _RATELIMIT_RE.match(value)
            if not m:
                raise AssertionError(f"bad RateLimit {value!r}")
            out["state"] = (m["name"], int(m["r"]), int(m["t"]))
        else:
            if not re.fullmatch(r"\d+", value):
                raise AssertionError(f"{name}: {value!r} is not a non-negative integer")
            out[lname[len("x-ratelimit-"):]] = int(value)
    out["names"] = present
    return out


def retry_after(resp):
    """Retry-After as an int of seconds (AssertionError unless it is one integer)."""
    values = resp.header_values("retry-after")
    if len(values) != 1 or not re.fullmatch(r"\d+", values[0]):
        raise AssertionError(f"Retry-After should be one integer, got {values!r}")
    return int(values[0])


# ---------------------------------------------------------------------------------------
# unittest base class

class SluiceTestCase(unittest.TestCase):
    """Helpers that start things and register their cleanup. On a failing test the
    sluice output is printed to stderr (set SLUICE_TEST_LOGS=1 to always print it)."""

    def start_upstream(self, behaviour=None, name="upstream"):
        up = Upstream(behaviour, name=name).start()
        self.addCleanup(up.stop)
        return up

    def start_sluice(self, config, wait=True, port=None):
        s = Sluice(config, port=port)
        self.addCleanup(self._finish_sluice, s)
        s.start(wait=wait)
        return s

    def start_instances(self, count, upstream, routes, store, extra=None):
        """`count` sluice instances (2 workers each) in front of one upstream, sharing `store`,
        each with an admin port (`extra`: more top-level config): sets self.up,
        self.instances and self.admin_ports."""
        self.up = self.start_upstream(upstream)
        self.instances, self.admin_ports = [], []
        for _ in range(count):
            port, admin = free_port(), free_port()
            more = {"store": store, "admin": {"listen": f"{LOOPBACK}:{admin}"}, **(extra or {})}
            s = self.start_sluice(proxy_config(port, {"app": self.up.address}, routes, extra=more))
            wait_until(lambda: _port_accepts(LOOPBACK, admin), 10.0, message=f"admin port {admin}")
            if store["type"] == "redis":
                s.wait_store_connected(2)
            self.instances.append(s)
            self.admin_ports.append(admin)

    def client(self, port, timeout=SOCKET_TIMEOUT):
        c = RawClient(port, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def start_redis(self, extra_args=()):
        """A fresh redis-server on a free port, stopped (and its log shown on failure)
        when the test ends."""
        r = RedisServer(extra_args=extra_args)
        self.addCleanup(self._finish_redis, r)
        return r.start()

    def _finish_redis(self, r):
        r.stop()
        if os.environ.get("SLUICE_TEST_LOGS") or self._failed():
            sys.stderr.write(f"\n===== {self.id()}: redis-server log (port {r.port}) =====\n")
            sys.stderr.write(r.log_text()[-4000:])
            sys.stderr.write("===== end of redis-server log =====\n")
            sys.stderr.flush()
        r.cleanup()

    def _finish_sluice(self, s):
        s.cleanup()
        if os.environ.get("SLUICE_SANITIZER"):
            # make asan: a sanitizer report in sluice's output fails the test (GCC's UBSan
            # writes to stderr whatever UBSAN_OPTIONS says; the process may have gone on).
            found = re.search(r"runtime error:|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer",
                              s.log_text())
            if found:
                sys.stderr.write(s.log_text()[-8000:])
                self.fail(f"sanitizer report in sluice's output: {found.group(0)}")
        if os.environ.get("SLUICE_TEST_LOGS") or self._failed():
            sys.stderr.write(f"\n===== {self.id()}: sluice output ({s.workdir}) =====\n")
            sys.stderr.write(s.log_text())
            sys.stderr.write("===== end of sluice output =====\n")
            sys.stderr.flush()
        s.remove_workdir()

    def _failed(self):
        outcome = getattr(self, "_outcome", None)
        result = getattr(outcome, "result", None)
        if result is None:
            return True
        for test, _ in list(getattr(result, "errors", [])) + list(getattr(result, "failures", [])):
            if test is self or getattr(test, "test_case", None) is self:
                return True
        return False

    # assertions ---------------------------------------------------------------------
    def assert_problem(self, resp, status):
        """A proxy-generated error: that status, application/problem+json, a JSON object
        body (whose "status", when present, is the same code)."""
        self.assertEqual(resp.status, status, f"expected {status}, got {resp} {resp.body[:300]!r}")
        ctype = (resp.header("content-type") or "").split(";")[0].strip().lower()
        self.assertEqual(ctype, "application/problem+json", f"headers: {resp.headers}")
        doc = resp.json()
        self.assertIsInstance(doc, dict)
        if "status" in doc:
            self.assertEqual(doc["status"], status)
        return doc

    def assert_nothing_reached(self, upstream, before=(0, 0, 0, 0), settle=0.2):
        """After `settle` seconds, the upstream saw no new request, connection or byte
        compared with `before` (an Upstream.snapshot())."""
        time.sleep(settle)
        now = upstream.snapshot()
        self.assertEqual(now[0], before[0], "a request reached the upstream")
        self.assertEqual(now[1], before[1], "the upstream was connected to")
        self.assertEqual(now[2], before[2], "bytes reached the upstream")
