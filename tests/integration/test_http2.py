"""HTTP/2 to clients, with real clients: curl (--http2-prior-knowledge), Python's `h2` for
hostile frame sequences, grpcio for the gRPC answer. Upstreams stay HTTP/1.1 (the recording
upstream of harness.py).

A stream runs the same phases as an HTTP/1.1 request: the limits are shared with HTTP/1.1
clients of the same instance, refused streams get 429 with the rate-limit headers, bodies
cross in both directions with the windows bounded, the access line says HTTP/2.0. Rapid
reset ends the connection with GOAWAY ENHANCE_YOUR_CALM; h2-to-h1 smuggling fields are
stream errors and never reach the upstream; a limited gRPC call is RESOURCE_EXHAUSTED.
"""

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from admin_api import Metrics, wait_admin
from harness import (LOOPBACK, EarlyAnswerUpstream, RawClient, SluiceTestCase, by_path, close_without_answer, delayed, echo, echo_body, free_port,
                     head_then_late_body, http_response_bytes, leaky_bucket, limited_route, pattern_bytes, proxy_config, redis_store, respond, sha256_hex,
                     token_bucket, wait_until, window_units)

sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-h2 and python3-grpcio
import grpc  # noqa: E402
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402
from test_smuggling import rss_kib  # noqa: E402


