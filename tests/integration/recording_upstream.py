"""An upstream for framing tests: it keeps every byte each connection received, parses
requests strictly (what sluice sends must be unambiguous), and answers each request with
a body that names it, so a response handed to the wrong client is seen at once.

    up = RecordingUpstream().start()
    up.answers["/path"] = [b"HTTP/1.1 200 OK\\r\\n...", 0.05, b"more bytes"]  # raw pieces, pauses
    up.requests      [(conn_id, raw_bytes_of_the_request)] in arrival order
    up.raw(conn_id)  every byte received on that connection
    up.errors        what it could not parse strictly
"""

import re
import select
import socket
import threading
import time

LOOPBACK = "127.0.0.1"
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.1\r\n")
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+): ?([^\r\n]*)\r\n")


class StrictParseError(Exception):
    pass


def answer_for(conn_id, index, method, target, body):
    """The default answer: a body naming the request."""
    text = f"{conn_id}.{index} {method} {target} len={len(body)}".encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(text)).encode() + b"\r\n\r\n"
            + (b"" if method == "HEAD" else text))


class _Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.raw = bytearray()

    def need(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)

    def line(self, deadline, limit=1 << 20):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit:
                raise StrictParseError("line too long")
            self._fill(deadline)
        i = self.buf.index(b"\r\n") + 2
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def take(self, n, deadline):
        self.need(n, deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        ready, _, _ = select.select([self.sock], [], [], min(left, 0.2))
        if not ready:
            return
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data
        self.raw += data


class RecordingUpstream:
    def __init__(self):
        self.answers = {}    # target -> list of bytes (sent) and floats (pauses)
        self.requests = []   # (conn_id, raw request bytes)
        self.parsed = []     # (conn_id, method, target, fields, body)
        self.errors = []
        self.connections = 0
        self._raw = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._socks = set()
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
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self._stopping.set()
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def reset_records(self):
        with self._lock:
            self.requests.clear()
            self.parsed.clear()
            self.errors.clear()

    def raw(self, conn_id):
        with self._lock:
            return bytes(self._raw.get(conn_id, b""))

    def total_bytes(self):
        with self._lock:
            return sum(len(r) for r in self._raw.values())

    def wait_requests(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= n:
                    return list(self.requests)
            time.sleep(0.01)
        with self._lock:
            raise AssertionError(f"{n} request(s) expected upstream, got {self.requests!r} errors {self.errors!r}")

    def _accept(self):
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
                self._socks.add(sock)
            threading.Thread(target=self._serve, args=(sock, conn_id), daemon=True).start()

    def _serve(self, sock, conn_id):
        conn = _Conn(sock)
        with self._lock:
            self._raw[conn_id] = conn.raw
        index = 0
        try:
            while not self._stopping.is_set():
                try:
                    start = len(conn.raw) - len(conn.buf)
                    method, target, fields, body, close = self._read(conn)
                except EOFError:
                    return
                end = len(conn.raw) - len(conn.buf)
                with self._lock:
                    self.requests.append((conn_id, bytes(conn.raw[start:end])))
                    self.parsed.append((conn_id, method, target, fields, body))
                pieces = self.answers.get(target)
                if pieces is None:
                    sock.sendall(answer_for(conn_id, index, method, target, body))
                else:
                    for piece in pieces:
                        if isinstance(piece, (int, float)):
                            time.sleep(piece)
                        else:
                            sock.sendall(piece)
                index += 1
                if close:
                    return
        except (StrictParseError, TimeoutError) as e:
            with self._lock:
                self.errors.append((conn_id, repr(e)))
            try:
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
        except OSError:
            pass
        finally:
            with self._lock:
                self._socks.discard(sock)
            sock.close()

    def _read(self, conn):
        deadline = time.monotonic() + 30
        line = conn.line(deadline)
        m = _REQUEST_LINE.fullmatch(line)
        if not m:
            raise StrictParseError(f"request line {line!r}")
        method, target = m.group(1).decode(), m.group(2).decode("latin-1")
        fields = []
        while True:
            fl = conn.line(deadline)
            if fl == b"\r\n":
                break
            fm = _FIELD.fullmatch(fl)
            if not fm:
                raise StrictParseError(f"field line {fl!r}")
            fields.append((fm.group(1).decode().lower(), fm.group(2).decode("latin-1")))
        names = [n for n, _ in fields]
        if names.count("host") != 1:
            raise StrictParseError(f"{names.count('host')} Host fields")
        te = [v for n, v in fields if n == "transfer-encoding"]
        cl = [v for n, v in fields if n == "content-length"]
        if te and cl:
            raise StrictParseError("Content-Length and Transfer-Encoding")
        if len(te) > 1 or len(cl) > 1:
            raise StrictParseError("repeated framing field")
        body = b""
        if te:
            if te[0] != "chunked":
                raise StrictParseError(f"Transfer-Encoding {te[0]!r}")
            while True:
                size_line = conn.line(deadline)
                if not re.fullmatch(rb"[0-9a-f]+\r\n", size_line):
                    raise StrictParseError(f"chunk size {size_line!r}")
                size = int(size_line[:-2], 16)
                if size == 0:
                    if conn.take(2, deadline) != b"\r\n":
                        raise StrictParseError("trailer section from the proxy")
                    break
                body += conn.take(size, deadline)
                if conn.take(2, deadline) != b"\r\n":
                    raise StrictParseError("chunk not followed by CRLF")
        elif cl:
            if not re.fullmatch(r"[0-9]+", cl[0]):
                raise StrictParseError(f"Content-Length {cl[0]!r}")
            body = conn.take(int(cl[0]), deadline)
        close = any(n == "connection" and "close" in v.lower() for n, v in fields)
        return method, target, fields, body, close
