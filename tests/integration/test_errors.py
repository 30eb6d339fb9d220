"""Proxy-generated statuses: 400 framing errors, 408, 413, 431, 502, 504."""

import os
import re
import resource
import select
import socket
import threading
import time
import unittest

from harness import (LOOPBACK, ConnectionClosed, IncompleteResponse, RawClient, SluiceTestCase,
                     big_response, build_request, by_path, close_without_answer, delayed, echo,
                     free_port, garbage, proxy_config, reset, respond, send_raw, wait_until)

MAX_BODY = 1024
MAX_HEADER = 4096


def head(*lines, request_line=b"POST /framing HTTP/1.1"):
    """Request head from raw header lines (bytes), CRLF-terminated, Host first."""
    fields = b"".join(line + b"\r\n" for line in lines)
    return request_line + b"\r\nHost: test.local\r\n" + fields + b"\r\n"


def chunked(body_bytes):
    return head(b"Transfer-Encoding: chunked") + body_bytes


# Malformed or ambiguous framing in the request head: 400, close, nothing upstream.
HEAD_ERRORS = [
    ("content-length then transfer-encoding",
     head(b"Content-Length: 5", b"Transfer-Encoding: chunked") + b"0\r\n\r\n"),
    ("transfer-encoding then content-length",
     head(b"Transfer-Encoding: chunked", b"Content-Length: 5") + b"0\r\n\r\n"),
    ("repeated content-length, different",
     head(b"Content-Length: 5", b"Content-Length: 6") + b"hello"),
    ("repeated content-length, equal", head(b"Content-Length: 5", b"Content-Length: 5") + b"hello"),
    ("content-length list in one field", head(b"Content-Length: 5, 5") + b"hello"),
    ("content-length not a number", head(b"Content-Length: abc") + b"hello"),
    ("content-length negative", head(b"Content-Length: -1") + b"hello"),
    ("content-length with plus sign", head(b"Content-Length: +5") + b"hello"),
    ("content-length hexadecimal", head(b"Content-Length: 0x5") + b"hello"),
    ("obs-fold with spaces", head(b"X-Folded: first", b"  continued", b"Content-Length: 0")),
    ("obs-fold with tab", head(b"X-Folded: first", b"\tcontinued", b"Content-Length: 0")),
    ("first header line starts with space",
     b"GET /framing HTTP/1.1\r\n Host: test.local\r\n\r\n"),
    ("NUL in field value", head(b"X-Nul: a\x00b")),
    ("CR in field value", head(b"X-Cr: a\rb")),
    ("bare LF inside a field line", head(b"X-Lf: a\nX-Other: b")),
    ("NUL in field name", head(b"X-N\x00ul: a")),
    ("CR in field name", head(b"X-C\rr: a")),
    ("bare LF line endings", b"GET /framing HTTP/1.1\nHost: test.local\nX-A: b\n\n"),
    ("malformed request line", b"HELLO THERE\r\nHost: test.local\r\n\r\n"),
]

# Bad chunked framing in the body: 400, close, and the upstream never gets a complete
# request (the head may already have been streamed to it, the body never completes).
CHUNK_ERRORS = [
    ("chunk size not hex", chunked(b"zz\r\nhello\r\n0\r\n\r\n")),
    ("chunk size negative", chunked(b"-5\r\nhello\r\n0\r\n\r\n")),
    ("chunk size with 0x prefix", chunked(b"0x5\r\nhello\r\n0\r\n\r\n")),
    ("chunk size overflows 64 bits", chunked(b"1ffffffffffffffff\r\nhello\r\n0\r\n\r\n")),
    ("chunk size empty", chunked(b"\r\nhello\r\n0\r\n\r\n")),
    ("chunk data longer than size", chunked(b"5\r\nhelloEXTRA\r\n0\r\n\r\n")),
]


