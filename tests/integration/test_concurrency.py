"""Global concurrency limits through real proxies (issue 15): at most `limit` requests of a key
in flight across every instance sharing one Redis; a slot is given back when the response is
sent or the client goes away, renewed while a request runs longer than its lease, and taken
back after the lease when its instance dies.
"""

import json
import re
import signal
import threading
import time
import unittest

from harness import (RawClient, SluiceTestCase, build_request, free_port, limited_route,
                     proxy_config, redis_store, respond, retry_after, wait_until)

WORKERS = 2


def concurrency(name, limit, lease=None, key=()):
    out = {"name": name, "algorithm": "concurrency", "limit": limit, "key": list(key)}
    if lease is not None:
        out["lease"] = lease
    return out


def decide_fcalls(redis):
    """Decide calls Redis has run (FCALL: the releases go by EVALSHA)."""
    stats = redis.command("INFO", "commandstats")
    found = re.search(r"cmdstat_fcall:calls=(\d+)", stats.decode() if isinstance(stats, bytes) else stats)
    return int(found.group(1)) if found else 0


class Gauge:
    """An upstream behaviour that holds each request `seconds` and records how many were in
    flight at once."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.finished = 0

    def __call__(self, req, conn):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            if conn.sleep(self.seconds):
                respond(200, b"done")(req, conn)
            else:
                conn.close()
        finally:
            with self.lock:
                self.now -= 1
                self.finished += 1


class ConcurrencyTest(SluiceTestCase):
    def start_stack(self, routes, gauge, instances=1, memory=False, store_options=None, server=None):
        self.up = self.start_upstream(gauge)
        self.redis = None if memory else self.start_redis()
        store = {"type": "memory"} if memory else redis_store(self.redis, **(store_options or {}))
        workers = (server or {}).get("workers", WORKERS)
        self.ports, self.sluices, self.admin_ports = [], [], []
        self.route_names = [r["name"] for r in routes]
        for _ in range(instances):
            port, admin = free_port(), free_port()
            sluice = self.start_sluice(proxy_config(
                port, {"app": self.up.address}, routes, server=server,
                extra={"store": store, "admin": {"listen": f"127.0.0.1:{admin}"}}))
            if not memory:
                sluice.wait_store_connected(workers)
            self.ports.append(port)
            self.admin_ports.append(admin)
            self.sluices.append(sluice)

    def slots_held(self):
        """Slots in flight on every route, as the admin look-up of each instance reports them
        (with Redis every instance reports the same shared count)."""
        held = 0
        for admin in self.admin_ports:
            for route in self.route_names:
                c = RawClient(admin)
                try:
                    r = c.request("GET", f"/limits?route={route}", [("Connection", "close")])
                finally:
                    c.close()
                self.assertEqual(r.status, 200, r.body)
                held += sum(l["in_flight"] for l in json.loads(r.body)["limits"]
                            if l["algorithm"] == "concurrency")
        return held

    def wait_slots_back(self):
        """A slot goes back once its response is written: a call of its own (to Redis, or on
        the worker that served it), which a request sent the moment the response arrives (on
        another connection, maybe another worker) can overtake. What counts is that it goes
        back; the next round is sent after it has."""
        wait_until(lambda: self.slots_held() == 0, 5, message="every slot given back")

    def fire(self, n, target, spread=True):
        """n requests at once, alternating between the instances; their responses in order."""
        results = [None] * n

        def one(i):
            c = RawClient(self.ports[i % len(self.ports)] if spread else self.ports[0], timeout=20)
            try:
                results[i] = c.request("GET", f"{target}/{i}")
            finally:
                c.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return results

    def test_two_instances_never_exceed_the_limit(self):
        gauge = Gauge(1.0)
        self.start_stack([limited_route("slow", [concurrency("inflight", 3)])], gauge, instances=2)
        responses = self.fire(12, "/slow")
        statuses = [r.status for r in responses]
        self.assertEqual(statuses.count(200), 3, statuses)
        self.assertEqual(statuses.count(429), 9, statuses)
        self.assertLessEqual(gauge.most, 3)
        for r in responses:
            if r.status == 429:
                self.assertEqual(retry_after(r), 1)
        # Every slot is given back when its response has been sent: a full round again.
        self.wait_slots_back()
        self.assertEqual(self.redis.command("ZCARD", "sluice:{slow}:inflight"), 0)
        statuses = [r.status for r in self.fire(5, "/slow")]
        self.assertEqual(statuses.count(200), 3, statuses)
        self.assertEqual(gauge.most, 3)

    def test_a_client_that_goes_away_gives_its_slot_back_at_once(self):
        gauge = Gauge(8.0)
        self.start_stack([limited_route("slow", [concurrency("one", 1)])], gauge)
        first = RawClient(self.ports[0])
        first.send(build_request("GET", "/slow/first"))
        wait_until(lambda: gauge.now == 1, 5, message="the first request upstream")
        second = RawClient(self.ports[0])
        self.assertEqual(second.request("GET", "/slow/refused").status, 429)
        first.close()
        entry = self.sluices[0].wait_access(target="/slow/first", timeout=3)
        self.assertEqual(entry["status"], "499")
        # Long before the upstream would have answered, the slot is free again.
        started = time.monotonic()
        third = RawClient(self.ports[0], timeout=20)
        third.send(build_request("GET", "/slow/after"))
        wait_until(lambda: any(q.target == "/slow/after" for q in self.up.requests), 3,
                   message="the next request upstream")
        self.assertLess(time.monotonic() - started, 3)
        third.close()
        second.close()

    def test_a_killed_instance_slots_come_back_after_the_lease(self):
        gauge = Gauge(20.0)
        self.start_stack([limited_route("slow", [concurrency("two", 2, lease="2s")])], gauge, instances=2)
        holders = [RawClient(self.ports[0]) for _ in range(2)]
        for i, h in enumerate(holders):
            h.send(build_request("GET", f"/slow/held{i}"))
        wait_until(lambda: gauge.now == 2, 5, message="two requests upstream")
        other = RawClient(self.ports[1])
        self.assertEqual(other.request("GET", "/slow/refused").status, 429)
        killed_at = time.monotonic()
        self.sluices[0].kill()
        # Nobody gives those slots back: they end with their lease (renewed every 2/3 s
        # while the instance lived, so at most 2 s after it died).
        while True:
            # An admitted probe waits on the 20 s upstream until sluice's 5 s upstream timeout
            # answers 504: the client waits longer than that (with the default 5 s, which
            # timed out first was a race).
            r = RawClient(self.ports[1], timeout=15)
            status = r.request("GET", "/slow/probe").status
            r.close()
            if status != 429:
                break
            self.assertLess(time.monotonic() - killed_at, 4, "slots still held 4 s after the kill")
            time.sleep(0.2)
        waited = time.monotonic() - killed_at
        self.assertGreater(waited, 0.5, "slots came back before their lease could end")
        for h in holders:
            h.close()
        other.close()

    def test_a_long_request_keeps_its_slot_past_its_lease(self):
        gauge = Gauge(3.0)
        self.start_stack([limited_route("slow", [concurrency("one", 1, lease="1s")])], gauge)
        first = RawClient(self.ports[0], timeout=20)
        first.send(build_request("GET", "/slow/long"))
        wait_until(lambda: gauge.now == 1, 5, message="the first request upstream")
        time.sleep(1.8)  # past the first lease: renewed, still held
        probe = RawClient(self.ports[0])
        self.assertEqual(probe.request("GET", "/slow/probe").status, 429)
        probe.close()
        self.assertEqual(first.read_response().status, 200)
        self.wait_slots_back()
        self.assertEqual(sum(self.redis.command("ZCARD", key) for key in self.redis.keys("*")), 0)
        after = RawClient(self.ports[0], timeout=20)
        self.assertEqual(after.request("GET", "/slow/after").status, 200)
        after.close()
        first.close()
        self.assertEqual(gauge.most, 1)

    def test_slots_taken_by_calls_answered_late_are_given_back(self):
        # Redis stalls past the store's deadline: the decisions are answered as store failures
        # (on_error: deny refuses them), yet their calls run when Redis resumes, one of them
        # held in the worker behind the call in flight. The slots those calls take go back
        # behind them (they stayed for the whole lease: a minute of a smaller limit).
        # One worker: its batch waits behind its call in flight and is sent when that is
        # answered (with shared batches a part whose deadlines all passed is dropped unsent,
        # so how many calls run is not known from outside).
        self.start_stack([limited_route("c", [concurrency("inflight", 3, lease="60s")])], Gauge(0.0),
                         store_options={"timeout": "100ms", "on_error": "deny"}, server={"workers": 1})
        before = decide_fcalls(self.redis)
        self.redis.pause(1500)  # (commands of every client wait, the test's own too)
        statuses = []
        for i in range(4):  # one after the other: each asked in a turn of its own
            with RawClient(self.ports[0]) as c:
                statuses.append(c.request("GET", f"/c/{i}").status)
        self.assertEqual(statuses, [503] * 4)
        # When the pause ends: the call in flight, then the batch that waited behind it, have run.
        wait_until(lambda: decide_fcalls(self.redis) >= before + 2, 5, message="the late calls run")
        wait_until(lambda: self.redis.command("ZCARD", "sluice:{c}:inflight") == 0 and self.slots_held() == 0, 5,
                   message="the slots the late calls took given back")

    def test_a_late_call_for_a_request_still_running_keeps_its_slot(self):
        # on_error: allow forwards a request whose decision timed out; its call then takes its
        # slot when Redis resumes: the slot stays taken until the request ends (given back
        # then by its own release), not freed when the late reply comes.
        gauge = Gauge(3.0)
        self.start_stack([limited_route("c", [concurrency("inflight", 1, lease="60s")])], gauge,
                         store_options={"timeout": "100ms", "on_error": "allow"}, server={"workers": 1})
        before = decide_fcalls(self.redis)
        self.redis.pause(600)
        running = RawClient(self.ports[0], timeout=15)
        running.send(build_request("GET", "/c/running"))
        wait_until(lambda: gauge.now == 1, 5, message="the request forwarded on the store's failure")
        wait_until(lambda: decide_fcalls(self.redis) >= before + 1, 5, message="its late call run")
        # The slot is its own until it ends: another request is refused meanwhile.
        with RawClient(self.ports[0], timeout=15) as other:
            self.assertEqual(other.request("GET", "/c/other").status, 429)
        self.assertEqual(self.redis.command("ZCARD", "sluice:{c}:inflight"), 1)
        self.assertEqual(running.read_response().status, 200)
        running.close()
        self.wait_slots_back()
        self.assertEqual(gauge.most, 1)

    def test_a_stopping_instance_gives_its_slots_back(self):
        # Requests that end within shutdown_timeout, and requests cut at it: their slots go
        # back before the instance exits (the releases were dropped with its connections, and
        # every other instance had a smaller limit for a lease).
        gauge = Gauge(0.5)
        self.start_stack([limited_route("c", [concurrency("inflight", 3, lease="60s")])], gauge, instances=2,
                         server={"shutdown_timeout": "1s"})
        for seconds, what in ((0.5, "ended in time"), (8.0, "cut at shutdown_timeout")):
            with self.subTest(what):
                if seconds > 1:
                    self.sluices[0] = self.start_sluice(proxy_config(
                        self.ports[0], {"app": self.up.address}, [limited_route("c", [concurrency("inflight", 3, lease="60s")])],
                        server={"shutdown_timeout": "1s"},
                        extra={"store": redis_store(self.redis), "admin": {"listen": f"127.0.0.1:{self.admin_ports[0]}"}}))
                    self.sluices[0].wait_store_connected(WORKERS)
                gauge.seconds = seconds
                clients = [RawClient(self.ports[0], timeout=15) for _ in range(2)]
                for i, c in enumerate(clients):
                    c.send(build_request("GET", f"/c/{what[0]}{i}"))
                wait_until(lambda: gauge.now == 2, 5, message="two requests upstream")
                self.assertEqual(self.redis.command("ZCARD", "sluice:{c}:inflight"), 2)
                self.sluices[0].send_signal(signal.SIGTERM)
                self.assertEqual(self.sluices[0].wait(10), 0)
                for c in clients:
                    c.close()
                self.assertEqual(self.redis.command("ZCARD", "sluice:{c}:inflight"), 0)
        # The instance that stays has the whole limit at once.
        gauge.seconds = 1.0
        clients = [RawClient(self.ports[1], timeout=15) for _ in range(3)]
        for i, c in enumerate(clients):
            c.send(build_request("GET", f"/c/after{i}"))
        self.assertEqual([c.read_response().status for c in clients], [200] * 3)
        for c in clients:
            c.close()

    def test_the_memory_store_holds_the_same_rule(self):
        gauge = Gauge(1.0)
        self.start_stack([limited_route("slow", [concurrency("inflight", 2)])], gauge, memory=True)
        statuses = [r.status for r in self.fire(6, "/slow")]
        self.assertEqual(statuses.count(200), 2, statuses)
        self.assertLessEqual(gauge.most, 2)
        self.wait_slots_back()
        statuses = [r.status for r in self.fire(2, "/slow")]
        self.assertEqual(statuses, [200, 200])


if __name__ == "__main__":
    unittest.main()
