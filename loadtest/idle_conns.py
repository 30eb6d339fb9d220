#!/usr/bin/env python3
"""Open COUNT keep-alive connections to a proxy, make one request on each, keep them idle.

Used by run.sh for the idle10k scenario: every connection sends one GET, reads the whole
response (so the proxy holds a real keep-alive connection that has served a request), then
stays open and silent. When all are open the script prints one line,
    ready opened=N failed=M
flushes, and waits HOLD seconds (or until killed, or until stdin closes when --stdin is
given), then closes everything. Loopback only.
"""
import argparse
import socket
import sys
import time


def read_response(sock):
    """Reads one response with a Content-Length body; returns the status code."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed inside the response body")
        body += chunk
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--path", default="/idle")
    ap.add_argument("--hold", type=float, default=120.0, help="seconds to keep them open at most")
    args = ap.parse_args()

    request = (f"GET {args.path} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
               "User-Agent: sluice-loadtest-idle\r\n\r\n").encode()
    socks, failed, statuses = [], 0, {}
    first_error = None
    started = time.monotonic()
    for _ in range(args.count):
        s = None
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(("127.0.0.1", args.port))
            s.sendall(request)
            status = read_response(s)
            statuses[status] = statuses.get(status, 0) + 1
            socks.append(s)
        except OSError as e:  # includes ConnectionError, timeouts, EMFILE
            failed += 1
            first_error = first_error or repr(e)
            if s is not None:
                s.close()
            if failed > 100 and not socks:
                break
    took = time.monotonic() - started
    codes = ",".join(f"{k}:{v}" for k, v in sorted(statuses.items()))
    print(f"ready opened={len(socks)} failed={failed} statuses={codes} seconds={took:.1f}"
          + (f" first_error={first_error}" if first_error else ""), flush=True)

    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline:
        time.sleep(0.5)
    # Still open at the end? Count the ones the proxy closed meanwhile (readable = EOF).
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
