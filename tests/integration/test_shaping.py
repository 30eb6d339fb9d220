"""Shaping (issue 17): leaky_bucket limits hold requests back and let them out at rate/per,
across every sluice instance sharing one Redis (GCRA on Redis TIME): the schedule of a burst
at the upstream, delay and nodelay, the bucket's size, max_wait and server.max_waiting, a
client hanging up while it waits (499), Redis stopping while requests wait, SIGTERM with
requests waiting, and the metrics, stats, summary and access lines that show the waiting.

Timing is checked where it is the feature: the upstream stamps each request when it arrives
(Arrivals), and the k-th of a burst must arrive at its turn, first + k * per/rate, within
tens of ms (EARLY, LATE below). Requests "at once" go out on connections opened beforehand,
written by one thread in a tight loop. Every wait has a deadline.
"""

import signal
import threading
import time
import unittest

from admin_api import Metrics, stats_json, wait_admin
from harness import (RawClient, SluiceTestCase, build_request, free_port, leaky_bucket,
                     limited_route, proxy_config, redis_store, respond, retry_after, wait_until)

WORKERS = 2
# Seconds an arrival may stray from its ideal time. A loaded machine delays timers, threads
# and the upstream's stamping, by tens of ms; an error in the schedule is a whole interval
# (100 ms in most tests, 200 or 500 ms in the others), so both bounds stay below one.
# A burst's arrivals are compared with the schedule as a whole: each one's lateness relative
# to its turn (first + k * interval) may differ from every other one's by at most LATE. A
# single arrival, compared with one reference arrival that may itself be a little late, may
# be EARLY early or LATE late.
EARLY = 0.06
LATE = 0.08
TOLERANCE = 0.05  # for a single figure (a wait, an arrival) compared with its ideal value