# The client connection preface and an empty SETTINGS frame.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def frame(kind, flags, stream_id, payload):
    """One raw HTTP/2 frame."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


def frames_until_close(sock):
    """[(type, payload)] of every frame the server sent until it closed the connection."""
    got = bytearray()
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        got += data
    frames, at = [], 0
    while at + 9 <= len(got):
        length = int.from_bytes(got[at:at + 3], "big")
        frames.append((got[at + 3], bytes(got[at + 9:at + 9 + length])))
        at += 9 + length
    return frames


class H2Client:
    """A cleartext (prior knowledge) HTTP/2 client over one socket, frame by frame."""

    def __init__(self, port, validate=True):
        self.sock = socket.create_connection((LOOPBACK, port), timeout=5)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                           validate_outbound_headers=validate,
                                           normalize_outbound_headers=validate)
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self.flush()
        self.events = []

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def pump(self):
        """Reads once; the events received ([] when the server closed)."""
        data = self.sock.recv(65536)
        if not data:
            return None
        events = self.conn.receive_data(data)
        self.flush()
        self.events.extend(events)
        return events

    def send(self, method, path, headers=()):
        """Sends a request without a body; its stream id (answers: wait_streams)."""
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":scheme", "http"), (":authority", "app.test"), (":path", path)]
        self.conn.send_headers(sid, fields + list(headers), end_stream=True)
        self.flush()
        return sid

    def wait_streams(self, sids):
        """Reads until each of `sids` has ended: ({stream id: {headers}}, {stream id:
        time.monotonic() when it ended})."""
        heads, ended = {}, {}
        while len(ended) < len(sids):
            events = self.pump()
            if events is None:
                raise AssertionError("connection closed")
            for e in events:
                if isinstance(e, h2.events.ResponseReceived):
                    heads[e.stream_id] = dict(e.headers)
                elif isinstance(e, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                    self.flush()
                elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and e.stream_id in sids:
                    ended[e.stream_id] = time.monotonic()
        return heads, ended

    def wait_for(self, kind, what):
        """The next event of type `kind` the server's frames give (`what` names it should
        the connection close first)."""
        while True:
            events = self.pump()
            if events is None:
                raise AssertionError(f"connection closed before {what}")
            found = next((e for e in events if isinstance(e, kind)), None)
            if found is not None:
                return found

    def request(self, method, path, headers=(), body=None):
        """(status, {headers}, body) of one request; body sent in pieces as the windows allow."""
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":scheme", "http"), (":authority", "app.test"), (":path", path)]
        self.conn.send_headers(sid, fields + list(headers), end_stream=body is None)
        self.flush()
        rest = body or b""
        status, head, got, done = None, {}, bytearray(), False
        while not done:
            while rest and self.conn.local_flow_control_window(sid) > 0:
                n = min(len(rest), self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                self.conn.send_data(sid, rest[:n], end_stream=(n == len(rest)))
                rest = rest[n:]
                self.flush()
            events = self.pump()
            if events is None:
                raise AssertionError("connection closed")
            for e in events:
                if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                    head = dict(e.headers)
                    status = int(head[":status"])
                elif isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                    got += e.data
                    self.conn.acknowledge_received_data(e.flow_controlled_length, sid)
                    self.flush()
                elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and e.stream_id == sid:
                    done = True
                    if isinstance(e, h2.events.StreamReset) and status is None:
                        status = ("reset", e.error_code)
        return status, head, bytes(got)

    def at_once(self, paths, headers=()):
        """Sends a GET for each path before reading anything (all streams open at once), then
        reads until each has ended: [(status, {headers})] in the order of `paths`."""
        sids = [self.send("GET", path, headers) for path in paths]
        heads, _ = self.wait_streams(sids)
        out = []
        for sid in sids:
            head = heads.get(sid, {})
            out.append((int(head[":status"]) if ":status" in head else None, head))
        return out


class Http2Test(SluiceTestCase):
    def start(self, routes=None, upstream=None, server=None, admin=False, store=None, store_up=True, extra=None):
        self.upstream = self.start_upstream(upstream or echo())
        self.port = port = self.start_instance(routes, server, admin, store, store_up, extra)
        self.sluice = self.instances[-1]
        return port

    def start_instance(self, routes=None, server=None, admin=False, store=None, store_up=True, extra=None):
        """One more sluice (HTTP/2 with prior knowledge) in front of self.upstream; its port."""
        port = free_port()
        srv = {"listen": [{"address": f"{LOOPBACK}:{port}", "http2": "prior_knowledge"}]}
        if server:
            srv.update(server)
        extra = dict(extra or {})
        if admin:
            self.admin_port = free_port()
            extra["admin"] = {"listen": f"{LOOPBACK}:{self.admin_port}"}
        if store:
            extra["store"] = store
        self.config = proxy_config(port, {"app": self.upstream.address}, routes, server=srv, extra=extra)
        sluice = self.start_sluice(self.config, port=port)
        if admin:
            wait_admin(self.admin_port)
        if store and store["type"] == "redis" and store_up:
            sluice.wait_store_connected(2)
        self.instances = getattr(self, "instances", []) + [sluice]
        return port

    def abuse_counted(self):
        """sluice_http2_abuse_total by reason."""
        m = Metrics.fetch(self.admin_port)
        return {reason: m.get("sluice_http2_abuse_total", reason=reason)
                for reason in ("rapid_reset", "continuation_flood", "control_flood")}

    def assert_ended_for_abuse(self, c, reason):
        """c's connection ends with GOAWAY ENHANCE_YOUR_CALM, logged and counted once under
        `reason` (the log line is written after the count), and other connections are served."""
        goaway = self.wait_goaway(c)
        self.assertIsNotNone(goaway)
        self.assertEqual(goaway.error_code, 11)  # ENHANCE_YOUR_CALM
        self.sluice.wait_log(r"HTTP/2 connection ended with GOAWAY ENHANCE_YOUR_CALM: " + reason)
        expected = {"rapid_reset": 0, "continuation_flood": 0, "control_flood": 0}
        expected[reason] = 1
        self.assertEqual(self.abuse_counted(), expected)
        self.assertTrue(self.curl("/ok").startswith("HTTP/2 200"))

    def wait_goaway(self, c):
        """The GOAWAY that ends the connection (None when it closed without one)."""
        while True:
            try:
                events = c.pump()
            except ConnectionResetError:
                return None
            if events is None:
                return None
            goaway = next((e for e in events if isinstance(e, h2.events.ConnectionTerminated)), None)
            if goaway is not None:
                return goaway

    def client(self, validate=True, port=None):
        c = H2Client(port or self.port, validate)
        self.addCleanup(c.close)
        return c

    def curl(self, path, *args):
        out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-", *args,
                              f"http://{LOOPBACK}:{self.port}{path}"],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_connections_closed_at_once_end_at_once(self):
        # A connection closed before it sent anything (a port check) ended while looking for
        # the preface, then was read again, and some waited for their header_timeout.
        self.start(server={"header_timeout": "30s"}, admin=True)
        for _ in range(200):
            with socket.create_connection((LOOPBACK, self.port), timeout=5):
                pass
        wait_until(lambda: Metrics.fetch(self.admin_port).get("sluice_connections_active") == 0, 5,
                   message="every connection ended")

    def test_the_preface_and_the_head_after_it_share_one_header_timeout(self):
        # A client stalling inside what could be the preface got header_timeout there, then
        # another one for the head (a slowloris had twice the time).
        port = self.start(server={"header_timeout": "2s"})
        for stalled in (b"PRI * HTTP/2.0\r\n", b"P", b"GET / HTTP/1.1\r\n"):
            with self.subTest(stalled):
                c = RawClient(port)
                self.addCleanup(c.close)
                c.send(stalled)
                sent = time.monotonic()
                r = c.read_response(timeout=10)
                waited = time.monotonic() - sent
                self.assertEqual(r.status, 408)
                self.assertGreater(waited, 1.5)
                self.assertLess(waited, 3.5, "two header timeouts")

    def test_a_graceful_stop_closes_a_connection_that_sent_nothing_at_once(self):
        port = self.start(server={"header_timeout": "30s", "shutdown_timeout": "30s"}, admin=True)
        silent = RawClient(port)
        self.addCleanup(silent.close)
        wait_until(lambda: Metrics.fetch(self.admin_port).get("sluice_connections_active") == 1, 5,
                   message="the connection taken")
        self.sluice.send_signal(signal.SIGTERM)
        self.assertEqual(silent.wait_closed(timeout=10), b"")
        self.assertEqual(self.sluice.wait(10), 0, self.sluice.log_text())

    def test_curl_over_prior_knowledge_shares_the_limit_with_http1(self):
        self.start([limited_route("api", [token_bucket("per_client", 3, "1m", 3)])])
        for i in range(3):
            out = self.curl("/api/x?i=%d" % i)
            self.assertTrue(out.startswith("HTTP/2 200"), out[:200])
        refused = self.curl("/api/x")
        self.assertTrue(refused.startswith("HTTP/2 429"), refused[:300])
        self.assertIn("\nretry-after: ", refused)
        self.assertIn('\nratelimit: "per_client";r=0;t=', refused)
        self.assertIn("application/problem+json", refused)
        # The same bucket for an HTTP/1.1 client of the same port.
        with RawClient(self.port) as c:
            self.assertEqual(c.request("GET", "/api/y").status, 429)
        req = self.upstream.requests[0]
        self.assertEqual(req.version, "HTTP/1.1")
        self.assertEqual(req.target, "/api/x?i=0")
        self.assertEqual(req.header("host"), f"{LOOPBACK}:{self.port}")
        self.assertEqual(req.header("x-forwarded-for"), LOOPBACK)
        self.assertEqual(len(self.upstream.requests), 3)
        self.sluice.wait_access(status="429", version="HTTP/2.0")

    def test_costs_the_response_reports_are_settled_for_streams_as_for_http1(self):
        # cost: {response_header} settled before the stream's head, cost: {response_trailer}
        # before its end (the upstream's chunked body ends with the trailer).
        def upstream(req, conn):
            conn.send(b"HTTP/1.1 200 OK\r\nX-Tokens-Used: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\nX-Usage: 25\r\n\r\n")

        limits = [{"name": "tokens", "algorithm": "sliding_window", "limit": 100, "window": "1h",
                   "cost": {"response_header": "X-Tokens-Used", "reserve": 10}},
                  {"name": "usage", "algorithm": "sliding_window", "limit": 100, "window": "1h",
                   "cost": {"response_trailer": "X-Usage", "reserve": 10}}]
        redis = self.start_redis()
        self.start([limited_route("llm", limits)], upstream=upstream, store=redis_store(redis))
        for i in range(3):
            out = self.curl("/llm/x")
            self.assertTrue(out.startswith("HTTP/2 200"), out[:200])
            self.assertTrue(out.endswith("hello"), out[-200:])
            keys = redis.command("KEYS", "sluice:*")
            counts = {k.rsplit(":", 1)[1]: window_units(redis, k) for k in keys}
            self.assertEqual(counts, {"tokens": 3 * (i + 1), "usage": 25 * (i + 1)})

    def test_a_limit_counting_failures_charges_streams_as_http1_requests(self):
        # count: {statuses: [401]}: a stream is checked before it goes upstream and charged
        # when the upstream's head is a 401, before the client has it.
        limit = {"name": "failures", "algorithm": "sliding_window", "limit": 2, "window": "1m",
                 "count": {"statuses": [401]}}
        self.start([limited_route("login", [limit])],
                   upstream=by_path({"/login/bad": respond(401, b"no"), "/login/ok": respond(200, b"yes")}))
        for i in range(3):
            self.assertTrue(self.curl("/login/ok").startswith("HTTP/2 200"))
        for i in range(2):
            self.assertTrue(self.curl("/login/bad").startswith("HTTP/2 401"))
        refused = self.curl("/login/ok")
        self.assertTrue(refused.startswith("HTTP/2 429"), refused[:300])
        with RawClient(self.port) as c:  # the same limit for HTTP/1.1 clients
            self.assertEqual(c.request("GET", "/login/ok").status, 429)
        self.assertEqual([r.target for r in self.upstream.requests], ["/login/ok"] * 3 + ["/login/bad"] * 2)

    def test_sluices_own_502_on_a_stream_is_charged_before_it_goes(self):
        # count: {statuses: ["5xx"]} with room for one: the upstream closes without an
        # answer, the stream gets sluice's 502, charged before it went out: the next is refused.
        limit = {"name": "errors", "algorithm": "fixed_window", "limit": 1, "window": "1h", "key": [],
                 "count": {"statuses": ["5xx"]}}
        self.start([limited_route("flaky", [limit])],
                   upstream=by_path({"/flaky/gone": close_without_answer(), "/flaky/ok": respond(200, b"ok")}))
        self.assertTrue(self.curl("/flaky/ok").startswith("HTTP/2 200"))
        self.assertTrue(self.curl("/flaky/gone").startswith("HTTP/2 502"))
        refused = self.curl("/flaky/ok")
        self.assertTrue(refused.startswith("HTTP/2 429"), refused[:300])

    def test_bodies_cross_both_ways_beyond_the_windows(self):
        self.start(upstream=echo_body())
        c = self.client()
        body = pattern_bytes(300_000)
        status, head, got = c.request("POST", "/upload", body=body)
        self.assertEqual(status, 200)
        self.assertEqual(got, body)
        self.assertEqual(head["x-body-sha256"], sha256_hex(body))
        req = self.upstream.last()
        self.assertTrue(req.chunked)  # no content-length: framed chunked by sluice
        # With content-length, the upstream gets it.
        status, _, got = c.request("POST", "/upload", headers=[("content-length", "5")], body=b"hello")
        self.assertEqual((status, got), (200, b"hello"))
        self.assertEqual(self.upstream.last().header("content-length"), "5")
        # Many streams on one connection, one after the other.
        for i in range(20):
            self.assertEqual(c.request("GET", f"/n{i}")[0], 200)

    def test_a_final_response_the_upstream_sends_before_taking_the_body_reaches_the_stream(self):
        self.upstream = EarlyAnswerUpstream(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain\r\n"
                                            b"Content-Length: 15\r\n\r\nupload too big!")
        self.addCleanup(self.upstream.close)
        self.port = self.start_instance()
        c = self.client()
        for headers in ([], [("content-length", str(4 << 20))]):
            with self.subTest(headers=headers):
                status, head, got = c.request("POST", "/upload", headers=headers, body=pattern_bytes(4 << 20))
                self.assertEqual(status, 413, got)
                self.assertEqual(got, b"upload too big!")
        # The connection carries on.
        self.assertEqual(c.request("GET", "/after")[0], 413)
        self.assertEqual(len(self.upstream.heads), 3)

    def test_a_body_sent_after_an_answer_to_head_reaches_no_other_stream(self):
        # As over HTTP/1.1 (test_keepalive): the upstream answers HEAD, then sends a whole
        # response as a body in a later write; the connection is not reused for another
        # client's stream.
        fake = b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nSet-Cookie: session=attacker\r\n\r\nFAKE-FOR-VICTIM"
        self.start(upstream=head_then_late_body(fake), server={"workers": 1})
        attacker, victim = self.client(), self.client()
        for i in range(10):
            self.assertEqual(attacker.request("HEAD", f"/upload/{i}")[0], 200)
            status, head, got = victim.request("GET", f"/account/{i}")
            self.assertEqual((status, got), (200, f"/account/{i}".encode()), head)
            self.assertNotIn("set-cookie", head)

    def test_an_answer_of_sluices_own_before_the_body_ends_reaches_the_stream_before_its_reset(self):
        # 413 over max_body_bytes while the body is still coming: the answer, then RST_STREAM
        # NO_ERROR (a reset sent first made the client drop the answer unseen).
        self.start(upstream=echo_body(), server={"max_body_bytes": 100_000})
        c = self.client()
        for headers in ([], [("content-length", str(1 << 20))]):
            with self.subTest(headers=headers):
                status, head, got = c.request("POST", "/upload", headers=headers, body=pattern_bytes(1 << 20))
                self.assertEqual(status, 413, got)
                self.assertIn(b"max_body_bytes", got)
                self.assertEqual(head.get("content-type"), "application/problem+json")
        self.assertEqual(c.request("GET", "/after")[0], 200)

    def test_a_body_nobody_reads_is_not_read_for_ever(self):
        # The answer (a 429 with its body) waits behind the client's own shut window, so the
        # stream is not reset after it; what the client keeps sending is read and dropped up
        # to max_body_bytes, then the stream is reset (CANCEL).
        self.start([limited_route("one", [token_bucket("one", 1, "1h", 1)], path_prefix="/")],
                   server={"max_body_bytes": 100_000})
        self.assertEqual(self.client().request("GET", "/first")[0], 200)  # the one token
        c = self.client()
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        c.flush()
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "app.test"),
                                  (":path", "/upload")])
        c.flush()
        sent, reset = 0, None
        piece = b"x" * 16384
        while reset is None and sent < 2_000_000:
            if c.conn.local_flow_control_window(sid) >= len(piece):
                c.conn.send_data(sid, piece)
                c.flush()
                sent += len(piece)
                continue
            events = c.pump()
            self.assertIsNotNone(events, "connection closed")
            reset = next((e for e in events if isinstance(e, h2.events.StreamReset) and e.stream_id == sid), None)
        self.assertIsNotNone(reset, f"still read after {sent} bytes")
        self.assertEqual(reset.error_code, 8)  # CANCEL
        self.assertLess(sent, 400_000)
        self.assertEqual(len(self.upstream.requests), 1)

    def test_rapid_reset_ends_the_connection(self):
        self.start(server={"http2": {"max_resets_per_second": 20}}, admin=True)
        self.assertEqual(self.abuse_counted(), {"rapid_reset": 0, "continuation_flood": 0, "control_flood": 0})
        c = self.client()
        for _ in range(100):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                                      (":path", "/slow")], end_stream=True)
            c.conn.reset_stream(sid)
        c.flush()
        self.assert_ended_for_abuse(c, "rapid_reset")

    def test_continuation_flood_ends_the_connection_and_is_counted(self):
        # One HEADERS without END_HEADERS, then CONTINUATION frames of one byte each (a literal
        # header's name spread thin): past 8 the connection ends with GOAWAY ENHANCE_YOUR_CALM.
        self.start(admin=True)
        sock = socket.create_connection((LOOPBACK, self.port), timeout=10)
        self.addCleanup(sock.close)
        block = b"\x82\x86\x84\x00\x7f" + b"x" * 100  # ...then a literal name of 100+ bytes
        flood = [frame(9, 0, 1, block[i:i + 1]) for i in range(4, 40)]
        sock.sendall(PREFACE + frame(1, 0, 1, block[:4]) + b"".join(flood))
        frames = frames_until_close(sock)
        goaways = [payload for kind, payload in frames if kind == 7]
        self.assertEqual(len(goaways), 1, frames)
        self.assertEqual(int.from_bytes(goaways[0][4:8], "big"), 11)  # ENHANCE_YOUR_CALM
        self.sluice.wait_log(r"HTTP/2 connection ended with GOAWAY ENHANCE_YOUR_CALM: continuation_flood")
        self.assertEqual(self.abuse_counted(), {"rapid_reset": 0, "continuation_flood": 1, "control_flood": 0})
        self.assertEqual(self.upstream.requests, [])
        self.assertTrue(self.curl("/ok").startswith("HTTP/2 200"))

    def test_a_header_list_past_max_header_list_bytes_is_431(self):
        self.start(server={"http2": {"max_header_list_bytes": 4096}})
        c = self.client()
        status, head, body = c.request("GET", "/big", headers=[("x-big", "v" * 5000)])
        self.assertEqual(status, 431)
        self.assertIn("max_header_list_bytes", body.decode())
        # The connection goes on; a request within the bound is forwarded.
        self.assertEqual(c.request("GET", "/small", headers=[("x-small", "v" * 1000)])[0], 200)
        self.assertEqual([r.target for r in self.upstream.requests], ["/small"])

    def test_ping_flood_ends_the_connection_and_is_counted(self):
        self.start(server={"http2": {"max_control_frames_per_second": 50}}, admin=True)
        c = self.client()
        for i in range(200):
            c.conn.ping(i.to_bytes(8, "big"))
        c.flush()
        self.assert_ended_for_abuse(c, "control_flood")

    def test_sigterm_sends_goaway_and_finishes_the_streams_under_way(self):
        # Graceful stop: GOAWAY NO_ERROR naming the last stream taken, the stream under way
        # gets its whole answer, then the connection closes and sluice exits 0. The client is
        # nghttp (Python's h2 stops reading a connection once it has a GOAWAY).
        self.start(upstream=by_path({"/slow": delayed(1.5, respond(200, b"slow but complete"))},
                                    default=respond(200, b"fast")),
                   server={"shutdown_timeout": "10s"})
        client = subprocess.Popen(["nghttp", "-v", f"http://{LOOPBACK}:{self.port}/slow"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(client.kill)
        wait_until(lambda: any(r.target == "/slow" for r in self.upstream.requests), 5,
                   message="the slow request at the upstream")
        self.sluice.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=15)
        self.assertEqual(client.returncode, 0, out)
        goaway = re.search(r"recv GOAWAY frame .*\n.*last_stream_id=(\d+), error_code=(\w+)", out)
        self.assertIsNotNone(goaway, out)
        self.assertGreaterEqual(int(goaway.group(1)), 1)
        self.assertEqual(goaway.group(2), "NO_ERROR")
        self.assertIn(":status: 200", out)
        self.assertIn("slow but complete", out)
        # The GOAWAY came before the answer: the stream was under way when sluice stopped.
        self.assertLess(out.index("recv GOAWAY"), out.index(":status: 200"), out)
        self.assertEqual(self.sluice.wait(10), 0, self.sluice.log_text())

    def test_a_stream_cut_at_shutdown_timeout_has_its_access_line(self):
        self.start(upstream=by_path({"/slow": delayed(8.0, respond(200, b"far too late"))}),
                   server={"shutdown_timeout": "1s"})
        client = subprocess.Popen(["nghttp", f"http://{LOOPBACK}:{self.port}/slow"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(client.kill)
        wait_until(lambda: any(r.target == "/slow" for r in self.upstream.requests), 5,
                   message="the slow request at the upstream")
        self.sluice.send_signal(signal.SIGTERM)
        self.assertEqual(self.sluice.wait(6), 0, self.sluice.log_text())
        entry = self.sluice.wait_access(target="/slow", timeout=1)
        self.assertEqual(entry["status"], "503", entry["line"])

    def test_sigterm_answers_a_stream_held_past_the_end_with_503(self):
        # A leaky bucket holds the second stream 10 s; the stop ends in 2 s: the stream gets
        # 503 with Retry-After at once (as over HTTP/1.1), not a close without an answer.
        self.start(routes=[limited_route("drip", [leaky_bucket("drip", 1, "10s", 5)], path_prefix="/")],
                   server={"shutdown_timeout": "2s"}, admin=True)
        client = subprocess.Popen(["nghttp", "-v", f"http://{LOOPBACK}:{self.port}/first",
                                   f"http://{LOOPBACK}:{self.port}/held"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(client.kill)
        wait_until(lambda: any(r.target == "/first" for r in self.upstream.requests), 5,
                   message="the first request at the upstream")
        wait_until(lambda: Metrics.fetch(self.admin_port).get("sluice_requests_waiting") == 1, 5,
                   message="the second stream held")
        self.sluice.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=15)
        self.assertEqual(client.returncode, 0, out)
        self.assertIn(":status: 503", out)
        self.assertIn("retry-after: 1", out)
        self.assertEqual([r.target for r in self.upstream.requests], ["/first"])
        self.assertEqual(self.sluice.wait(10), 0, self.sluice.log_text())
        self.sluice.wait_access(target="/held", status="503")

    def test_a_request_head_left_open_ends_the_connection_after_header_timeout(self):
        # HEADERS without END_HEADERS, then nothing: the connection is held (no other frame may
        # come until the block ends), so after header_timeout (not idle_timeout) it ends with
        # GOAWAY NO_ERROR, and nothing reached the upstream.
        self.start(server={"header_timeout": "1s", "idle_timeout": "60s"})
        sock = socket.create_connection((LOOPBACK, self.port), timeout=10)
        self.addCleanup(sock.close)
        headers = frame(1, 0, 1, b"\x82\x86\x84")  # :method GET, :scheme http, :path /; no END_HEADERS
        started = time.monotonic()
        sock.sendall(PREFACE + headers)
        frames = frames_until_close(sock)
        elapsed = time.monotonic() - started
        self.assertGreater(elapsed, 0.8)
        self.assertLess(elapsed, 10, "held until idle_timeout")
        goaways = [payload for kind, payload in frames if kind == 7]
        self.assertEqual(len(goaways), 1, frames)
        self.assertEqual(int.from_bytes(goaways[0][4:8], "big"), 0)  # NO_ERROR
        self.sluice.wait_log(r"HTTP/2 request head not complete within header_timeout")
        self.assertEqual(len(self.upstream.requests), 0)
        # Other connections are served.
        self.assertTrue(self.curl("/ok").startswith("HTTP/2 200"))

    def test_smuggling_fields_never_reach_the_upstream(self):
        self.start()
        for bad in ([("transfer-encoding", "chunked")], [("connection", "keep-alive")],
                    [("content-length", "3"), ("content-length", "4")]):
            c = self.client(validate=False)
            status, _, _ = c.request("POST", "/s", headers=bad, body=b"abc")
            self.assertEqual(status[0], "reset", bad)
        # A method not in upper case is refused (400): an upstream may read `post` as POST.
        c = self.client(validate=False)
        status, _, _ = c.request("post", "/m", body=b"abc")
        self.assertEqual(status, 400)
        # Host naming another host than :authority is refused (400).
        c = self.client(validate=False)
        status, _, _ = c.request("GET", "/h", headers=[("host", "evil.test")])
        self.assertEqual(status, 400)
        self.assertEqual(self.upstream.requests, [])

    def test_limited_grpc_call_is_resource_exhausted(self):
        self.start([limited_route("pkg.Svc", [token_bucket("calls", 1, "1m", 1)], path_prefix="/pkg.Svc/")])
        with grpc.insecure_channel(f"{LOOPBACK}:{self.port}") as channel:
            call = channel.unary_unary("/pkg.Svc/Call")
            # The first goes to the (HTTP/1.1, not gRPC) upstream: some error, not ours.
            with self.assertRaises(grpc.RpcError) as first:
                call(b"", timeout=5)
            self.assertNotEqual(first.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            with self.assertRaises(grpc.RpcError) as second:
                call(b"", timeout=5)
            self.assertEqual(second.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("rate limit 'calls'", second.exception.details())
        self.assertEqual(len(self.upstream.requests), 1)
        self.sluice.wait_access(status="429", route="pkg.Svc")

    def test_twenty_streams_at_once_two_instances_one_limit_across_http1_and_http2(self):
        # burst 10 per client on one Redis; instance B serves 4 over HTTP/1.1 first, then 20
        # streams open at once on one HTTP/2 connection to instance A: exactly 6 forwarded.
        redis = self.start_redis()
        routes = [limited_route("api", [token_bucket("per_client", 10, "1h", 10)])]
        port_a = self.start(routes, store=redis_store(redis))
        port_b = self.start_instance(routes, store=redis_store(redis))
        with RawClient(port_b) as c:
            for i in range(4):
                self.assertEqual(c.request("GET", f"/api/h1-{i}").status, 200)
        answers = self.client(port=port_a).at_once([f"/api/h2-{i}" for i in range(20)])
        statuses = [status for status, _ in answers]
        self.assertEqual((statuses.count(200), statuses.count(429)), (6, 14), statuses)
        for status, head in answers:
            if status == 429:
                self.assertEqual(head["ratelimit-policy"], '"per_client";q=10;w=3600')
        self.assertEqual(len(self.upstream.requests), 10)
        # The bucket is empty for both protocols on both instances.
        with RawClient(port_b) as c:
            self.assertEqual(c.request("GET", "/api/h1-last").status, 429)
        self.assertEqual(self.client(port=port_b).request("GET", "/api/h2-last")[0], 429)
        self.assertEqual(len(self.upstream.requests), 10)

    def test_exempt_streams_skip_the_limits(self):
        self.start([limited_route("api", [token_bucket("per_client", 1, "1h", 1)])],
                   extra={"exempt": {"client_ips": ["127.0.0.0/8"]}})
        answers = self.client().at_once(["/api/x"] * 5)
        self.assertEqual([status for status, _ in answers], [200] * 5)
        self.assertFalse(any("ratelimit" in head for _, head in answers))
        wait_until(lambda: [e["decision"] for e in self.sluice.access_entries()] == ["exempt"] * 5, 5.0,
                   message="5 exempt access lines")

    def test_concurrency_slots_and_the_leaky_bucket_hold_streams(self):
        from test_concurrency import Gauge, concurrency
        gauge = Gauge(1.0)
        self.start([limited_route("slow", [concurrency("inflight", 2)]),
                    limited_route("shaped", [leaky_bucket("shape", 10, "1s", 5, key=[])])],
                   upstream=by_path({"/slow": gauge}, default=echo()))
        c = self.client()
        # 5 streams at once on a route with 2 slots: 2 forwarded (held 1 s), 3 refused at once.
        statuses = [status for status, _ in c.at_once(["/slow"] * 5)]
        self.assertEqual((statuses.count(200), statuses.count(429)), (2, 3), statuses)
        self.assertEqual(gauge.most, 2)
        # A leaky bucket of 10/s holding 5: 6 streams at once, the first goes, 4 are delayed
        # (each 100 ms after the one before), the 6th does not fit.
        started = time.monotonic()
        statuses = [status for status, _ in c.at_once([f"/shaped/{i}" for i in range(6)])]
        elapsed = time.monotonic() - started
        self.assertEqual((statuses.count(200), statuses.count(429)), (5, 1), statuses)
        self.assertGreaterEqual(elapsed, 0.35)
        # A stream's access line is written after its response has gone: the client can have
        # all six answers before the last line is there, so the six lines are waited for.
        def shaped_lines():
            entries = [e for e in self.sluice.access_entries() if e.get("route") == "shaped"]
            return entries if len(entries) >= 6 else None
        entries = wait_until(shaped_lines, 5.0, message="6 access lines of route shaped")
        self.assertTrue(all(e["version"] == "HTTP/2.0" for e in entries), entries)
        decisions = sorted(e["decision"] for e in entries)
        self.assertEqual(decisions, ["allowed"] + ["delayed"] * 4 + ["limited"])

    def test_grpc_call_is_unavailable_when_the_store_fails_with_on_error_deny(self):
        dead = f"{LOOPBACK}:{free_port()}"  # nothing listens there
        self.start([limited_route("pkg.Svc", [token_bucket("calls", 100, "1m", 100)], path_prefix="/pkg.Svc/")],
                   store=redis_store(dead, timeout="200ms", on_error="deny"), store_up=False)
        with grpc.insecure_channel(f"{LOOPBACK}:{self.port}") as channel:
            with self.assertRaises(grpc.RpcError) as refused:
                channel.unary_unary("/pkg.Svc/Call")(b"", timeout=5)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)
        # sluice's own answer (the channel itself was up), not a transport failure.
        self.assertEqual(refused.exception.details(), "the rate-limit store is unavailable")
        self.sluice.wait_access(status="503", route="pkg.Svc", version="HTTP/2.0")
        self.assertEqual(self.upstream.requests, [])

    def test_an_idle_connection_is_closed_after_idle_timeout(self):
        self.start(server={"idle_timeout": "1s"})
        c = self.client()
        self.assertEqual(c.request("GET", "/one")[0], 200)
        started = time.monotonic()
        goaway = self.wait_goaway(c)
        elapsed = time.monotonic() - started
        self.assertIsNotNone(goaway)
        self.assertEqual(goaway.error_code, 0)  # NO_ERROR
        self.assertGreaterEqual(elapsed, 0.8)
        self.assertLess(elapsed, 5)
        # A stream under way is not idle: a 2 s answer outlives the 1 s idle timeout.
        self.upstream.behaviour = by_path({"/slow": delayed(2.0, respond(200, b"late"))}, default=echo())
        status, _, body = self.client().request("GET", "/slow")
        self.assertEqual((status, body), (200, b"late"))

    def test_no_rfc7540_priorities_are_kept_and_priority_frames_are_still_read(self):
        # The server's SETTINGS say SETTINGS_NO_RFC7540_PRIORITIES = 1 (RFC 9218): nghttp2
        # keeps no priority tree (nor closed streams for it). A client that still sends
        # PRIORITY frames and prioritised HEADERS is served as any other.
        self.start()
        c = self.client()
        settings = {}
        while 0x9 not in settings:
            events = c.pump()
            self.assertIsNotNone(events, "closed before its SETTINGS")
            for e in events:
                if isinstance(e, h2.events.RemoteSettingsChanged):
                    settings.update({int(k): v.new_value for k, v in e.changed_settings.items()})
        self.assertEqual(settings[0x9], 1)
        c.conn.prioritize(1, weight=200, depends_on=0, exclusive=False)
        c.conn.prioritize(3, weight=16, depends_on=1, exclusive=True)
        c.flush()
        self.assertEqual(c.request("GET", "/first")[0], 200)
        self.assertEqual(c.request("GET", "/second", headers=[("priority", "u=1")])[0], 200)

    def test_a_ping_on_a_quiet_connection_is_answered_at_once(self):
        # Frames that ask for an answer of the connection itself (PING, SETTINGS) wake its
        # writer; a request's frames alone do not (its stream answers). Nothing else is under
        # way here to write the ACK along with.
        self.start()
        c = self.client()
        self.assertEqual(c.request("GET", "/warm")[0], 200)
        for n in range(3):
            c.conn.ping(b"sluice-%d" % n)
            c.flush()
            acked = c.wait_for(h2.events.PingAckReceived, "the PING's ACK")
            self.assertEqual(acked.ping_data, b"sluice-%d" % n)
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100000})
        c.flush()
        c.wait_for(h2.events.SettingsAcknowledged, "the SETTINGS' ACK")
        self.assertEqual(c.request("GET", "/after")[0], 200)

    def test_activity_keeps_a_connection_open_past_idle_timeout(self):
        # The idle deadline moves with every frame read: requests every 0.4 s for 2.4 s keep a
        # connection with a 1 s idle_timeout open; after the last one it ends about 1 s later.
        self.start(server={"idle_timeout": "1s"})
        c = self.client()
        for i in range(7):
            self.assertEqual(c.request("GET", f"/busy/{i}")[0], 200, f"request {i}")
            time.sleep(0.4)
        last = time.monotonic() - 0.4
        goaway = self.wait_goaway(c)
        self.assertIsNotNone(goaway)
        self.assertEqual(goaway.error_code, 0)  # NO_ERROR
        self.assertGreaterEqual(time.monotonic() - last, 0.8)

    def test_streams_of_one_connection_time_out_upstream_each_on_its_own_deadline(self):
        # upstream timeout 1 s. On one connection: /slow (the upstream answers after 3 s) is
        # 504 after about 1 s, while /fast streams sent beside it and after it are answered;
        # a /slow sent 0.6 s later times out about 1 s after its own start, not the first's.
        self.start(upstream=by_path({"/slow": delayed(3.0, respond(200, b"late"))}, default=echo()),
                   extra={"upstreams": {"app": {"timeout": "1s"}}})
        c = self.client()
        started = time.monotonic()
        first = c.send("GET", "/slow")
        fast = c.send("GET", "/fast/1")
        time.sleep(0.6)
        second = c.send("GET", "/slow")
        second_sent = time.monotonic()
        later_fast = c.send("GET", "/fast/2")
        heads, ended = c.wait_streams([first, fast, second, later_fast])
        status = {sid: int(head[":status"]) for sid, head in heads.items()}
        self.assertEqual(status[fast], 200)
        self.assertEqual(status[later_fast], 200)
        self.assertEqual(status[first], 504)
        self.assertEqual(status[second], 504)
        self.assertGreaterEqual(ended[first] - started, 0.9)
        self.assertLess(ended[first] - started, 2.5)
        self.assertGreaterEqual(ended[second] - second_sent, 0.9, "timed out by the first stream's deadline")
        self.assertLess(ended[second] - second_sent, 2.5)
        self.assertEqual(c.request("GET", "/fast/3")[0], 200)  # the connection goes on

    def test_a_reload_keeps_the_connection_and_its_next_streams_use_the_new_limits(self):
        self.start([limited_route("api", None)])
        c = self.client()
        self.assertEqual(c.request("GET", "/api/before")[0], 200)
        self.config["routes"] = [limited_route("api", [token_bucket("per_client", 1, "1h", 1)])]
        self.sluice.write_config(self.config)
        self.sluice.send_signal(signal.SIGHUP)
        self.sluice.wait_log(r"reloaded .*: 1 routes, 1 upstreams")
        # The same connection: its next streams go through the new route's limit.
        self.assertEqual(c.request("GET", "/api/after")[0], 200)
        status, head, _ = c.request("GET", "/api/refused")
        self.assertEqual(status, 429)
        self.assertEqual(head["ratelimit-policy"], '"per_client";q=1;w=3600')
        self.assertEqual([r.target for r in self.upstream.requests], ["/api/before", "/api/after"])

    def test_a_client_that_does_not_read_pins_no_memory(self):
        # Three streams of 32 MiB answers and a client that opens no window: sluice holds at
        # most 64 KiB per stream and stops reading its upstream, whose sends then stall.
        upstream = CountingBody(32 << 20)
        self.start(upstream=upstream)
        c = self.client()
        before = rss_kib(self.sluice.proc.pid)
        for i in range(3):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "app.test"),
                                      (":path", f"/big{i}")], end_stream=True)
        c.flush()
        upstream.wait_stalled()
        self.assertLess(upstream.total(), 3 * (32 << 20) // 2, "sluice kept reading its upstream")
        grown = rss_kib(self.sluice.proc.pid) - before
        self.assertLess(grown, 8 * 1024, f"RSS grew by {grown} KiB")
        # Once the client reads, each answer arrives whole.
        c.sock.settimeout(20)
        sizes, ended = {}, set()
        while len(ended) < 3:
            events = c.pump()
            if events is None:
                raise AssertionError("connection closed")
            for e in events:
                if isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended.add(e.stream_id)
                    self.assertIsInstance(e, h2.events.StreamEnded)
                if isinstance(e, h2.events.DataReceived):
                    sizes[e.stream_id] = sizes.get(e.stream_id, 0) + len(e.data)
                    c.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            c.flush()
        self.assertEqual(sorted(sizes.values()), [32 << 20] * 3)


class CountingBody:
    """Answers every request with `size` bytes (Content-Length) and counts what it got to send."""

    def __init__(self, size):
        self.size = size
        self.sent = {}
        self.lock = threading.Lock()

    def __call__(self, req, conn):
        conn.send(http_response_bytes(200, [("Content-Length", str(self.size))], b"", add_length=False,
                                      head_only=True))
        piece = b"z" * 65536
        for _ in range(self.size // len(piece)):
            conn.send(piece)
            with self.lock:
                self.sent[req.target] = self.sent.get(req.target, 0) + len(piece)

    def total(self):
        with self.lock:
            return sum(self.sent.values())

    def wait_stalled(self, quiet=0.5, timeout=20):
        """Waits until every stream's upstream has sent something and no byte more was sent
        for `quiet` seconds."""
        last = [self.total(), time.monotonic()]

        def stalled():
            now = self.total()
            if now != last[0]:
                last[:] = [now, time.monotonic()]
                return False
            with self.lock:
                started = len(self.sent) == 3
            return started and time.monotonic() - last[1] >= quiet
        wait_until(stalled, timeout, message="the upstream's sends to stall")


if __name__ == "__main__":
    unittest.main()