class FramingTest(SluiceTestCase):
    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))

    def send_bad(self, data):
        c = self.client(self.port, timeout=3)
        c.send(data)
        r = c.read_response(method="POST")
        self.assert_problem(r, 400)
        c.wait_closed(3)  # the client connection is closed after the 400
        return r

    def test_malformed_heads_get_400_and_nothing_reaches_the_upstream(self):
        for name, data in HEAD_ERRORS:
            with self.subTest(name):
                before = self.up.snapshot()
                self.send_bad(data)
                self.assert_nothing_reached(self.up, before, settle=0.1)

    def test_bad_chunked_bodies_get_400_and_no_request_completes_upstream(self):
        for name, data in CHUNK_ERRORS:
            with self.subTest(name):
                before = self.up.snapshot()
                self.send_bad(data)
                time.sleep(0.1)
                self.assertEqual(len(self.up.requests), before[0],
                                 f"a complete request reached the upstream: {self.up.last()}")

    def test_http09_request_line_gets_400_at_once(self):
        # "GET /" and CRLF, nothing more: an HTTP/0.9 request has no header lines, so it is
        # answered 400 now, not 408 after header_timeout (2 s here) waiting for them.
        c = self.client(self.port, timeout=3)
        c.send(b"GET /\r\n")
        r = c.read_response(timeout=3)
        self.assert_problem(r, 400)
        c.wait_closed(3)
        self.assert_nothing_reached(self.up, settle=0.1)

    def test_a_good_request_still_works_afterwards(self):
        self.send_bad(HEAD_ERRORS[0][1])
        r = self.client(self.port).request("POST", "/good", body=b"hello")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.up.last().body, b"hello")
        self.assertEqual(len(self.up.requests), 1)