class Arrivals:
    """An upstream behaviour: answers 200 "ok" and stamps each request's arrival
    (time.monotonic(), once its head is read)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stamps = []  # [(target, monotonic)] in arrival order

    def __call__(self, req, conn):
        with self.lock:
            self.stamps.append((req.target, time.monotonic()))
        respond(200, b"ok")(req, conn)

    def targets(self):
        with self.lock:
            return [t for t, _ in self.stamps]

    def times(self):
        with self.lock:
            return [at for _, at in self.stamps]

    def at(self, target):
        with self.lock:
            found = [at for t, at in self.stamps if t == target]
        return found[0] if found else None

    def wait_count(self, n, timeout):
        wait_until(lambda: len(self.stamps) >= n, timeout,
                   message=f"{n} request(s) upstream (have {len(self.stamps)})")
        return self.times()


class Sent:
    """One request sent by fire(): its response (or the exception), when it was sent and
    when its response was read."""

    def __init__(self, target):
        self.target = target
        self.response = None
        self.error = None
        self.sent_at = None
        self.answered_at = None

    @property
    def status(self):
        return self.response.status if self.response is not None else None

    def __repr__(self):
        return f"<Sent {self.target} {self.status or self.error}>"


def fire(ports, targets, timeout=20.0):
    """Sends one GET per target at once, alternating between the ports: the connections are
    opened first, then one thread writes every request in a tight loop (threads released
    together would trickle out, one GIL hand-off at a time), while one thread per connection
    reads its response. Returns the Sent objects in the order of targets."""
    clients = [RawClient(ports[i % len(ports)], timeout=timeout) for i in range(len(targets))]
    sent = [Sent(t) for t in targets]
    written = [threading.Event() for _ in targets]

    def read(i):
        try:
            if not written[i].wait(10) or sent[i].error is not None:
                return
            sent[i].response = clients[i].read_response()
            sent[i].answered_at = time.monotonic()
        except Exception as e:  # reported by the test through .error
            sent[i].error = e
        finally:
            clients[i].close()

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(targets))]
    for t in readers:
        t.start()
    requests = [build_request("GET", t) for t in targets]
    for i, c in enumerate(clients):
        try:
            sent[i].sent_at = time.monotonic()
            c.send(requests[i])
        except OSError as e:
            sent[i].error = e
        written[i].set()
    for t in readers:
        t.join(timeout + 10)
    return sent


def shaped_route(limit):
    return limited_route("pay", [limit], path_prefix="/")


def ideal_offsets(times, interval, at_once=1):
    """Arrival times as offsets from the first, and their ideal values: the first `at_once`
    at 0, then one every `interval`."""
    times = sorted(times)
    first = times[0]
    return [(at - first, max(0, k - at_once + 1) * interval) for k, at in enumerate(times)]


class ShapingTestCase(SluiceTestCase):
    def start_stack(self, limit, *, instances=1, redis=True, on_error="allow", server=None,
                    admin=False, logging=None):
        """An Arrivals upstream, a redis-server (unless redis=False: the memory store) and
        `instances` sluices with one route "pay" (path_prefix "/") shaped by `limit`."""
        self.arrivals = Arrivals()
        self.up = self.start_upstream(self.arrivals)
        self.redis = self.start_redis() if redis else None
        store = redis_store(self.redis, on_error=on_error) if redis else {"type": "memory"}
        self.ports, self.sluices, self.admins = [], [], []
        for _ in range(instances):
            port = free_port()
            extra = {"store": store}
            admin_port = None
            if admin:
                admin_port = free_port()
                extra["admin"] = {"listen": f"127.0.0.1:{admin_port}"}
            sluice = self.start_sluice(proxy_config(
                port, {"app": self.up.address}, [shaped_route(limit)],
                server=dict(server or {}), logging=logging, extra=extra))
            if redis:
                sluice.wait_store_connected(WORKERS)
            if admin:
                wait_admin(admin_port)
            self.ports.append(port)
            self.sluices.append(sluice)
            self.admins.append(admin_port)
        self.port, self.sluice, self.admin = self.ports[0], self.sluices[0], self.admins[0]

    # reading what sluice says ---------------------------------------------------------
    def metrics(self, admin=None):
        return Metrics.fetch(admin or self.admin)

    def decisions(self, m):
        return {l["decision"]: v for l, v in m.select("sluice_ratelimit_decisions_total",
                                                      route="pay", limit="shape")}

    def wait_metric(self, predicate, message, timeout=5.0, interval=0.02):
        box = {}

        def check():
            box["m"] = self.metrics()
            return predicate(box["m"])
        try:
            wait_until(check, timeout, interval=interval, message=message)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast scrape:\n{box['m'].text if box else ''}") from None
        return box["m"]

    def waiting_now(self, m):
        return m.get("sluice_requests_waiting")

    def entries(self, sluice=None):
        """Access entries of the route "pay" (of one sluice, or of all)."""
        sluices = [sluice] if sluice else self.sluices
        return [e for s in sluices for e in s.access_entries() if e.get("route") == "pay"]

    def wait_entries(self, n, timeout=5.0):
        """Waits until the route "pay" has n access lines (written just after each response,
        so the last ones may lag the responses a little); returns them."""
        try:
            wait_until(lambda: len(self.entries()) >= n, timeout,
                       message=f"{n} access lines (have {len(self.entries())})")
        except AssertionError as e:
            logs = "\n".join(s.log_text()[-3000:] for s in self.sluices)
            raise AssertionError(f"{e}\n{logs}") from None
        return self.entries()

    def entry_for(self, target, timeout=5.0, sluice=None):
        return (sluice or self.sluice).wait_access(target=target, timeout=timeout)

    # assertions -------------------------------------------------------------------------
    def assert_all_answered(self, sent):
        errors = [(s.target, s.error) for s in sent if s.error is not None]
        self.assertEqual(errors, [], "requests without a response")

    def assert_schedule(self, times, interval, at_once=1):
        """The arrivals, sorted, follow the ideal schedule (the first `at_once` together, then
        one every interval): their delays relative to their turns differ by at most LATE. (The
        origin is the least delayed arrival, not the first: the first request may be the one
        that opened the upstream connection.)"""
        offsets = ideal_offsets(times, interval, at_once)
        origin = min(got - want for got, want in offsets)
        off = [(k, round(got, 3), round(want, 3)) for k, (got, want) in enumerate(offsets)
               if got - want - origin > LATE]
        self.assertEqual(off, [], f"arrivals off schedule (k, offset, ideal; least delay "
                                  f"{origin:.3f}) of "
                                  f"{[round(g, 3) for g, _ in offsets]}")

    def assert_arrival(self, got, want, interval, what=""):
        """One arrival offset (seconds, from a reference arrival) against its turn: EARLY
        before to LATE after, or a fifth of the interval either way when that is more."""
        early, late = max(EARLY, interval / 5), max(LATE, interval / 5)
        self.assertTrue(want - early <= got <= want + late,
                        f"{what} arrived at {got:.3f} s, its turn is at {want:.3f} s")

    def fire_in_background(self, prefix, n):
        """fire() of n requests on a thread of its own; results["sent"] once it is joined."""
        results = {}
        burst = threading.Thread(target=lambda: results.update(
            sent=fire(self.ports, [f"/{prefix}{i}" for i in range(n)])), daemon=True)
        burst.start()
        self.addCleanup(burst.join, 10)
        return burst, results

    def fire_past_the_bucket(self, prefix, n=41):
        """n requests at once, one more than the bucket holds: all answered, n - 1 with 200 and
        one limited (assert_limited). Returns what was sent and the arrival times, sorted."""
        sent = fire(self.ports, [f"/{prefix}{i}" for i in range(n)])
        self.assert_all_answered(sent)
        statuses = [s.status for s in sent]
        self.assertEqual((statuses.count(200), statuses.count(429)), (n - 1, 1), statuses)
        self.assert_limited([s for s in sent if s.status == 429][0])
        times = sorted(self.arrivals.times())
        self.assertEqual(len(times), n - 1)
        return sent, times

    def assert_limited(self, s):
        """A 429 from the shaping limit: Retry-After, and nothing of it reached the upstream."""
        self.assertEqual(s.status, 429, s)
        self.assertGreaterEqual(retry_after(s.response), 1)
        self.assertNotIn(s.target, self.arrivals.targets(), "a limited request reached the upstream")


class ScheduleTest(ShapingTestCase):
    def test_two_instances_space_a_burst_at_the_rate(self):
        # Issue 17's example: 10/s, a bucket of 40, one bucket for the whole route, two
        # instances on one Redis. 41 requests at once, alternating between the instances.
        self.start_stack(leaky_bucket("shape", 10, "1s", 40, key=[]), instances=2)
        interval = 0.1
        sent, times = self.fire_past_the_bucket("x")
        [refused] = [s for s in sent if s.status == 429]
        # The bucket was full by about one interval: the next one leaves within it.
        self.assertEqual(retry_after(refused.response), 1)
        instance = self.sluices[int(refused.target[2:]) % len(self.sluices)]  # fire() alternates
        self.assertEqual(self.entry_for(refused.target, sluice=instance)["decision"], "limited")

        self.assert_schedule(times, interval)
        # No one-second span at the upstream holds more than 10 (+1 at its edge).
        busiest = max(sum(1 for b in times if a <= b < a + 1.0) for a in times)
        self.assertLessEqual(busiest, 11, f"{busiest} requests within one second upstream")
        # 40 requests took 3.9 s to go out (less the first one's own lateness).
        self.assertGreater(times[-1] - times[0], 39 * interval - EARLY)

        # Both instances held requests back; each says so in its access lines.
        self.wait_entries(41)
        for s in self.sluices:
            delayed = [e for e in self.entries(s) if e["decision"] == "delayed"]
            self.assertGreater(len(delayed), 5, s.stdout_text()[-3000:])
            for e in delayed:
                self.assertEqual(e["status"], "200", e["line"])
                self.assertIn("wait_ms", e, e["line"])
        allowed = [e for e in self.entries() if e["decision"] == "allowed"]
        self.assertEqual(len(allowed), 1, [e["line"] for e in allowed])
        self.assertNotIn("wait_ms", allowed[0])

    def test_the_memory_store_shapes_alike(self):
        self.start_stack(leaky_bucket("shape", 10, "1s", 5, key=[]), redis=False)
        _, times = self.fire_past_the_bucket("m", 6)
        self.assert_schedule(times, 0.1)
        decisions = [e["decision"] for e in self.wait_entries(6)]
        self.assertEqual(sorted(decisions), ["allowed"] + ["delayed"] * 4 + ["limited"])

    def test_delay_lets_the_first_and_delay_more_through_at_once(self):
        # nginx's delay=10: the first request and 10 more go at once, the rest one per 100 ms.
        self.start_stack(leaky_bucket("shape", 10, "1s", 40, key=[], delay=10))
        _, times = self.fire_past_the_bucket("d")
        self.assert_schedule(times, 0.1, at_once=11)
        decisions = [e["decision"] for e in self.wait_entries(41)]
        self.assertEqual((decisions.count("allowed"), decisions.count("delayed"),
                          decisions.count("limited")), (11, 29, 1), decisions)

    def test_nodelay_passes_the_whole_burst_at_once(self):
        self.start_stack(leaky_bucket("shape", 10, "1s", 40, key=[], nodelay=True))
        _, times = self.fire_past_the_bucket("n")
        # No request was held back: every decision says allowed, no access line has a wait.
        decisions = [e["decision"] for e in self.wait_entries(41)]
        self.assertEqual((decisions.count("allowed"), decisions.count("limited")), (40, 1), decisions)
        self.assertFalse([e["line"] for e in self.entries() if "wait_ms" in e])
        # Shaped, these 40 would take 3.9 s; at once they take what 40 requests take (well
        # under a second, but a loaded machine stretches that: half the shaped time is the bound).
        self.assertLess(times[-1] - times[0], 39 * 0.1 / 2,
                        f"arrival offsets {[round(t - times[0], 3) for t in times]}")


class HangUpTest(ShapingTestCase):
    def hang_up_while_held(self, rate, request, target):
        """A first request at `rate`/s goes at once; `request` (to `target`) waits its turn,
        and its client closes while it waits: logged 499 `delayed`, ended when its client
        went, not at its turn, and nothing of it reaches the upstream. Returns the first's
        arrival time."""
        interval = 1.0 / rate
        self.start_stack(leaky_bucket("shape", rate, "1s", 5, key=[]), admin=True)
        first = self.client(self.port)
        self.assertEqual(first.request("GET", "/first").status, 200)
        first_at = self.arrivals.at("/first")
        leaver = RawClient(self.port)
        leaver.send(request)
        self.wait_metric(lambda m: self.waiting_now(m) == 1, "the request waiting")
        leaver.close()
        self.wait_metric(lambda m: self.waiting_now(m) == 0, "the hold ended", timeout=interval + 2)
        entry = self.entry_for(target, timeout=interval + 2)
        self.assertEqual((entry["status"], entry["decision"]), ("499", "delayed"), entry["line"])
        self.assertLess(float(entry["wait_ms"]), (interval - TOLERANCE) * 1000, entry["line"])
        # Its turn comes and goes: nothing reaches the upstream for it.
        wait_until(lambda: time.monotonic() > first_at + interval + 0.3, 3)
        self.assertEqual(self.arrivals.targets(), ["/first"])
        return first_at

    def test_a_client_that_hangs_up_while_waiting_gets_nothing_forwarded(self):
        # 2/s: the second request waits 500 ms; its client closes once it waits.
        interval = 0.5
        first_at = self.hang_up_while_held(2, build_request("GET", "/leaver"), "/leaver")
        self.assertEqual(len(self.up.requests), 1)

        # Its place in the bucket stays taken: the next request gets the turn after it.
        after = self.client(self.port, timeout=10)
        self.assertEqual(after.request("GET", "/after").status, 200)
        self.assert_arrival(self.arrivals.at("/after") - first_at, 2 * interval, interval, "/after")
        self.assertEqual(self.entry_for("/after")["decision"], "delayed")

    def test_a_client_that_hangs_up_with_its_body_unread_gets_nothing_forwarded(self):
        # The body waits in the socket while the request is held: a peek sees those bytes,
        # not the close behind them. 100 KB: more than a read would have taken in.
        self.hang_up_while_held(1, build_request("POST", "/upload", body=b"x" * 100_000), "/upload")


class CapsTest(ShapingTestCase):
    def test_max_wait_limits_a_request_that_would_wait_longer(self):
        # 2/s, max_wait 1.2 s: at once, waits 0, 0.5 and 1.0 s pass; 1.5 s and more are limited.
        interval = 0.5
        self.start_stack(leaky_bucket("shape", 2, "1s", 10, key=[], max_wait="1200ms"), admin=True)
        sent = fire(self.ports, [f"/w{i}" for i in range(6)])
        self.assert_all_answered(sent)
        statuses = [s.status for s in sent]
        self.assertEqual((statuses.count(200), statuses.count(429)), (3, 3), statuses)
        for s in sent:
            if s.status == 429:
                self.assert_limited(s)
                # Refused at once, not after waiting.
                self.assertLess(s.answered_at - s.sent_at, interval, s)
                self.assertEqual(self.entry_for(s.target)["decision"], "limited")
        times = sorted(self.arrivals.times())
        self.assert_schedule(times, interval)
        m = self.wait_metric(lambda m: sum(self.decisions(m).values()) >= 6, "6 decisions counted")
        self.assertEqual(self.decisions(m), {"allowed": 1, "delayed": 2, "limited": 3})

        # The refused ones took nothing: one sent now gets the fourth turn (1.5 s), which is
        # 1.0 s from now, within max_wait.
        wait_until(lambda: time.monotonic() > times[0] + interval, 3)
        late = self.client(self.port, timeout=10)
        self.assertEqual(late.request("GET", "/late").status, 200)
        self.assert_arrival(self.arrivals.at("/late") - times[0], 3 * interval, interval, "/late")

    def test_max_waiting_limits_a_request_past_the_instances_cap(self):
        # At most 3 requests waiting in this instance. 2/s, so they wait 0.5, 1.0 and 1.5 s.
        interval = 0.5
        self.start_stack(leaky_bucket("shape", 2, "1s", 10, key=[]), server={"max_waiting": 3},
                         admin=True)
        first = self.client(self.port)
        self.assertEqual(first.request("GET", "/r0").status, 200)
        first_at = self.arrivals.at("/r0")
        waiting = [RawClient(self.port, timeout=10) for _ in range(3)]
        for i, c in enumerate(waiting, 1):
            self.addCleanup(c.close)
            c.send(build_request("GET", f"/r{i}"))
        self.wait_metric(lambda m: self.waiting_now(m) == 3, "3 requests waiting")

        # The fourth would wait too: limited at once, taking nothing from the bucket.
        extra = self.client(self.port)
        started = time.monotonic()
        refused = extra.request("GET", "/r4")
        self.assertLess(time.monotonic(), first_at + interval, "the first waiting one had left "
                        "before the fourth was answered: the test ran too slowly to tell")
        self.assertEqual(refused.status, 429)
        self.assertLess(time.monotonic() - started, interval / 2, "refused, but not at once")
        self.assertGreaterEqual(retry_after(refused), 1)
        self.assertEqual(self.entry_for("/r4")["decision"], "limited")
        m = self.metrics()
        self.assertEqual(self.decisions(m), {"allowed": 1, "delayed": 3, "limited": 1})
        self.assertEqual(self.waiting_now(m), 3)

        # Once the first waiting one has left, a place is free; the next request gets the
        # fourth turn (first + 2.0 s): the refused one did not count in the bucket.
        self.arrivals.wait_count(2, 3)
        late = self.client(self.port, timeout=10)
        self.assertEqual(late.request("GET", "/r5").status, 200)
        for i, c in enumerate(waiting, 1):
            self.assertEqual(c.read_response().status, 200)
        arrived = {t: round(self.arrivals.at(t) - first_at, 3) for t in self.arrivals.targets()}
        self.assertEqual(sorted(arrived), ["/r0", "/r1", "/r2", "/r3", "/r5"])
        # r1..r3 were sent together: their turns are 1, 2 and 3 in some order.
        held = sorted(arrived[t] for t in ("/r1", "/r2", "/r3"))
        for turn, at in enumerate(held, 1):
            self.assert_arrival(at, turn * interval, interval, f"turn {turn} of {arrived}")
        self.assert_arrival(arrived["/r5"], 4 * interval, interval, f"/r5 of {arrived}")
        m = self.wait_metric(lambda m: self.waiting_now(m) == 0, "nothing waiting")
        self.assertEqual(self.decisions(m), {"allowed": 1, "delayed": 4, "limited": 1})


class RedisDownTest(ShapingTestCase):
    N = 8  # requests at once: waits 0 .. 0.7 s

    def hold_some_then_stop_redis(self, on_error):
        self.start_stack(leaky_bucket("shape", 10, "1s", 40, key=[]), on_error=on_error,
                         admin=True)
        burst, results = self.fire_in_background("h", self.N)
        self.wait_metric(lambda m: self.decisions(m).get("delayed") == self.N - 1,
                         f"{self.N - 1} requests held back")
        self.redis.stop()
        self.stopped_at = time.monotonic()
        return burst, results

    def ask_new(self):
        """A new request while Redis is down: the response and how long it took."""
        c = self.client(self.port)
        started = time.monotonic()
        r = c.request("GET", "/new")
        return r, time.monotonic() - started

    def check_held_ones(self, burst, results):
        burst.join(10)
        sent = results["sent"]
        self.assert_all_answered(sent)
        self.assertEqual([s.status for s in sent], [200] * self.N)
        held = [self.arrivals.at(f"/h{i}") for i in range(self.N)]
        self.assert_schedule(held, 0.1)
        after = sum(1 for at in held if at > self.stopped_at)
        self.assertGreaterEqual(after, self.N // 2, "Redis stopped after most held requests had "
                                "left: the test ran too slowly to tell")

    def test_waiting_requests_go_out_and_new_ones_are_allowed(self):
        burst, results = self.hold_some_then_stop_redis("allow")
        r, took = self.ask_new()
        self.assertEqual(r.status, 200)
        # At once: had it queued behind the held ones it would wait about 0.8 s.
        self.assertLess(took, 0.5, "a request the store could not decide waited")
        entry = self.entry_for("/new")
        self.assertEqual(entry["decision"], "store_error_allowed", entry["line"])
        self.assertNotIn("wait_ms", entry)
        self.check_held_ones(burst, results)

    def test_waiting_requests_go_out_and_new_ones_are_denied(self):
        burst, results = self.hold_some_then_stop_redis("deny")
        r, took = self.ask_new()
        self.assert_problem(r, 503)
        self.assertLess(took, 0.5)
        self.assertEqual(r.header_values("retry-after"), ["1"])
        self.assertEqual(self.entry_for("/new")["decision"], "store_error_denied")
        self.check_held_ones(burst, results)
        self.assertNotIn("/new", self.arrivals.targets())


class ShutdownTest(ShapingTestCase):
    def test_sigterm_forwards_what_is_due_in_time_and_refuses_the_rest(self):
        # 5/s: 12 requests at once wait 0, 0.2 .. 2.2 s. SIGTERM about 0.1 s after the first
        # left, with shutdown_timeout 1 s: turns up to ~1.1 s go out, the later ones get 503.
        interval, grace = 0.2, 1.0
        self.start_stack(leaky_bucket("shape", 5, "1s", 20, key=[]),
                         server={"shutdown_timeout": "1s"}, admin=True)
        n = 12
        burst, results = self.fire_in_background("s", n)
        self.wait_metric(lambda m: self.waiting_now(m) == n - 1, f"{n - 1} requests waiting")
        first_at = self.arrivals.wait_count(1, 3)[0]
        wait_until(lambda: time.monotonic() >= first_at + interval / 2, 3)
        signalled = time.monotonic()
        self.sluice.send_signal(signal.SIGTERM)
        burst.join(15)
        rc = self.sluice.wait(10)
        self.assertEqual(rc, 0, self.sluice.log_text()[-3000:])

        sent = results["sent"]
        self.assert_all_answered(sent)
        cutoff = signalled + grace
        forwarded, refused = [], []  # arrival times; Sent
        for s in sent:
            if s.status == 200:
                forwarded.append(self.arrivals.at(s.target))
            else:
                self.assertEqual(s.status, 503, s)
                self.assertEqual(s.response.header_values("retry-after"), ["1"])
                # At once: their turns were 1.1 s and more after the signal.
                self.assertLess(s.answered_at - signalled, 0.5, "a refused request was not "
                                "answered at once")
                refused.append(s)
        forwarded.sort()
        self.assert_schedule(forwarded, interval)
        # Every turn due before the cutoff (less a tolerance) went out; none after it.
        due = [first_at + k * interval for k in range(n)]
        must_go = sum(1 for d in due if d < cutoff - TOLERANCE)
        may_go = sum(1 for d in due if d < cutoff + LATE)  # the stop may begin a little late
        self.assertGreaterEqual(len(forwarded), must_go, (forwarded, due, cutoff))
        self.assertLessEqual(len(forwarded), may_go, (forwarded, due, cutoff))
        self.assertTrue(refused, "nothing was refused")
        self.assertLessEqual(max(forwarded), cutoff + LATE)
        for s in refused:
            self.assertNotIn(s.target, self.arrivals.targets())
            entry = self.entry_for(s.target)
            self.assertEqual((entry["status"], entry["decision"]), ("503", "delayed"), entry["line"])


class VisibilityTest(ShapingTestCase):
    def test_metrics_summary_stats_and_access_lines_show_the_waiting(self):
        # 10 at once at 10/s: one allowed, nine held back 0.1 .. 0.9 s.
        self.start_stack(leaky_bucket("shape", 10, "1s", 40, key=[]), admin=True,
                         logging={"summary_interval": "1s"})
        n = 10
        burst, results = self.fire_in_background("v", n)
        m = self.wait_metric(lambda m: self.waiting_now(m) and self.waiting_now(m) > 0,
                             "requests waiting in the gauge")
        self.assertLessEqual(self.waiting_now(m), n - 1)
        during = stats_json(self.admin)
        self.assertGreater(during["requests_waiting"], 0, during)
        burst.join(10)
        self.assert_all_answered(results["sent"])
        self.assertEqual([s.status for s in results["sent"]], [200] * n)

        m = self.wait_metric(lambda m: sum(self.decisions(m).values()) >= n and
                             self.waiting_now(m) == 0, "every decision counted, nothing waiting")
        self.assertEqual(self.decisions(m), {"allowed": 1, "delayed": n - 1})
        self.assertEqual(m.types.get("sluice_requests_waiting"), "gauge")
        self.assertEqual(m.types.get("sluice_ratelimit_wait_seconds"), "histogram")
        buckets, total, count = m.histogram("sluice_ratelimit_wait_seconds")
        self.assertEqual(count, n - 1)
        ideal = sum(k * 0.1 for k in range(n))  # 4.5 s
        self.assertAlmostEqual(total, ideal, delta=(n - 1) * TOLERANCE)
        cumulative = dict(buckets)
        self.assertEqual(cumulative[0.05], 0, buckets)
        self.assertEqual(cumulative[1.0], n - 1, buckets)
        self.assertEqual(cumulative[float("inf")], n - 1, buckets)
        values = [v for _, v in buckets]
        self.assertEqual(values, sorted(values), "buckets are cumulative")

        stats = stats_json(self.admin)
        self.assertEqual(stats["requests_waiting"], 0)
        [route] = [r for r in stats["routes"] if r["route"] == "pay"]
        self.assertEqual(route["delayed"], n - 1, route)

        entries = self.wait_entries(n)
        delayed = sorted((e for e in entries if e["decision"] == "delayed"),
                         key=lambda e: float(e["wait_ms"]))
        self.assertEqual(len(delayed), n - 1, [e["line"] for e in entries])
        for k, e in enumerate(delayed, 1):
            self.assertEqual((e["status"], e["limit"]), ("200", "shape"), e["line"])
            wait = float(e["wait_ms"]) / 1000
            self.assertTrue(k * 0.1 - EARLY <= wait <= k * 0.1 + LATE, e["line"])
            self.assertGreaterEqual(float(e["total_ms"]), float(e["wait_ms"]), e["line"])
        [allowed] = [e for e in entries if e["decision"] == "allowed"]
        self.assertNotIn("wait_ms", allowed)

        # The summary lines (one a second) count the delayed requests of their interval.
        def delayed_in_summaries():
            lines = [l for l in self.sluice.stdout_text().splitlines() if "summary route=pay " in l]
            total = 0
            for line in lines:
                self.assertRegex(line, r" store_errors=0 delayed=\d+ exempt=0 top_limited=")
                total += int(line.split(" delayed=")[1].split()[0])
            return total == n - 1
        wait_until(delayed_in_summaries, 4, message=f"summary lines adding up to delayed={n - 1}")


if __name__ == "__main__":
    unittest.main()
