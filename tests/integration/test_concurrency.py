"""Global concurrency limits through real proxies (issue 15): at most `limit` requests of a key
in flight across every instance sharing one Redis; a slot is given back when the response is
sent or the client goes away, renewed while a request runs longer than its lease, and taken
back after the lease when its instance dies.
"""

import json
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
    def start_stack(self, routes, gauge, instances=1, memory=False):
        self.up = self.start_upstream(gauge)
        self.redis = None if memory else self.start_redis()
        store = {"type": "memory"} if memory else redis_store(self.redis)
        self.ports, self.sluices, self.admin_ports = [], [], []
        self.route_names = [r["name"] for r in routes]
        for _ in range(instances):
            port, admin = free_port(), free_port()
            sluice = self.start_sluice(proxy_config(
                port, {"app": self.up.address}, routes,
                extra={"store": store, "admin": {"listen": f"127.0.0.1:{admin}"}}))
            if not memory:
                sluice.wait_store_connected(WORKERS)
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
