"""A cost the response reports (`cost: {response_header: NAME | response_trailer: NAME,
reserve: N}`): the reservation is taken when the request is admitted; what the upstream reports
in the head, or in the trailer at the end of a chunked stream (server-sent events), settles the
difference before the client has the head (or the body's end): charged past the reservation
(a debt the next requests wait out) or given back. Exact across instances.

Real processes: two sluice instances sharing one redis-server (or one on the memory store), an
upstream that reports the cost each request asks it to (X-Report: N, "none", "junk").
"""

import random
import signal
import socket
import threading
import time

from admin_api import Metrics
from harness import (LOOPBACK, SluiceTestCase, decide_calls, limited_route, redis_store, retry_after, wait_until,
                     window_units)

RESERVE = 10
INTERVAL_US = 86_400 * 1_000_000  # the buckets here refill one token a day: none while a test runs


def reporting(field="X-Tokens-Used"):
    """The upstream: the cost the request asks for (X-Report) in the head's `field`; "none":
    no such field; "junk": a value that is not a number."""
    def answer(req, conn):
        report = req.header("x-report")
        headers = [("Content-Type", "application/json")]
        if report == "junk":
            headers.append((field, "12 tokens"))
        elif report not in (None, "none"):
            headers.append((field, report))
        conn.send_response(200, headers=headers, body=b'{"choices": []}')
    return answer


def held_until(release):
    """reporting(), but a request with X-Wait is answered only once `release` is set."""
    answer = reporting()

    def upstream(req, conn):
        if req.header("x-wait"):
            release.wait(5)
        answer(req, conn)
    return upstream


def event_stream(events=3, release=None):
    """Server-sent events, chunked, and the cost the request asks for (X-Report) in the
    trailer after the last one. `release` (a threading.Event): the stream waits for it after
    the first event, then sends the rest a little apart."""
    def answer(req, conn):
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                  b"Trailer: X-Tokens-Used\r\n\r\n")
        for i in range(events):
            data = f"data: {{\"token\": {i}}}\n\n".encode()
            conn.send(b"%x\r\n%s\r\n" % (len(data), data))
            if i == 0 and release is not None:
                release.wait(5)
            if release is not None:
                conn.sleep(0.2)
        report = req.header("x-report")
        trailer = b"" if report in (None, "none") else b"X-Tokens-Used: %s\r\n" % report.encode()
        conn.send(b"0\r\n" + trailer + b"\r\n")
    return answer


def tokens_limits(where="response_header"):
    """The same cost in a token bucket, a sliding window and a fixed window, per client."""
    cost = {where: "X-Tokens-Used", "reserve": RESERVE}
    return [
        {"name": "tokens", "algorithm": "token_bucket", "rate": 1, "per": "1d", "burst": 3650, "cost": cost},
        {"name": "tokens_window", "algorithm": "sliding_window", "limit": 10_000, "window": "1h", "cost": cost},
        {"name": "tokens_fixed", "algorithm": "fixed_window", "limit": 1_000_000, "window": "365d", "cost": cost},
    ]


