"""Headless Chromium driven over the Chrome DevTools Protocol (standard library only).

Pieces:
  chromium_binary()      the browser to run: $CHROMIUM_BIN, /usr/bin/chromium or one on
                         PATH; fails (never skips) with a clear message when there is none
  Chromium               starts headless Chromium in its own process group with a throwaway
                         profile, reads the DevTools address from its stderr, kills the whole
                         group on stop()
  WebSocket              a minimal RFC 6455 client: HTTP Upgrade handshake, masked client
                         frames, text / continuation / ping / pong / close frames
  CDP                    one browser-level DevTools connection: call(method, params,
                         session_id) -> result, events kept in order, wait_event(...)
  Page                   one tab attached with Target.attachToTarget(flatten): navigate,
                         evaluate (JavaScript, result by value), screenshot

    with Chromium(tmpdir) as browser:
        page = browser.cdp().new_page()
        page.navigate("http://127.0.0.1:9901/stats")
        rows = page.evaluate("document.querySelectorAll('tr').length")

Every socket has a timeout and every wait has a deadline: a browser that hangs makes the
test fail, never hang.
"""

import base64
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.parse

__all__ = ["chromium_binary", "Chromium", "WebSocket", "WebSocketClosed", "CDP", "CDPError",
           "Page"]

START_TIMEOUT = 30.0   # the browser must print its DevTools address within this
CALL_TIMEOUT = 20.0    # one DevTools command must be answered within this

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def chromium_binary():
    """Path of the browser; raises AssertionError (a test failure, not a skip) when missing."""
    candidates = []
    if os.environ.get("CHROMIUM_BIN"):
        candidates.append(os.environ["CHROMIUM_BIN"])
    candidates.append("/usr/bin/chromium")
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise AssertionError(
        "Chromium is not installed (looked for $CHROMIUM_BIN, /usr/bin/chromium and chromium, "
        "chromium-browser, google-chrome on PATH). The /stats page test needs a real browser: "
        "run scripts/deps.sh (Debian package `chromium`) or set CHROMIUM_BIN.")


# ---------------------------------------------------------------------------------------
# WebSocket (RFC 6455), client side

class WebSocketClosed(AssertionError):
    """The peer closed the WebSocket (or the TCP connection under it)."""


