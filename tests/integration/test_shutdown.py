"""Graceful stop on SIGTERM / SIGINT, shutdown_timeout, max_connections."""

import signal
import socket
import time
import unittest

from admin_api import Metrics
from harness import (LOOPBACK, RawClient, SluiceTestCase, build_request, by_path, delayed, free_port,
                     limited_route, proxy_config, redis_store, respond, token_bucket, wait_until)

SLOW = 2.0  # seconds the slow upstream takes to answer


def connect_refused(port, timeout):
    """True once a connect to port is refused within timeout (connections that still get
    accepted meanwhile are closed again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection((LOOPBACK, port), timeout=0.5)
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        else:
            s.close()
        time.sleep(0.05)
    return False


class GracefulStopTest(SluiceTestCase):
    def setUp(self):
        self.up = self.start_upstream(by_path({
            "/slow": delayed(SLOW, respond(200, b"slow but complete")),
        }, default=respond(200, b"fast")))
        self.port = free_port()

    def test_sigterm_finishes_in_flight_request_and_exits_0(self):
        s = self.start_sluice(proxy_config(self.port, {"app": self.up.address},
                                           server={"shutdown_timeout": "10s"}))
        idle = self.client(self.port)
        self.assertEqual(idle.request("GET", "/fast").body, b"fast")  # now idle, kept alive

        busy = self.client(self.port)
        busy.send(build_request("GET", "/slow"))
        wait_until(lambda: any(r.target == "/slow" for r in self.up.requests), 5,
                   message="the slow request at the upstream")
        s.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()

        # New connections are refused while the in-flight request is still running.
        self.assertTrue(connect_refused(self.port, SLOW - 0.5),
                        "new connections still accepted after SIGTERM")
        self.assertTrue(s.running(), "sluice exited before finishing the in-flight request")
        self.assertLess(time.monotonic() - sent_at, SLOW)

        # The idle keep-alive connection is closed.
        self.assertEqual(idle.wait_closed(3), b"")

        # The in-flight request gets its full response.
        r = busy.read_response(timeout=SLOW + 3)
        self.assertEqual((r.status, r.body), (200, b"slow but complete"))

        self.assertEqual(s.wait(10), 0, s.log_text())

    def test_sigint_stops_gracefully(self):
        s = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))
        self.assertEqual(self.client(self.port).request("GET", "/fast").status, 200)
        self.assertEqual(s.stop(signal.SIGINT), 0, s.log_text())

    def test_shutdown_timeout_bounds_the_wait(self):
        self.up.behaviour = delayed(8.0, respond(200, b"far too late"))
        s = self.start_sluice(proxy_config(self.port, {"app": self.up.address},
                                           server={"shutdown_timeout": "1s"}))
        busy = self.client(self.port)
        busy.send(build_request("GET", "/very-slow"))
        self.up.wait_requests(1, 5)
        start = time.monotonic()
        s.send_signal(signal.SIGTERM)
        rc = s.wait(6)
        self.assertLess(time.monotonic() - start, 5, "shutdown_timeout not applied")
        self.assertEqual(rc, 0, s.log_text())
        # The request cut off still has its access line (the client got no answer: 503).
        entry = s.wait_access(target="/very-slow", timeout=1)
        self.assertEqual(entry["status"], "503", entry["line"])


class StoreStopTest(SluiceTestCase):
    def test_a_stop_right_after_a_request_does_not_wait_out_its_decisions_deadline(self):
        # The last decision was answered long ago; its deadline (store.redis.timeout, 10 s
        # here) kept the worker's loop alive until it passed.
        up = self.start_upstream(respond(200, b"ok"))
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": up.address},
                                           [limited_route("r", [token_bucket("tb", 100, "1s", 100)])],
                                           extra={"store": redis_store(self.start_redis(), timeout="10s")}))
        s.wait_store_connected(2)
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/r/x").status, 200)
        started = time.monotonic()
        s.send_signal(signal.SIGTERM)
        self.assertEqual(s.wait(15), 0, s.log_text())
        self.assertLess(time.monotonic() - started, 5)


class MaxConnectionsTest(SluiceTestCase):
    def test_connection_beyond_max_connections_is_closed_without_response(self):
        up = self.start_upstream(respond(200, b"ok"))
        port, admin_port = free_port(), free_port()
        self.start_sluice(proxy_config(port, {"app": up.address}, server={"max_connections": 2},
                                       extra={"admin": {"listen": f"{LOOPBACK}:{admin_port}"}}))
        # The readiness probe's connection, closed by the harness, is seen closed.
        wait_until(lambda: Metrics.fetch(admin_port).get("sluice_connections_active") == 0, 5,
                   message="the readiness probe's connection seen closed")
        first = self.client(port)
        second = self.client(port)
        self.assertEqual(first.request("GET", "/1").status, 200)
        self.assertEqual(second.request("GET", "/2").status, 200)

        # A third connection is closed at once, without any response bytes.
        try:
            third = self.client(port, timeout=3)
        except ConnectionRefusedError:
            third = None
        if third is not None:
            try:
                third.send(build_request("GET", "/3"))
            except OSError:
                pass
            self.assertEqual(third.wait_closed(3), b"", "the third connection got a response")
        self.assertEqual(len(up.requests), 2)

        # The first two still work, and closing one frees a slot.
        self.assertEqual(second.request("GET", "/2b").status, 200)
        first.close()

        def fourth_works():
            try:
                with RawClient(port, timeout=2) as c:
                    return c.request("GET", "/4").status == 200
            except (OSError, AssertionError):
                return False
        wait_until(fourth_works, 5, interval=0.1, message="a connection after one was freed")


if __name__ == "__main__":
    unittest.main()
