#!/usr/bin/env python3
"""A small demo backend for `make run`: answers every method and path with a JSON
description of what reached it (method, path, query, headers, body size), so you can see
what sluice forwarded, including X-Forwarded-For and Via. /chat is a WebSocket chat room
(every text message goes to everyone connected); opened in a browser without the upgrade it
serves a small page that joins the room.

    python3 scripts/demo_backend.py --listen 127.0.0.1:8081

Standard library only. Threaded, HTTP/1.1 keep-alive. Stops cleanly on SIGTERM / SIGINT.
"""

import argparse
import base64
import hashlib
import json
import struct
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MAX_BODY = 64 << 20  # bodies are read and counted, never kept
MAX_MESSAGE = 1 << 20  # a chat message above this closes the connection (1009)
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

CHAT_PAGE = b"""<!doctype html>
<meta charset="utf-8"><title>sluice demo chat</title>
<style>body{font:15px system-ui,sans-serif;margin:2em;max-width:40em}#log{border:1px solid #ccc;
height:20em;overflow:auto;padding:.5em;white-space:pre-wrap}input{width:80%}</style>
<h1>Chat through sluice</h1>
<div id="log"></div>
<form id="f"><input id="m" autocomplete="off" placeholder="say something"> <button>Send</button></form>
<script>
const log = document.getElementById("log");
const show = t => { log.textContent += t + "\\n"; log.scrollTop = log.scrollHeight; };
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/chat");
ws.onopen = () => show("* connected through " + location.host);
ws.onmessage = e => show(e.data);
ws.onclose = e => show("* closed (" + e.code + ")");
document.getElementById("f").onsubmit = e => {
  e.preventDefault(); const m = document.getElementById("m");
  if (m.value) ws.send(m.value); m.value = "";
};
</script>
"""


class ChatRoom:
    """Everyone connected to /chat; a text message goes to all of them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.members = {}  # handler -> its write lock
        self.joined = 0

    def join(self, member):
        with self.lock:
            self.joined += 1
            self.members[member] = threading.Lock()
            return self.joined, len(self.members)

    def leave(self, member):
        with self.lock:
            self.members.pop(member, None)
            return len(self.members)

    def send(self, member, opcode, payload):
        with self.lock:
            write_lock = self.members.get(member)
        if write_lock is None:
            return
        with write_lock:
            try:
                member.wfile.write(ws_frame(opcode, payload))
                member.wfile.flush()
            except OSError:
                pass

    def broadcast(self, text):
        with self.lock:
            members = list(self.members)
        for m in members:
            self.send(m, 0x1, text.encode())


ROOM = ChatRoom()


def ws_frame(opcode, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


class DemoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so sluice can reuse its connections
    server_version = "sluice-demo-backend"
    timeout = 30  # idle keep-alive connections end after this
    # A response goes out in one write (the head and body are buffered until the handler
    # returns, or until it flushes), and with TCP_NODELAY: written in two pieces without it,
    # the second waits on the proxy's delayed ACK, and one request in three would show
    # ~40 ms that are neither sluice's nor the backend's.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def handle_any(self):
        if urlsplit(self.path).path == "/chat" and self.command in ("GET", "HEAD"):
            return self.chat()
        body_bytes = self.consume_body()
        if body_bytes is None:
            return
        headers = {}
        for name, value in self.headers.items():
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        parts = urlsplit(self.path)
        doc = {
            "backend": "demo",
            "method": self.command,
            "path": parts.path,
            "query": parts.query,
            "headers": headers,
            "body_bytes": body_bytes,
        }
        payload = (json.dumps(doc, indent=2) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def consume_body(self):
        """Reads the request body (Content-Length or chunked); returns its size, or None
        after answering 400 for framing it does not understand."""
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            total = 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.send_error(400, "bad chunk size")
                    return None
                if size == 0:
                    while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return total
                total += size
                if total > MAX_BODY:
                    self.send_error(413)
                    return None
                self.rfile.read(size)
                self.rfile.readline(8)
        length = self.headers.get("Content-Length")
        if not length:
            return 0
        try:
            n = int(length)
        except ValueError:
            self.send_error(400, "bad Content-Length")
            return None
        if n < 0 or n > MAX_BODY:
            self.send_error(413)
            return None
        left = n
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)
        return n - left

    def chat(self):
        upgrade = self.headers.get("Upgrade", "").lower()
        key = self.headers.get("Sec-WebSocket-Key")
        if upgrade != "websocket":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(CHAT_PAGE)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(CHAT_PAGE)
            return
        if not key or self.headers.get("Sec-WebSocket-Version") != "13":
            self.send_error(400, "bad WebSocket handshake")
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.connection.settimeout(3600)
        number, present = ROOM.join(self)
        name = f"guest{number}"
        ROOM.broadcast(f"* {name} joined ({present} here)")
        try:
            self.chat_loop(name)
        except (OSError, ValueError, struct.error):
            pass
        finally:
            present = ROOM.leave(self)
            ROOM.broadcast(f"* {name} left ({present} here)")

    def chat_loop(self, name):
        message, message_op = b"", None
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            fin, opcode = head[0] & 0x80, head[0] & 0x0F
            masked, n = head[1] & 0x80, head[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self.rfile.read(8))[0]
            if not masked or n > MAX_MESSAGE or len(message) + n > MAX_MESSAGE:
                ROOM.send(self, 0x8, struct.pack("!H", 1002 if not masked else 1009))
                return
            mask = self.rfile.read(4)
            data = self.rfile.read(n)
            if len(mask) < 4 or len(data) < n:
                return
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x8:  # close: answer it and stop
                ROOM.send(self, 0x8, data[:2])
                return
            if opcode == 0x9:
                ROOM.send(self, 0xA, data)
                continue
            if opcode == 0xA:
                continue
            if opcode in (0x1, 0x2):
                message, message_op = data, opcode
            elif opcode == 0x0 and message_op is not None:
                message += data
            else:
                ROOM.send(self, 0x8, struct.pack("!H", 1002))
                return
            if fin:
                if message_op == 0x1:
                    ROOM.broadcast(f"{name}: {message.decode('utf-8', 'replace')}")
                message, message_op = b"", None

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = handle_any

    def log_message(self, fmt, *args):
        sys.stderr.write(f"demo-backend {self.address_string()} {fmt % args}\n")


def parse_listen(text):
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv=None):
    parser = argparse.ArgumentParser(description="sluice demo backend")
    parser.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 8081),
                        metavar="HOST:PORT", help="address to listen on (default 127.0.0.1:8081)")
    args = parser.parse_args(argv)

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    try:
        server = ThreadingHTTPServer(args.listen, DemoHandler)
    except OSError as e:
        print(f"demo-backend: cannot listen on {args.listen[0]}:{args.listen[1]}: {e}",
              file=sys.stderr)
        return 2

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    # serve_forever runs in a thread: shutdown() must not be called from its own thread.
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                               daemon=True)
    serving.start()
    print(f"demo-backend listening on {args.listen[0]}:{args.listen[1]}", flush=True)
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    serving.join(5)
    print("demo-backend stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