class WebSocket:
    OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

    def __init__(self, url, timeout=10.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "ws":
            raise ValueError(f"only ws:// URLs are supported, not {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.timeout = timeout
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._closed = False
        self._handshake(parts.netloc)

    # opening handshake -------------------------------------------------------------
    def _handshake(self, netloc):
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {self.resource} HTTP/1.1\r\n"
                   f"Host: {netloc}\r\n"
                   "Upgrade: websocket\r\n"
                   "Connection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\n"
                   "Sec-WebSocket-Version: 13\r\n"
                   "\r\n")
        self.sock.sendall(request.encode("ascii"))
        while b"\r\n\r\n" not in self._buf:
            self._fill()
        end = self._buf.index(b"\r\n\r\n") + 4
        head = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[:end]
        lines = head.split("\r\n")
        if not re.match(r"^HTTP/1\.1 101\b", lines[0]):
            raise AssertionError(f"WebSocket handshake refused: {head!r}")
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        expected = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != expected:
            raise AssertionError(f"bad Sec-WebSocket-Accept in {head!r} (expected {expected})")
        if headers.get("upgrade", "").lower() != "websocket":
            raise AssertionError(f"handshake answer without Upgrade: websocket: {head!r}")

    # frames out --------------------------------------------------------------------
    def _send_frame(self, opcode, payload):
        """One final frame; client frames are always masked (RFC 6455 5.3)."""
        header = bytearray([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack("!H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack("!Q", n)
        mask = os.urandom(4)
        header += mask
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + masked)

    def send_text(self, text):
        if self._closed:
            raise WebSocketClosed("send on a closed WebSocket")
        self._send_frame(self.OP_TEXT, text.encode("utf-8"))

    # frames in ---------------------------------------------------------------------
    def _fill(self, deadline=None):
        timeout = self.timeout if deadline is None else max(0.0, deadline - time.monotonic())
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            raise TimeoutError("nothing received on the WebSocket in time")
        try:
            data = self.sock.recv(1 << 20)
        except (ConnectionResetError, ConnectionAbortedError) as e:
            self._closed = True
            raise WebSocketClosed(f"connection reset: {e}") from None
        if not data:
            self._closed = True
            raise WebSocketClosed("connection closed by the peer")
        self._buf += data

    def _frame_size(self):
        """(header length, payload length) of the frame at the start of the buffer, or
        None while its header is incomplete."""
        buf = self._buf
        if len(buf) < 2:
            return None
        n, header = buf[1] & 0x7F, 2
        if n == 126:
            header = 4
            if len(buf) < header:
                return None
            n = struct.unpack("!H", bytes(buf[2:4]))[0]
        elif n == 127:
            header = 10
            if len(buf) < header:
                return None
            n = struct.unpack("!Q", bytes(buf[2:10]))[0]
        if buf[1] & 0x80:
            header += 4
        return header, n

    def _read_frame(self, deadline):
        # Nothing is consumed until the whole frame is buffered, so a timeout never leaves
        # half a frame behind.
        while True:
            size = self._frame_size()
            if size and len(self._buf) >= size[0] + size[1]:
                break
            self._fill(deadline)
        header, n = size
        frame = bytes(self._buf[:header + n])
        del self._buf[:header + n]
        fin, opcode = bool(frame[0] & 0x80), frame[0] & 0x0F
        payload = frame[header:]
        if frame[1] & 0x80:
            mask = frame[header - 4:header]
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return fin, opcode, payload

    def recv_text(self, timeout=None):
        """The next complete text (or binary) message, reassembled from fragments.
        Answers pings; raises WebSocketClosed on a close frame, TimeoutError at the deadline."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        parts = []
        while True:
            fin, opcode, payload = self._read_frame(deadline)
            if opcode == self.OP_PING:
                self._send_frame(self.OP_PONG, payload)
                continue
            if opcode == self.OP_PONG:
                continue
            if opcode == self.OP_CLOSE:
                self._closed = True
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                try:
                    self._send_frame(self.OP_CLOSE, payload[:2])
                except OSError:
                    pass
                raise WebSocketClosed(f"close frame (code {code}, reason {payload[2:]!r})")
            if opcode in (self.OP_TEXT, self.OP_BINARY, self.OP_CONT):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode("utf-8")
                continue
            raise AssertionError(f"unexpected WebSocket opcode {opcode:#x}")

    def close(self):
        if not self._closed:
            self._closed = True
            try:
                self._send_frame(self.OP_CLOSE, struct.pack("!H", 1000))
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# DevTools protocol

class CDPError(AssertionError):
    """A DevTools command answered with an error."""


class CDP:
    """One WebSocket to the browser target. Commands for a page carry its sessionId
    (flattened sessions), so one connection drives everything."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self._next_id = 0
        self.events = []   # every event received so far: {"method", "params", "sessionId"?}

    def call(self, method, params=None, session_id=None, timeout=CALL_TIMEOUT):
        self._next_id += 1
        msg_id = self._next_id
        message = {"id": msg_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        self.ws.send_text(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to {method} within {timeout}s")
            reply = self._receive(left)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise CDPError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})

    def _receive(self, timeout):
        try:
            message = json.loads(self.ws.recv_text(timeout))
        except TimeoutError:
            return {}
        if "method" in message and "id" not in message:
            self.events.append(message)
        return message

    def pump(self, seconds):
        """Receives (and records) events for `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._receive(left)

    def wait_event(self, method, timeout=CALL_TIMEOUT, session_id=None, since=0):
        """The first event named `method` (for that session, from index `since` of
        .events), waiting up to `timeout` seconds for it."""
        deadline = time.monotonic() + timeout
        index = since
        while True:
            while index < len(self.events):
                event = self.events[index]
                index += 1
                if event.get("method") == method and (
                        session_id is None or event.get("sessionId") == session_id):
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} event within {timeout}s")
            self._receive(left)

    def new_page(self):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        return Page(self, target, session["sessionId"])

    def close(self):
        self.ws.close()


class Page:
    """One tab, driven through its flattened session."""

    def __init__(self, cdp, target_id, session_id):
        self.cdp = cdp
        self.target_id = target_id
        self.session_id = session_id
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method, params=None, timeout=CALL_TIMEOUT):
        return self.cdp.call(method, params, session_id=self.session_id, timeout=timeout)

    def events(self, method):
        return [e["params"] for e in self.cdp.events
                if e.get("method") == method and e.get("sessionId") == self.session_id]

    def navigate(self, url, timeout=CALL_TIMEOUT):
        """Loads url and waits for its load event; fails on a navigation error."""
        since = len(self.cdp.events)
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise AssertionError(f"navigation to {url} failed: {result['errorText']}")
        self.cdp.wait_event("Page.loadEventFired", timeout, self.session_id, since)
        return result

    def evaluate(self, expression, await_promise=False, timeout=CALL_TIMEOUT):
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": await_promise,
        }, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise AssertionError(f"JavaScript threw: {text}\nexpression: {expression}")
        return result["result"].get("value")

    def screenshot(self, path):
        """Saves a PNG of the viewport to path; returns the bytes."""
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data


# ---------------------------------------------------------------------------------------
# The browser process

_DEVTOOLS_RE = re.compile(r"DevTools listening on (ws://\S+)")


class Chromium:
    """Headless Chromium with its own profile dir, in its own process group.

    stop() sends SIGTERM to the whole group, then SIGKILL to whatever is left, so no
    renderer or GPU helper outlives the test."""

    def __init__(self, workdir, window_size=(1280, 720)):
        self.binary = chromium_binary()
        self.workdir = workdir
        self.profile = os.path.join(workdir, "chromium-profile")
        self.stderr_path = os.path.join(workdir, "chromium.stderr")
        self.window_size = window_size
        self.proc = None
        self.ws_url = None
        self._cdp = None

    def start(self, timeout=START_TIMEOUT):
        os.makedirs(self.profile, exist_ok=True)
        args = [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--no-default-browser-check",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
                "--mute-audio", "--hide-scrollbars", "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
                f"--window-size={self.window_size[0]},{self.window_size[1]}",
                f"--user-data-dir={self.profile}", "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0", "about:blank"]
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._stderr, cwd=self.workdir,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            m = _DEVTOOLS_RE.search(self.stderr_text())
            if m:
                self.ws_url = m.group(1)
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"chromium exited with {self.proc.returncode} before "
                                     f"DevTools listened:\n{self.stderr_text()[-3000:]}")
            if time.monotonic() >= deadline:
                self.stop()
                raise AssertionError(f"chromium printed no DevTools address within {timeout}s:\n"
                                     f"{self.stderr_text()[-3000:]}")
            time.sleep(0.05)

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def cdp(self):
        if self._cdp is None:
            self._cdp = CDP(self.ws_url)
        return self._cdp

    def stop(self):
        if self._cdp is not None:
            try:
                self._cdp.call("Browser.close", timeout=3)
            except Exception:  # the browser may already be gone; the group kill follows
                pass
            self._cdp.close()
            self._cdp = None
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
            if self.proc.poll() is None:
                self._signal_group(pgid, signal.SIGTERM)
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            # Helpers (renderer, zygote, GPU) may outlive the main process: kill the group.
            self._signal_group(pgid, signal.SIGKILL)
            if self.proc.poll() is None:
                self.proc.wait(5)
        f = getattr(self, "_stderr", None)
        if f is not None and not f.closed:
            f.close()

    @staticmethod
    def _signal_group(pgid, sig):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
