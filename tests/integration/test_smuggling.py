"""Conformance corpus for request smuggling and response mix-ups (issue 12).

Our own cases, informed by the public corpora (http-desync-guardian, smuggler's
mutations, HTTP Garden). Each case asserts what the client gets AND the exact bytes the
upstream receives; then a follow-up request on the same connection (when it stays open)
and one on a new connection must each get their own answer. The upstream answers every
request with a body naming it (connection, index, method, target), so a response that
reaches the wrong request shows at once.
"""

import os
import re
import socket
import time
import unittest

from harness import ConnectionClosed, IncompleteResponse, SluiceTestCase, free_port, proxy_config
from recording_upstream import RecordingUpstream

CRLF = "\r\n"


# Where a forwarded head has the request id sluice made (random): same_id() puts this in its place.
REQUEST_ID = "<request id>"


def same_id(raw):
    """raw with the one X-Request-Id line sluice wrote (32 hex digits) made comparable."""
    return re.sub(rb"\r\nX-Request-Id: [0-9a-f]{32}\r\n", b"\r\nX-Request-Id: " + REQUEST_ID.encode() + b"\r\n",
                  raw, count=1)


def forwarded(method, target, fields=(("Host", "a"),), framing=None, body=b"", via="1.1"):
    """The exact request sluice sends upstream: the client's end-to-end fields in order, the
    forwarding fields, then the framing sluice chose."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{n}: {v}" for n, v in fields]
    lines += ["X-Forwarded-For: 127.0.0.1", "X-Forwarded-Proto: http", f"Via: {via} sluice",
              "X-Request-Id: " + REQUEST_ID]
    if framing is not None:
        lines.append(framing)
    return (CRLF.join(lines) + CRLF + CRLF).encode("latin-1") + body


def chunked(body):
    return (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"") + b"0\r\n\r\n"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Case:
    def __init__(self, name, send, status, upstream, closes=False, method="GET", body=None):
        self.name = name
        self.send = send              # bytes the client sends
        self.status = status          # what it gets
        self.upstream = upstream      # exact requests the upstream gets ([] = nothing)
        self.closes = closes          # the client connection is closed after the answer
        self.method = method
        self.body = body              # the answer's body, when checked


H = b"Host: a\r\n"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"

REQUEST_CASES = [
    # Empty chunked bodies: the last chunk is forwarded once, however it was spelled.
    Case("empty chunked body", b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=b"0\r\n\r\n")]),
    Case("last chunk with an extension", b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0;x=y\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=b"0\r\n\r\n")]),
    Case("extensions everywhere",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3;a=b;c=\"d;e\"\r\nabc\r\n0;z\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=chunked(b"abc"))]),
    Case("trailers are dropped, never merged into the head",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
         b"X-Forwarded-For: 6.6.6.6\r\nHost: evil\r\nConnection: close\r\nX-Forwarded-Proto: https\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=chunked(b"abc"))]),
    Case("GET with an empty chunked body",
         b"GET /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         200, [forwarded("GET", "/x", framing="Transfer-Encoding: chunked", body=b"0\r\n\r\n")]),
    Case("HEAD with an empty chunked body",
         b"HEAD /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         200, [forwarded("HEAD", "/x", framing="Transfer-Encoding: chunked", body=b"0\r\n\r\n")], method="HEAD"),
    Case("Transfer-Encoding with an empty list element",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: ,chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=chunked(b"hi"))]),
    Case("many tiny chunks become one",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=chunked(b"abc"))]),
    Case("Content-Length body", b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n\r\nhello",
         200, [forwarded("POST", "/x", framing="Content-Length: 5", body=b"hello")]),
    Case("Content-Length: 0", b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 0\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Content-Length: 0")]),
    Case("Content-Length with leading zeros is written plainly",
         b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 005\r\n\r\nhello",
         200, [forwarded("POST", "/x", framing="Content-Length: 5", body=b"hello")]),
    # Connection cannot remove what frames the request or identifies it.
    Case("Connection: Content-Length",
         b"POST /x HTTP/1.1\r\n" + H + b"Connection: Content-Length\r\nContent-Length: 35\r\n\r\n" + SMUGGLED,
         200, [forwarded("POST", "/x", framing="Content-Length: 35", body=SMUGGLED)]),
    Case("Connection: close, Content-Length",
         b"POST /x HTTP/1.1\r\n" + H + b"Connection: close, Content-Length\r\nContent-Length: 35\r\n\r\n"
         + SMUGGLED,
         200, [forwarded("POST", "/x", framing="Content-Length: 35", body=SMUGGLED)], closes=True),
    Case("Connection: Transfer-Encoding",
         b"POST /x HTTP/1.1\r\n" + H + b"Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"3\r\nabc\r\n0\r\n\r\n",
         200, [forwarded("POST", "/x", framing="Transfer-Encoding: chunked", body=chunked(b"abc"))]),
    Case("Connection: Host", b"GET /x HTTP/1.1\r\n" + H + b"Connection: Host\r\n\r\n",
         200, [forwarded("GET", "/x")]),
    Case("HTTP/1.2 is read as HTTP/1.1", b"GET /x HTTP/1.2\r\n" + H + b"\r\n", 200, [forwarded("GET", "/x")]),
    # Refused before anything reaches the upstream; the connection closes.
    Case("Content-Length then Transfer-Encoding",
         b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400, [], closes=True),
    Case("Transfer-Encoding then Content-Length",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
         400, [], closes=True),
    Case("repeated Content-Length",
         b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400, [], closes=True),
    Case("Content-Length list", b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 5, 5\r\n\r\nhello", 400, [],
         closes=True),
    Case("signed Content-Length", b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello", 400, [],
         closes=True),
    Case("gzip, chunked", b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
         501, [], closes=True),
    Case("chunked, chunked", b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
         400, [], closes=True),
    Case("chunked twice in two fields",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400, [], closes=True),
    Case("chunked, identity",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400, [],
         closes=True),
    Case("Transfer-Encoding in HTTP/1.0",
         b"POST /x HTTP/1.0\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, [], closes=True),
    Case("obs-fold", b"GET /x HTTP/1.1\r\n" + H + b"X-A: 1\r\n continued\r\n\r\n", 400, [], closes=True),
    Case("bare LF in a field", b"GET /x HTTP/1.1\r\n" + H + b"X-A: 1\nX-B: 2\r\n\r\n", 400, [], closes=True),
    Case("bare CR in a field", b"GET /x HTTP/1.1\r\n" + H + b"X-A: 1\rX-B: 2\r\n\r\n", 400, [], closes=True),
    Case("NUL in a field", b"GET /x HTTP/1.1\r\n" + H + b"X-A: 1\x002\r\n\r\n", 400, [], closes=True),
    Case("space before the colon",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400, [], closes=True),
    Case("HTTP/2.0 request line", b"GET /x HTTP/2.0\r\n" + H + b"\r\n", 505, [], closes=True),
    # Bad chunk framing that arrives with the head: refused, nothing sent upstream.
    *[Case(f"chunk size {size!r}",
           b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" + size + b"\r\nhello\r\n0\r\n\r\n",
           400, [], closes=True)
      for size in (b"0x5", b"+5", b"-5", b" 5", b"5 5", b"5\x00", b"1000000000000000", b"g", b"")],
    Case("chunk data longer than its size",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", 400, [],
         closes=True),
    Case("unterminated quote in a chunk extension",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3;x=\"abc\r\nabc\r\n0\r\n\r\n", 400, [],
         closes=True),
    Case("bare LF after a chunk size",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", 400, [], closes=True),
    Case("obs-fold in the trailer section",
         b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n 2\r\n\r\n", 400, [],
         closes=True),
]

# The upstream's answers that must not be relayed as they are, by target.
BAD_UPSTREAM = {
    "/cl-extra": [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nSTOLEN!"],
    "/head-body": [b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nSTOLEN!"],
    "/head-body-later": [b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", 0.05, b"STOLEN!"],
    "/204-body": [b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nSTOLEN!"],
    "/status-099": [b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n"],
    "/status-600": [b"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n"],
    "/status-999": [b"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n"],
    "/te-gzip": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"],
    "/cl-te": [b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"],
    "/cl-twice": [b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"],
    "/bad-chunk": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"],
    "/obs-fold": [b"HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n"],
    "/http2": [b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n"],
    "/big-trailer": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Big: "
                     + b"a" * 70000 + b"\r\n\r\n"],
    "/switch": [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nxx"],
}


class SmugglingTest(SluiceTestCase):
    def setUp(self):
        self.up = RecordingUpstream().start()
        self.addCleanup(self.up.stop)
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))

    def expect_own_answer(self, client, target, method="GET"):
        client.send(f"{method} {target} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        r = client.read_response(method=method)
        self.assertEqual(r.status, 200, f"{target}: {r} {r.body[:200]!r}")
        if method != "HEAD":
            self.assertRegex(r.body.decode("latin-1"), rf"^\d+\.\d+ {method} {re.escape(target)} len=0$")
        return r

    def run_case(self, case):
        self.up.reset_records()
        c = self.client(self.port)
        c.send(case.send)
        r = c.read_response(method=case.method)
        self.assertEqual(r.status, case.status, f"{r} {r.body[:300]!r}\n{self.sluice.log_text()[-2000:]}")
        if case.status == 200 and case.method != "HEAD":
            # The answer names the request it belongs to.
            got = self.up.wait_requests(1)
            self.assertRegex(r.body.decode("latin-1"), rf"^{got[0][0]}\.\d+ ")
        if case.closes:
            self.assertTrue(c.is_closed(3), "the connection stays open")
        else:
            self.expect_own_answer(c, "/follow-up")
        self.expect_own_answer(self.client(self.port), "/fresh")
        expected = list(case.upstream)
        if not case.closes:
            expected.append(b"/follow-up")
        expected.append(b"/fresh")
        got = self.up.wait_requests(len(expected))
        time.sleep(0.05)
        got = list(self.up.requests)
        self.assertEqual(self.up.errors, [], "the upstream could not parse what it got")
        self.assertEqual(len(got), len(expected), got)
        for (conn_id, raw), want in zip(got, expected):
            if want.startswith(b"/"):
                self.assertIn(b" " + want + b" ", raw.split(b"\r\n")[0])
            else:
                self.assertEqual(same_id(raw), want)

    def test_request_framing_corpus(self):
        for case in REQUEST_CASES:
            with self.subTest(case.name):
                self.run_case(case)

    def test_bad_chunk_after_the_head_closes_the_upstream_connection_mid_request(self):
        # The head and a good chunk go upstream; the bad chunk comes later. The upstream
        # never sees a complete request, and the client gets 400.
        c = self.client(self.port)
        c.send(b"POST /late HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        deadline = time.monotonic() + 3
        while b"abc" not in self.up.raw(self.up.connections) and time.monotonic() < deadline:
            time.sleep(0.01)
        c.send(b"zz\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 400)
        self.assertTrue(c.is_closed(3))
        time.sleep(0.1)
        self.assertEqual(self.up.requests, [])
        self.expect_own_answer(self.client(self.port), "/fresh")

    def test_upstream_answers_are_checked_before_they_are_relayed(self):
        self.up.answers.update(BAD_UPSTREAM)
        cases = [
            ("/cl-extra", "GET", 200, b"hello"),
            ("/head-body", "HEAD", 200, b""),
            ("/204-body", "GET", 204, b""),
            ("/status-099", "GET", 502, None),
            ("/status-600", "GET", 502, None),
            ("/status-999", "GET", 502, None),
            ("/te-gzip", "GET", 502, None),
            ("/cl-te", "GET", 502, None),
            ("/cl-twice", "GET", 502, None),
            ("/bad-chunk", "GET", 502, None),
            ("/obs-fold", "GET", 502, None),
            ("/http2", "GET", 502, None),
            ("/switch", "GET", 502, None),
        ]
        for target, method, status, body in cases:
            with self.subTest(target):
                c = self.client(self.port)
                c.send(f"{method} {target} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
                r = c.read_response(method=method)
                self.assertEqual(r.status, status, f"{r} {r.body[:200]!r}")
                if body is not None:
                    self.assertEqual(r.body, body)
                if status == 502:
                    self.assertNotIn(b"STOLEN", r.body)
                time.sleep(0.1)  # whatever the upstream sent after its answer has arrived
                # Whoever asks next, on this connection or another, gets their own answer.
                if not r.connection_close() and status != 502:
                    self.expect_own_answer(c, "/follow-up")
                for i in range(3):
                    self.expect_own_answer(self.client(self.port), f"/fresh-{i}")
                    self.expect_own_answer(self.client(self.port), f"/fresh-head-{i}", method="HEAD")

    def test_a_websocket_handshake_switched_to_anything_else_is_a_502(self):
        # Only a 101 that switches to websocket opens a tunnel, and only for a handshake.
        self.up.answers["/ws-h2c"] = [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"]
        self.up.answers["/ws-no-upgrade"] = [b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n"]
        self.up.answers["/ws-two"] = [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                      b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"]
        handshake = (b"Host: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        for target in ("/ws-h2c", "/ws-no-upgrade", "/ws-two"):
            with self.subTest(target):
                c = self.client(self.port)
                c.send(b"GET " + target.encode() + b" HTTP/1.1\r\n" + handshake)
                r = c.read_response()
                self.assertEqual(r.status, 502, f"{r} {r.body[:200]!r}")
                self.expect_own_answer(self.client(self.port), f"/after{target}")
        # An h2c upgrade request is forwarded as plain HTTP/1.1, without its Upgrade.
        self.up.reset_records()
        c = self.client(self.port)
        c.send(b"GET /h2c HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
               b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        seen = self.up.requests[-1][1].lower()
        self.assertNotIn(b"upgrade", seen)
        self.assertNotIn(b"http2-settings", seen)

    def test_body_bytes_a_server_sends_late_after_a_head_answer_reach_nobody(self):
        # The bytes arrive after the head was relayed, while the connection sits in the pool.
        self.up.answers.update(BAD_UPSTREAM)
        for i in range(5):
            c = self.client(self.port)
            r = c.request("HEAD", "/head-body-later")
            self.assertEqual(r.status, 200)
            time.sleep(0.15)
            self.expect_own_answer(c, f"/after-{i}")
            self.expect_own_answer(self.client(self.port), f"/other-{i}")

    def test_upstream_chunked_response_is_framed_again(self):
        self.up.answers["/empty-chunked"] = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"]
        self.up.answers["/trailers"] = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Forwarded-For\r\n\r\n"
                                        b"5;ext=1\r\nhello\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n"]
        c = self.client(self.port)
        c.send(b"GET /empty-chunked HTTP/1.1\r\nHost: a\r\n\r\n")
        raw = b""
        deadline = time.monotonic() + 3
        while not raw.endswith(b"\r\n0\r\n\r\n") and time.monotonic() < deadline:
            raw += c.read_available(0.1)
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertIn(b"Transfer-Encoding: chunked", head)
        self.assertEqual(body, b"0\r\n\r\n")
        self.expect_own_answer(c, "/follow-up")

        c.send(b"GET /trailers HTTP/1.1\r\nHost: a\r\n\r\n")
        raw = b""
        deadline = time.monotonic() + 3
        while not raw.endswith(b"\r\n0\r\n\r\n") and time.monotonic() < deadline:
            raw += c.read_available(0.1)
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertEqual(body, b"5\r\nhello\r\n0\r\n\r\n")
        self.assertNotIn(b"6.6.6.6", raw)
        self.assertNotIn(b"Trailer:", head)
        self.expect_own_answer(c, "/follow-up-2")

    def test_an_oversized_upstream_trailer_does_not_end_a_worker(self):
        self.up.answers.update(BAD_UPSTREAM)
        for _ in range(4):  # more than the two workers
            c = self.client(self.port)
            c.send(b"GET /big-trailer HTTP/1.1\r\nHost: a\r\n\r\n")
            try:
                r = c.read_response()
                self.assertEqual(r.status, 502)
            except (IncompleteResponse, ConnectionClosed):
                pass  # the head went out before the trailer: the client sees the body cut short
        for i in range(6):
            self.expect_own_answer(self.client(self.port), f"/alive-{i}")
        self.assertTrue(self.sluice.running)


class PathAndHostTest(SluiceTestCase):
    """No spelling of a path reaches a route while avoiding its limits; Host is validated."""

    def setUp(self):
        self.up = RecordingUpstream().start()
        self.addCleanup(self.up.stop)
        self.port = free_port()
        limited = {"name": "limited", "match": {"path_prefix": "/limited"}, "upstream": "app",
                   "limits": [{"name": "one", "algorithm": "token_bucket", "rate": 1, "per": "1h",
                               "burst": 1, "key": ["client_ip"]}]}
        # Not ASCII, written in the config escaped in lower case.
        cafe = {"name": "cafe", "match": {"path_prefix": "/caf%c3%a9"}, "upstream": "app",
                "limits": [{"name": "one", "algorithm": "token_bucket", "rate": 1, "per": "1h",
                            "burst": 1, "key": ["client_ip", "path"]}]}
        rest = {"name": "rest", "match": {"path_prefix": "/"}, "upstream": "app"}
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}, [limited, cafe, rest]))

    def status_of(self, target, headers=b"Host: a\r\n", version=b"HTTP/1.1"):
        c = self.client(self.port)
        c.send(b"GET " + target + b" " + version + b"\r\n" + headers + b"\r\n")
        return c.read_response()

    def test_every_spelling_of_a_limited_path_is_limited(self):
        self.assertEqual(self.status_of(b"/limited/y").status, 200)  # the one token
        for spelling in (b"/x/../limited/y", b"//limited/y", b"/%6cimited/y", b"/%6Cimited/y", b"/./limited/y",
                         b"/x/%2e%2e/limited/y", b"/limited//y", b"http://a/limited/y", b"HTTP://a//limited/y"):
            with self.subTest(spelling):
                r = self.status_of(spelling)
                self.assertEqual(r.status, 429, f"{spelling!r} got {r.status}")
        # What went upstream is the path the limit saw.
        self.assertEqual([p[2] for p in self.up.parsed], ["/limited/y"])

    def test_a_path_that_is_not_ascii_is_one_path_however_spelled(self):
        # Raw UTF-8 (which servers take, though a URI may not hold it) and its escapes in
        # either case of hex are one path: for the route, for a `path` key and upstream.
        self.assertEqual(self.status_of(b"/caf\xc3\xa9/menu").status, 200)  # the one token
        for spelling in (b"/caf%C3%A9/menu", b"/caf%c3%a9/menu", b"/caf\xc3%A9/menu", b"/caf%C3\xa9/menu",
                         b"/caf\xc3\xa9//menu"):
            with self.subTest(spelling):
                r = self.status_of(spelling)
                self.assertEqual(r.status, 429, f"{spelling!r} got {r.status}")
        self.assertEqual([p[2] for p in self.up.parsed], ["/caf%C3%A9/menu"])

    def test_the_normalised_path_is_forwarded_with_the_query_as_it_came(self):
        r = self.status_of(b"/a/./b/../%7e%2fc?x=/../&y=%2e")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.up.parsed[-1][2], "/a/~%2Fc?x=/../&y=%2e")

    def test_bad_paths_and_hosts_are_refused(self):
        for target, headers in ((b"/../x", b"Host: a\r\n"), (b"/%zz", b"Host: a\r\n"), (b"/a\\b", b"Host: a\r\n"),
                                (b"http://u@a/x", b"Host: a\r\n"), (b"http://a:99999/x", b"Host: a\r\n"),
                                (b"ftp://a/x", b"Host: a\r\n"), (b"/x", b"Host: a?q=1\r\n"),
                                (b"/x", b"Host: a b\r\n"), (b"/x", b"Host: \r\n"), (b"/x", b"Host: a:8a\r\n"),
                                (b"/x", b"Host: [::1\r\n"), (b"/x", b"Host: a/b\r\n")):
            with self.subTest(target=target, headers=headers):
                self.assertEqual(self.status_of(target, headers).status, 400)
        self.assertEqual(self.up.requests, [])

    def test_a_method_not_in_upper_case_is_refused_not_routed_around_its_limit(self):
        # A route for POST /login with its limit, and one for the rest without: `post` would
        # miss the first, and an upstream that upper-cases methods would read it as POST.
        port = free_port()
        login = {"name": "login", "match": {"path": "/login", "methods": ["POST"]}, "upstream": "app",
                 "limits": [{"name": "tries", "algorithm": "token_bucket", "rate": 1, "per": "1h", "burst": 1,
                             "key": ["client_ip"]}]}
        rest = {"name": "rest", "match": {"path_prefix": "/"}, "upstream": "app"}
        self.start_sluice(proxy_config(port, {"app": self.up.address}, [login, rest]))
        c = self.client(port)
        self.assertEqual(c.request("POST", "/login", body=b"a").status, 200)
        self.assertEqual(c.request("POST", "/login", body=b"a").status, 429)
        for method in (b"post", b"Post", b"POST1", b"P.ST"):
            with self.subTest(method=method):
                c = self.client(port)
                c.send(method + b" /login HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\na")
                r = c.read_response()
                self.assertEqual(r.status, 400)
                self.assertIn(b"upper-case", r.body)
        self.assertEqual(len(self.up.requests), 1)

    def test_absolute_form_authority_becomes_host(self):
        r = self.status_of(b"http://B.Test:8080?q=1", b"Host: other\r\n")
        self.assertEqual(r.status, 200)
        conn_id, method, target, fields, body = self.up.parsed[-1]
        self.assertEqual(target, "/?q=1")
        self.assertEqual([v for n, v in fields if n == "host"], ["b.test:8080"])

    def test_http10_without_host_is_forwarded_with_one(self):
        r = self.status_of(b"/x", b"", b"HTTP/1.0")
        self.assertEqual(r.status, 200)
        fields = self.up.parsed[-1][3]
        self.assertEqual([v for n, v in fields if n == "host"], ["app"])


class BoundsTest(SluiceTestCase):
    """Every part of a chunked body is bounded: past a limit the client gets its answer at
    once, memory stays flat, and no worker ends."""

    def setUp(self):
        self.up = RecordingUpstream().start()
        self.addCleanup(self.up.stop)
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))

    def stream_until_answered(self, head, piece, limit=64 << 20):
        """Sends `head`, then `piece` repeatedly until sluice answers or `limit` bytes went."""
        c = self.client(self.port)
        c.send(head)
        sent = 0
        answer = b""
        c.sock.settimeout(0.5)
        try:
            while sent < limit:
                try:
                    c.sock.sendall(piece)
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    break
                sent += len(piece)
                answer = c.read_available(0.001)
                if answer:
                    break
        finally:
            c.sock.settimeout(5)
        return c, sent, answer

    def check_refused(self, head, piece, status):
        before = rss_kib(self.sluice.proc.pid)
        c, sent, data = self.stream_until_answered(head, piece)
        self.assertLess(sent, 8 << 20, "sluice kept reading without an answer")
        data += c.read_available(0.5)
        self.assertTrue(data.startswith(b"HTTP/1.1 %d " % status), data[:200])
        after = rss_kib(self.sluice.proc.pid)
        self.assertLess(after - before, 16 * 1024, f"RSS grew from {before} to {after} KiB")

    def test_64_mib_chunk_extension(self):
        self.check_refused(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;", b"x" * 65536, 400)

    def test_64_mib_of_chunk_size_digits(self):
        self.check_refused(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", b"0" * 65536, 400)

    def test_64_mib_trailer_line(self):
        self.check_refused(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ",
                           b"y" * 65536, 431)

    def test_quoted_extension_never_closed(self):
        self.check_refused(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=\"",
                           b"q" * 65536, 400)

    def test_a_70000_byte_trailer_field_does_not_end_a_worker(self):
        for _ in range(4):  # twice the workers
            c = self.client(self.port)
            c.send(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Big: "
                   + b"a" * 70000 + b"\r\n\r\n")
            data = c.wait_closed(3)
            self.assertTrue(data.startswith(b"HTTP/1.1 431 "), data[:200])
        for i in range(6):
            r = self.client(self.port).request("GET", f"/alive-{i}", host="a")
            self.assertEqual(r.status, 200)

    def test_too_many_header_fields(self):
        head = b"GET /x HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100)) + b"\r\n"
        c = self.client(self.port)
        c.send(head)
        self.assertEqual(c.read_response().status, 431)
        ok = b"GET /x HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(99)) + b"\r\n"
        c = self.client(self.port)
        c.send(ok)
        self.assertEqual(c.read_response().status, 200)


if __name__ == "__main__":
    unittest.main()