class LimitsTest(SluiceTestCase):
    """408 header_timeout, 413 max_body_bytes, 431 max_header_bytes."""

    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address},
            server={"header_timeout": "1s", "idle_timeout": "1s", "max_body_bytes": MAX_BODY,
                    "max_header_bytes": MAX_HEADER}))

    # 408 --------------------------------------------------------------------------
    def test_partial_head_gets_408(self):
        c = self.client(self.port)
        c.send(b"GET /slow HTTP/1.1\r\nHost: test.local\r\n")
        start = time.monotonic()
        r = c.read_response(timeout=5)
        self.assert_problem(r, 408)
        self.assertGreaterEqual(time.monotonic() - start, 0.5, "408 long before header_timeout")
        c.wait_closed(3)
        self.assert_nothing_reached(self.up, settle=0)

    def test_head_trickling_in_past_header_timeout_gets_408(self):
        # Every piece arrives well within 1s of the previous one, but the whole head does
        # not arrive within header_timeout.
        c = self.client(self.port)
        data = b"GET /trickle HTTP/1.1\r\nHost: test.local\r\nX-Slow: " + b"a" * 40 + b"\r\n\r\n"
        deadline = time.monotonic() + 4
        answered = False
        for i in range(len(data) - 4):  # never send the final CRLF CRLF
            if select.select([c.sock], [], [], 0.1)[0]:
                answered = True
                break
            try:
                c.send(data[i:i + 1])
            except OSError:
                answered = True
                break
            if time.monotonic() > deadline:
                break
        self.assertTrue(answered or select.select([c.sock], [], [], 2)[0],
                        "no answer to a head trickling in for 4s")
        r = c.read_response(timeout=3)
        self.assert_problem(r, 408)
        self.assert_nothing_reached(self.up, settle=0)

    def test_silent_connection_is_closed_without_a_response(self):
        c = self.client(self.port)
        data = c.wait_closed(5)
        self.assertEqual(data, b"", "a connection that sent nothing got bytes back")

    # 413 --------------------------------------------------------------------------
    def test_content_length_over_max_body_gets_413_without_reading_the_body(self):
        c = self.client(self.port)
        c.send(build_request("POST", "/big", [("Content-Length", str(MAX_BODY + 1))]))
        r = c.read_response(method="POST", timeout=3)  # the body was never sent
        self.assert_problem(r, 413)
        self.assert_nothing_reached(self.up)

    def test_content_length_equal_to_max_body_is_forwarded(self):
        body = b"b" * MAX_BODY
        r = self.client(self.port).request("POST", "/exact", body=body)
        self.assertEqual(r.status, 200)
        self.assertEqual(self.up.last().body, body)

    def test_expect_100_continue_over_max_body_gets_413_and_no_100(self):
        c = self.client(self.port)
        c.send(build_request("POST", "/big", [("Content-Length", str(MAX_BODY * 10)),
                                              ("Expect", "100-continue")]))
        r = c.read_response(method="POST", informational="return", timeout=3)
        self.assert_problem(r, 413)
        self.assert_nothing_reached(self.up)

    def test_chunked_body_growing_over_max_body_gets_413(self):
        c = self.client(self.port)
        chunks = b"".join(b"200\r\n" + b"c" * 512 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
        c.send(build_request("POST", "/grow", [("Transfer-Encoding", "chunked")]) + chunks)
        r = c.read_response(method="POST", timeout=3)
        self.assert_problem(r, 413)
        time.sleep(0.2)
        self.assertEqual(len(self.up.requests), 0,
                         "a request over max_body_bytes completed at the upstream")

    # 431 --------------------------------------------------------------------------
    def test_large_header_gets_431(self):
        c = self.client(self.port)
        r = c.request("GET", "/h", [("X-Big", "v" * (MAX_HEADER * 2))])
        self.assert_problem(r, 431)
        self.assert_nothing_reached(self.up)

    def test_empty_lines_before_the_request_line_count_against_max_header_bytes(self):
        # RFC 9112 2.2: empty lines before a request line are tolerated; a stream of them
        # is not a head that grows without bound (nor one scanned again after every read).
        c = self.client(self.port)
        c.send(b"\r\n" * 3 + b"GET /few HTTP/1.1\r\nHost: test.local\r\n\r\n")
        self.assertEqual(c.read_response(timeout=3).status, 200)
        c = self.client(self.port)
        c.send(b"\r\n" * MAX_HEADER)
        r = c.read_response(timeout=3)
        self.assert_problem(r, 431)
        self.assertEqual([q.target for q in self.up.requests], ["/few"])

    def test_many_headers_over_max_get_431(self):
        c = self.client(self.port)
        r = c.request("GET", "/h", [(f"X-H{i}", "v" * 50) for i in range(MAX_HEADER // 50)])
        self.assert_problem(r, 431)
        self.assert_nothing_reached(self.up)

    def test_long_request_line_gets_431(self):
        c = self.client(self.port)
        r = c.request("GET", "/" + "p" * (MAX_HEADER * 2))
        self.assert_problem(r, 431)
        self.assert_nothing_reached(self.up)

    def test_head_under_max_header_is_forwarded(self):
        r = self.client(self.port).request("GET", "/h", [("X-Big", "v" * (MAX_HEADER // 2))])
        self.assertEqual(r.status, 200)
        self.assertEqual(self.up.last().header("x-big"), "v" * (MAX_HEADER // 2))


def stall(raw):
    """Sends `raw` (a head and part of a body), then nothing for 3 s, then closes."""
    def behaviour(req, conn):
        conn.send(raw)
        conn.sleep(3.0)
        conn.close()
    return behaviour


class UpstreamFailureTest(SluiceTestCase):
    """502 when the upstream cannot be reached or misbehaves, 504 on its timeout."""

    def setUp(self):
        self.up = self.start_upstream(by_path({
            "/reset": reset(),
            "/close": close_without_answer(),
            "/garbage": garbage(),
            "/bad-status": send_raw(b"HTTP/1.1 2000 Odd\r\nContent-Length: 0\r\n\r\n"),
            "/bad-length": send_raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello"),
            "/cut-head": send_raw(b"HTTP/1.1 200 OK\r\nContent-Le"),
            "/cut-body": send_raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten.."),
            "/slow": delayed(3.0, respond(200, b"too late")),
            "/stall-body": stall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten.."),
            "/stall-chunked": stall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"),
            "/ok": respond(200, b"ok"),
        }))
        self.port = free_port()
        dead = f"{LOOPBACK}:{free_port()}"  # nothing listens here
        routes = [
            {"name": "dead", "match": {"path_prefix": "/dead"}, "upstream": "dead"},
            {"name": "main", "match": {"path_prefix": "/"}, "upstream": "app"},
        ]
        self.sluice = self.start_sluice(proxy_config(
            self.port,
            {"dead": dead, "app": {"servers": [self.up.address], "timeout": "1s"}},
            routes))

    def get(self, target):
        return self.client(self.port).request("GET", target, timeout=5)

    def test_connection_refused_gets_502(self):
        self.assert_problem(self.get("/dead"), 502)
        entry = self.sluice.wait_access(target="/dead")
        self.assertEqual((entry["status"], entry["route"]), ("502", "dead"))

    def test_upstream_misbehaviour_gets_502(self):
        for target in ("/reset", "/close", "/garbage", "/bad-status", "/bad-length", "/cut-head"):
            with self.subTest(target):
                self.assert_problem(self.get(target), 502)
        # Still healthy.
        self.assertEqual(self.get("/ok").body, b"ok")

    def test_body_cut_short_is_not_completed_to_the_client(self):
        # The head may already have gone to the client (then the body must stay
        # incomplete and the connection close), or the proxy answers 502.
        c = self.client(self.port)
        c.send(build_request("GET", "/cut-body"))
        try:
            r = c.read_response(timeout=5)
        except (IncompleteResponse, ConnectionClosed):
            c.wait_closed(3)
            return
        self.assert_problem(r, 502)

    def test_upstream_timeout_gets_504(self):
        start = time.monotonic()
        r = self.get("/slow")
        self.assert_problem(r, 504)
        self.assertLess(time.monotonic() - start, 2.9, "504 only after the upstream answered")
        entry = self.sluice.wait_access(target="/slow")
        self.assertEqual(entry["status"], "504")


    def test_upstream_timeout_mid_body_closes_the_client_connection(self):
        # The head and the first bytes have gone to the client; the upstream then stalls
        # past its 1 s timeout: the client sees the connection close with the body
        # incomplete, well before the upstream's 3 s, and the log says why.
        for target, first in (("/stall-body", b"only ten.."), ("/stall-chunked", b"hello")):
            with self.subTest(target):
                c = self.client(self.port)
                start = time.monotonic()
                c.send(build_request("GET", target))
                with self.assertRaises(IncompleteResponse) as cut:
                    c.read_response(timeout=5)
                self.assertLess(time.monotonic() - start, 2.5)
                self.assertEqual(cut.exception.partial_response.status, 200)
                self.assertIn(first, cut.exception.partial or b"")
                self.sluice.wait_log("response body cut short: timed out")


class StalledPeerTest(SluiceTestCase):
    """A peer that stops reading: what sluice writes at once goes, the rest waits under the
    deadline of its side (idle_timeout for the client, the upstream's timeout), then the
    connection is given up."""

    BIG = 64 << 20  # more than loopback's socket buffers hold

    def setUp(self):
        # An upstream that accepts and never reads.
        self.silent = socket.socket()
        self.silent.bind((LOOPBACK, 0))
        self.silent.listen(8)
        self.held = []
        threading.Thread(target=self.hold_connections, daemon=True).start()
        self.big = big_response(self.BIG, chunked=False, seed=5)
        self.up = self.start_upstream(by_path({"/big": self.big, "/ok": respond(200, b"ok")}))
        self.port = free_port()
        routes = [
            {"name": "silent", "match": {"path_prefix": "/silent"}, "upstream": "silent"},
            {"name": "main", "match": {"path_prefix": "/"}, "upstream": "app"},
        ]
        self.sluice = self.start_sluice(proxy_config(
            self.port,
            {"app": self.up.address,
             "silent": {"servers": [f"{LOOPBACK}:{self.silent.getsockname()[1]}"], "timeout": "1s"}},
            routes, server={"idle_timeout": "1s", "max_body_bytes": 2 * self.BIG}))

    def tearDown(self):
        self.silent.close()
        for conn in self.held:
            conn.close()
        super().tearDown()

    def hold_connections(self):
        while True:
            try:
                conn, _ = self.silent.accept()
            except OSError:
                return
            self.held.append(conn)

    def test_a_client_that_stops_reading_is_let_go_after_idle_timeout(self):
        c = RawClient(self.port, timeout=10)
        self.addCleanup(c.close)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        c.send(build_request("GET", "/big"))
        time.sleep(3)  # not reading: sluice's write waits, past the 1 s idle_timeout
        got = c.wait_closed(10)
        self.assertTrue(got.startswith(b"HTTP/1.1 200 "), got[:100])
        self.assertLess(len(got), self.BIG, "the whole body went: the write never waited")
        # The worker is not stuck on it.
        self.assertEqual(self.client(self.port).request("GET", "/ok").body, b"ok")

    def test_an_upstream_that_stops_reading_a_body_times_out(self):
        c = RawClient(self.port, timeout=10)
        self.addCleanup(c.close)
        head = (f"POST /silent/upload HTTP/1.1\r\nHost: test.local\r\n"
                f"Content-Length: {self.BIG}\r\n\r\n").encode()

        def send_body():
            try:
                c.send(head + b"x" * self.BIG)
            except OSError:
                pass  # sluice answered and closed before the body was all sent

        sender = threading.Thread(target=send_body, daemon=True)
        start = time.monotonic()
        sender.start()
        r = c.read_response(timeout=10)
        self.assert_problem(r, 504)
        self.assertLess(time.monotonic() - start, 8)
        entry = self.sluice.wait_access(target="/silent/upload")
        self.assertEqual(entry["status"], "504")
        self.assertTrue(self.held, "the request never reached the upstream")
        sender.join(10)


if __name__ == "__main__":
    unittest.main()


class DescriptorsTest(SluiceTestCase):
    """Out of file descriptors (`ulimit -n` below the connections clients open): accept()
    fails with EMFILE until a connection closes. The listeners pause and try again instead of
    failing again at once (every worker spun at a full core and wrote the warning about
    260,000 times a second), and serve again once descriptors are free."""

    def get(self, port):
        c = RawClient(port)
        try:
            return c.request("GET", "/", [("Connection", "close")])
        finally:
            c.close()

    def test_running_out_of_descriptors_pauses_accepting_and_recovers(self):
        up = self.start_upstream(respond(200, b"ok"))
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": up.address}))
        self.assertEqual(self.get(port).status, 200)
        pid = s.proc.pid
        limit = len(os.listdir(f"/proc/{pid}/fd")) + 8
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        held = []
        try:
            for _ in range(24):
                held.append(socket.create_connection((LOOPBACK, port), timeout=5))

            def failures():
                return [line for line in s.stderr_text().splitlines() if "accept failed" in line]
            wait_until(lambda: failures(), 5.0, message="the warning that accept failed")
            first = time.monotonic()
            time.sleep(1.5)
            lines = failures()
            # At most one line a second for the whole process (each second of the wait, and the
            # one it began in), where every failure had been one before.
            self.assertLessEqual(len(lines), int(time.monotonic() - first) + 2, "\n".join(lines[:10]))
            self.assertIn("Too many open files", lines[0])
            # And the listeners pause between attempts (100 ms each): a line tells how many
            # failures it stands for, a handful a second per worker where there were hundreds
            # of thousands.
            wait_until(lambda: any("more failures" in line for line in failures()), 3.0,
                       message="a line that counts the failures since the one before")
            counted = [int(re.search(r"\((\d+) more failures", line).group(1))
                       for line in failures() if "more failures" in line]
            self.assertLess(max(counted), 200, counted)
        finally:
            for c in held:
                c.close()
        # The descriptors are free again: connections are taken and served as before.
        wait_until(lambda: self.get(port).status == 200, 5.0, message="a request served after the descriptors came back")
