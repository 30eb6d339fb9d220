#!/usr/bin/env python3
"""A small demo backend for `make run`: answers every method and path with a JSON
description of what reached it (method, path, query, headers, body size), so you can see
what sluice forwarded, including X-Forwarded-For and Via.

    python3 scripts/demo_backend.py --listen 127.0.0.1:8081

Standard library only. Threaded, HTTP/1.1 keep-alive. Stops cleanly on SIGTERM / SIGINT.
"""

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

MAX_BODY = 64 << 20  # bodies are read and counted, never kept


class DemoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so sluice can reuse its connections
    server_version = "sluice-demo-backend"
    timeout = 30  # idle keep-alive connections end after this

    def handle_any(self):
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