class ResponseCostTest(SluiceTestCase):
    def ask(self, k, report, path="/v1/chat"):
        """One request through instance k % count, reporting `report`."""
        c = self.client(self.instances[k % len(self.instances)].port)
        r = c.request("POST", path, headers=[("X-Report", str(report))], body=b"{}")
        c.close()
        return r

    def used(self, limit):
        """What Redis holds for the client's `limit`: tokens taken (the bucket's tat ahead of
        Redis TIME, in intervals), units in the window, the fixed window's count."""
        keys = [k for k in self.redis.command("KEYS", "sluice:*") if k.endswith(":" + limit)]
        self.assertEqual(len(keys), 1, keys)
        key = keys[0]
        if limit == "tokens":
            seconds, micros = self.redis.command("TIME")
            now = int(seconds) * 1_000_000 + int(micros)
            return round((int(self.redis.command("GET", key)) - now) / INTERVAL_US)
        if limit in ("tokens_window", "answered"):
            return window_units(self.redis, key)
        return int(self.redis.command("GET", key).split(":")[1])

    def metric(self, name, **labels):
        return sum(Metrics.fetch(port).get(name, **labels) or 0 for port in self.admin_ports)

    def test_costs_the_heads_report_are_settled_exactly_across_two_instances(self):
        self.redis = self.start_redis()
        self.start_instances(2, reporting(), [limited_route("llm", tokens_limits(), path_prefix="/v1")],
                             redis_store(self.redis))
        rng = random.Random(28)
        reports = []
        for k in range(200):
            report = "none" if k % 17 == 5 else "junk" if k % 23 == 7 else rng.randint(0, 3 * RESERVE)
            reports.append(report)
            r = self.ask(k, report)
            self.assertEqual(r.status, 200, f"request {k}")
            if k == 0:
                # Each limit reports what is left after the reservation.
                self.assertIn('"tokens";r=3640;', r.header("RateLimit", ""))
        numbers = [n for n in reports if isinstance(n, int)]
        # Settled at what was reported, or at the reservation where nothing readable was.
        expected = sum(numbers) + RESERVE * (len(reports) - len(numbers))
        for limit in ("tokens", "tokens_window", "tokens_fixed"):
            self.assertEqual(self.used(limit), expected, limit)
            self.assertEqual(self.metric("sluice_ratelimit_reported_cost_total", route="llm", limit=limit),
                             sum(numbers), limit)
            self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit=limit,
                                         result="charged"), sum(1 for n in numbers if n > RESERVE), limit)
            self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit=limit,
                                         result="refunded"), sum(1 for n in numbers if n < RESERVE), limit)
            self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit=limit,
                                         result="failed"), 0, limit)
        self.assertTrue(any("the response's x-tokens-used is not a whole number: settled at the reservation"
                            in s.log_text() for s in self.instances))
        self.assertEqual(len(self.up.requests), 200)

    def assert_debt_is_waited_out(self):
        """A response that reports far more than the reservation leaves a debt: the next
        request is refused until it is repaid (Retry-After counts the whole debt), and never
        reaches the upstream."""
        self.assertEqual(self.ask(0, 300).status, 200)
        refused = self.ask(1, 5)
        self.assertEqual(refused.status, 429)
        # 300 taken of a bucket of 100 refilled at 100 a minute: 200 owed, and 10 more for the
        # reservation of the refused request: 126 s.
        self.assertIn(retry_after(refused), (125, 126))
        self.assertEqual(len(self.up.requests), 1)

    def test_a_debt_past_the_bucket_is_waited_out_on_redis(self):
        self.redis = self.start_redis()
        limit = {"name": "tokens", "algorithm": "token_bucket", "rate": 100, "per": "1m", "burst": 100,
                 "cost": {"response_header": "X-Tokens-Used", "reserve": RESERVE}}
        self.start_instances(2, reporting(), [limited_route("llm", [limit], path_prefix="/v1")],
                             redis_store(self.redis))
        self.assert_debt_is_waited_out()

    def test_a_debt_past_the_bucket_is_waited_out_on_the_memory_store(self):
        limit = {"name": "tokens", "algorithm": "token_bucket", "rate": 100, "per": "1m", "burst": 100,
                 "cost": {"response_header": "X-Tokens-Used", "reserve": RESERVE}}
        self.start_instances(1, reporting(), [limited_route("llm", [limit], path_prefix="/v1")],
                             {"type": "memory"})
        self.assert_debt_is_waited_out()
        self.assertEqual(self.metric("sluice_ratelimit_reported_cost_total", route="llm", limit="tokens"), 300)

    def test_a_reservation_that_does_not_fit_is_refused_until_a_settle_gives_room(self):
        # A window of 25 with reservations of 10: what the responses give back makes room for
        # the next requests, on every instance, even one that has just refused the client.
        release = threading.Event()
        upstream = held_until(release)

        self.redis = self.start_redis()
        limit = {"name": "tokens_window", "algorithm": "sliding_window", "limit": 25, "window": "1h",
                 "cost": {"response_header": "X-Tokens-Used", "reserve": RESERVE}}
        self.start_instances(2, upstream, [limited_route("llm", [limit], path_prefix="/v1")],
                             redis_store(self.redis))
        # Three reservations of 10 would not fit 25; each gives 8 back before the next.
        for k in range(3):
            self.assertEqual(self.ask(k, 2).status, 200, f"request {k}")
        self.assertEqual(self.used("tokens_window"), 6)
        # One in flight holds its reservation (16); the next does not fit and is refused
        # before the upstream, until the one in flight reports 0 and gives its 10 back.
        slow = self.client(self.instances[1].port)
        slow.send(b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nX-Wait: 1\r\nX-Report: 0\r\nContent-Length: 0\r\n\r\n")
        wait_until(lambda: len(self.up.requests) == 4, 5.0, message="the slow request upstream")
        self.assertEqual(self.ask(0, 2).status, 429)
        self.assertEqual(len(self.up.requests), 4)
        release.set()
        self.assertEqual(slow.read_response().status, 200)
        self.assertEqual(self.used("tokens_window"), 6)
        self.assertEqual(self.ask(0, 2).status, 200, "the instance that refused asks the store again")
        self.assertEqual(self.used("tokens_window"), 8)

    def test_a_request_admitted_before_a_reload_settles_once_after_it(self):
        # A reload between the reservation and the report: the request settles under the
        # limits it was admitted by (its configuration's), on the same keys, exactly once.
        release = threading.Event()
        upstream = held_until(release)

        self.redis = self.start_redis()
        self.start_instances(1, upstream, [limited_route("llm", tokens_limits(), path_prefix="/v1")],
                             redis_store(self.redis))
        sluice = self.instances[0]
        slow = self.client(sluice.port)
        slow.send(b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nX-Wait: 1\r\nX-Report: 3\r\nContent-Length: 0\r\n\r\n")
        wait_until(lambda: len(self.up.requests) == 1, 5.0, message="the slow request upstream")
        self.assertIn("limit: 10000", sluice.config_text)
        sluice.write_config(sluice.config_text.replace("limit: 10000", "limit: 20000"))
        sluice.send_signal(signal.SIGHUP)
        sluice.wait_log(r"reloaded .*: 1 routes, 1 upstreams")
        release.set()
        self.assertEqual(slow.read_response().status, 200)
        self.assertEqual(self.ask(0, 25).status, 200)
        for limit in ("tokens", "tokens_window", "tokens_fixed"):
            self.assertEqual(self.used(limit), 3 + 25, limit)

    def test_a_failed_settle_is_logged_and_counted_and_the_response_still_goes(self):
        self.redis = self.start_redis()
        limit = {"name": "tokens_window", "algorithm": "sliding_window", "limit": 100, "window": "1h",
                 "cost": {"response_header": "X-Tokens-Used", "reserve": RESERVE}}
        answer = reporting()
        self.start_instances(1, answer, [limited_route("llm", [limit], path_prefix="/v1")],
                             redis_store(self.redis, timeout="200ms"))
        self.assertEqual(self.ask(0, 4).status, 200)
        # Redis stops answering between the reservation and the settle: the response still
        # reaches the client (after the store's deadline), and the settle is counted as failed
        # and logged. "Failed" means not confirmed: Redis held the call (CLIENT PAUSE) and runs
        # it once it answers again, so the report is settled all the same, once.
        def pause_then_answer(req, conn):
            self.redis.pause(1500)
            answer(req, conn)
        self.up.behaviour = pause_then_answer
        r = self.ask(0, 30)
        self.assertEqual(r.status, 200)
        self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit="tokens_window",
                                     result="failed"), 1)
        self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit="tokens_window",
                                     result="refunded"), 1)
        self.instances[0].wait_log(r"route llm: settling the cost a response reported failed")
        wait_until(lambda: self.used("tokens_window") == 4 + 30, 5.0, message="the late settle")

    def start_counted_and_reported(self, timeout="2s"):
        """One instance, a route with a limit whose response reports its cost and one that
        counts the responses answered 200."""
        self.redis = self.start_redis()
        limits = [{"name": "tokens_window", "algorithm": "sliding_window", "limit": 100, "window": "1h",
                   "cost": {"response_header": "X-Tokens-Used", "reserve": RESERVE}},
                  {"name": "answered", "algorithm": "sliding_window", "limit": 100, "window": "1h",
                   "count": {"statuses": [200]}}]
        self.start_instances(1, reporting(), [limited_route("llm", limits, path_prefix="/v1")],
                             redis_store(self.redis, timeout=timeout))

    def test_a_settle_and_a_charge_go_to_the_store_in_one_call(self):
        self.start_counted_and_reported()
        before = decide_calls(self.redis)
        self.assertEqual(self.ask(0, 4).status, 200)
        # The check before forwarding, then the settle and the charge together.
        self.assertEqual(decide_calls(self.redis) - before, 2)
        self.assertEqual(self.used("tokens_window"), 4)
        self.assertEqual(self.used("answered"), 1)
        self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit="tokens_window",
                                     result="refunded"), 1)
        self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit="answered",
                                     result="charged"), 1)
        # A report equal to the reservation settles nothing: the charge alone.
        before = decide_calls(self.redis)
        self.assertEqual(self.ask(0, RESERVE).status, 200)
        self.assertEqual(decide_calls(self.redis) - before, 2)
        self.assertEqual(self.used("tokens_window"), 4 + RESERVE)
        self.assertEqual(self.used("answered"), 2)

    def test_a_stalled_store_holds_a_settled_and_charged_response_up_once(self):
        self.start_counted_and_reported(timeout="1s")
        self.assertEqual(self.ask(0, 4).status, 200)
        answer = reporting()

        def pause_then_answer(req, conn):
            self.redis.pause(4000)
            answer(req, conn)
        self.up.behaviour = pause_then_answer
        started = time.monotonic()
        self.assertEqual(self.ask(0, 30).status, 200)
        elapsed = time.monotonic() - started
        # One deadline of 1 s for both, not one after the other (2 s).
        self.assertGreaterEqual(elapsed, 0.9)
        self.assertLess(elapsed, 1.8)
        for limit, result in (("tokens_window", "failed"), ("answered", "failed")):
            self.assertEqual(self.metric("sluice_ratelimit_charges_total", route="llm", limit=limit,
                                         result=result), 1, limit)
        self.instances[0].wait_log(r"route llm: settling the cost a response reported failed")
        self.instances[0].wait_log(r"route llm: charging a 200 response to the limits that count it failed")

    def test_costs_in_the_trailer_of_an_event_stream_are_settled_before_it_ends(self):
        self.redis = self.start_redis()
        self.start_instances(2, event_stream(events=4), [limited_route("llm", tokens_limits("response_trailer"),
                                                                       path_prefix="/v1")],
                             redis_store(self.redis))
        total = 0
        for k, report in enumerate([3, 25, 0, 10, 40, "none", 7]):
            r = self.ask(k, report)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.framing, "chunked")
            self.assertEqual(r.body.count(b"data: "), 4, r.body)
            self.assertEqual(r.trailers, [], "the trailer is not forwarded")
            total += report if isinstance(report, int) else RESERVE
            # Settled before the stream's end reached the client: exact at once.
            for limit in ("tokens", "tokens_window", "tokens_fixed"):
                self.assertEqual(self.used(limit), total, f"{limit} after stream {k}")

    def test_a_client_gone_mid_stream_leaves_the_reservation(self):
        release = threading.Event()
        self.redis = self.start_redis()
        self.start_instances(1, event_stream(events=6, release=release),
                             [limited_route("llm", tokens_limits("response_trailer"), path_prefix="/v1")],
                             redis_store(self.redis))
        sock = socket.create_connection((LOOPBACK, self.instances[0].port), timeout=5)
        sock.sendall(b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nX-Report: 99\r\nContent-Length: 2\r\n\r\n{}")
        seen = b""
        while b"data: " not in seen:
            chunk = sock.recv(4096)
            self.assertTrue(chunk, "the stream's first event")
            seen += chunk
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # (a reset: sluice's next write fails)
        release.set()
        self.instances[0].wait_access(target="/v1/chat")
        # The upstream's report never reached sluice: the reservation stands.
        for limit in ("tokens", "tokens_window", "tokens_fixed"):
            self.assertEqual(self.used(limit), RESERVE, limit)
        self.assertEqual(self.metric("sluice_ratelimit_reported_cost_total", route="llm", limit="tokens"), 0)

    def test_a_client_gone_after_the_head_keeps_what_the_head_reported(self):
        release = threading.Event()

        def slow_body(req, conn):
            conn.send(b"HTTP/1.1 200 OK\r\nX-Tokens-Used: 77\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            release.wait(5)
            conn.sleep(0.2)
            conn.send(b"x" * 99000)

        self.redis = self.start_redis()
        self.start_instances(1, slow_body, [limited_route("llm", tokens_limits(), path_prefix="/v1")],
                             redis_store(self.redis))
        sock = socket.create_connection((LOOPBACK, self.instances[0].port), timeout=5)
        sock.sendall(b"GET /v1/chat HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(b"200 OK", sock.recv(4096))
        sock.close()
        release.set()
        for limit in ("tokens", "tokens_window", "tokens_fixed"):
            self.assertEqual(self.used(limit), 77, limit)


if __name__ == "__main__":
    import unittest
    unittest.main()
