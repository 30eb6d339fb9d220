"""Bans (`ban: DURATION` on a limit): the request a limit refuses starts a ban for its key;
while it lasts every request of that key on the route is refused at once (429 with
Retry-After to the ban's end), even once the limit has room again, and nothing is counted;
the admin reset lifts it, its end ends it. Two sluice instances sharing one redis-server,
and the memory store.
"""

import json
import threading
import time

from admin_api import Metrics
from harness import RawClient, SluiceTestCase, limited_route, redis_store, respond, wait_until


def banning_window(limit, window, ban, name="tries"):
    return {"name": name, "algorithm": "sliding_window", "limit": limit, "window": window, "ban": ban,
            "key": ["client_ip"]}


class BanTest(SluiceTestCase):
    def get(self, k, target):
        with RawClient(self.instances[k % len(self.instances)].port) as c:
            return c.request("GET", target)

    def admin_json(self, method, target):
        with RawClient(self.admin_ports[0]) as c:
            r = c.request(method, target, [("Connection", "close")])
        self.assertEqual(r.status, 200, r.body)
        return json.loads(r.body)

    def upstream_saw(self, prefix):
        return sum(1 for r in self.up.requests if r.target.startswith(prefix))

    def check_trip_hold_and_lift(self):
        # 2 a second; the third request bans the client for a minute.
        for k in range(2):
            self.assertEqual(self.get(k, f"/login/{k}").status, 200)
        tripped = self.get(0, "/login/trip")
        self.assertEqual(tripped.status, 429)
        self.assertIn(int(tripped.header("Retry-After")), (59, 60))
        self.assertIn("banned for", json.loads(tripped.body)["detail"])
        # The window has room again (a second on): the ban still refuses, on both instances.
        time.sleep(1.2)
        for k in range(4):
            r = self.get(k, f"/login/during{k}")
            self.assertEqual(r.status, 429)
            self.assertLessEqual(int(r.header("Retry-After")), 60)
        self.assertEqual(self.upstream_saw("/login/"), 2, "nothing reaches the upstream during a ban")
        entries = wait_until(lambda: (lambda e: e if len(e) >= 7 else None)(
            [e for s in self.instances for e in s.access_entries() if e["target"].startswith("/login/")]), 5.0,
            message="access lines")
        self.assertEqual(sorted(e["decision"] for e in entries), ["allowed"] * 2 + ["banned"] * 5)
        self.assertTrue(all(e["limit"] == "tries" for e in entries if e["decision"] == "banned"))
        banned = sum(Metrics.fetch(p).get("sluice_ratelimit_decisions_total", route="login", limit="tries",
                                          decision="banned") or 0 for p in self.admin_ports)
        self.assertEqual(banned, 5)
        # The admin look-up shows it, taking nothing; the reset lifts it on every instance.
        state = self.admin_json("GET", "/limits?route=login&client=127.0.0.1")
        self.assertEqual(state["limits"][0]["banned"], True)
        self.assertGreater(state["limits"][0]["reset_ms"], 55_000)
        reset = self.admin_json("DELETE", "/limits?route=login&client=127.0.0.1")
        self.assertEqual(reset["reset"], ["tries"])
        # The ban, and the window if it has not expired yet (in Redis it has: 1 s).
        self.assertIn(reset["keys_deleted"], (1, 2))
        if getattr(self, "redis", None):
            self.assertEqual(self.redis.command("EXISTS", "sluice:{login:127.0.0.1}:tries:ban"), 0)
        # At once on the instance asked (its workers forget what they remembered); on the
        # other, whose workers remember a ban for at most a second, soon.
        self.assertEqual(self.get(0, "/login/after0").status, 200)
        if len(self.instances) > 1:
            wait_until(lambda: self.get(1, "/login/after1").status == 200, 5.0, interval=0.05,
                       message="the reset seen on the other instance")
        self.assertEqual(self.admin_json("GET", "/limits?route=login&client=127.0.0.1")["limits"][0]["banned"], False)

    def check_the_end_ends_it(self):
        # A ban of 1.5 s on a window of 2 s: refused until the later of the two (never
        # sooner than the ban), admitted after.
        for k in range(2):
            self.assertEqual(self.get(k, f"/short/{k}").status, 200)
        tripped_at = time.monotonic()  # (before the trip: the ban starts after this)
        self.assertEqual(self.get(0, "/short/trip").status, 429)
        first_ok = wait_until(lambda: time.monotonic() if self.get(1, "/short/poll").status == 200 else None,
                              10.0, interval=0.05, message="the ban's end")
        self.assertGreaterEqual(first_ok - tripped_at, 1.5)
        self.assertEqual(self.upstream_saw("/short/"), 3)

    def check_a_look_up_during_a_ban_shows_every_limit(self):
        # The admin look-up of a banned client: the banning limit refuses (remaining 0, its
        # ban's end), and the route's other limits are shown as they stand, not as if they
        # did not apply.
        for k in range(2):
            self.assertEqual(self.get(k, f"/guarded/{k}").status, 200)
        self.assertEqual(self.get(0, "/guarded/trip").status, 429)
        state = self.admin_json("GET", "/limits?route=guarded&client=127.0.0.1")
        limits = {limit["name"]: limit for limit in state["limits"]}
        self.assertEqual((limits["tries"]["banned"], limits["tries"]["remaining"]), (True, 0))
        self.assertGreater(limits["tries"]["reset_ms"], 55_000)
        self.assertEqual((limits["hourly"]["applies"], limits["hourly"]["remaining"]), (True, 98), limits["hourly"])
        # (and the look-up took nothing)
        state = self.admin_json("GET", "/limits?route=guarded&client=127.0.0.1")
        self.assertEqual([limit["remaining"] for limit in state["limits"]], [0, 98])

    def routes(self):
        return [limited_route("login", [banning_window(2, "1s", "1m")]),
                limited_route("short", [banning_window(2, "2s", "1500ms")]),
                limited_route("guarded", [banning_window(2, "1s", "1m"),
                                          {"name": "hourly", "algorithm": "token_bucket", "rate": 100, "per": "1h",
                                           "burst": 100, "key": ["client_ip"]}])]

    def test_redis_two_instances(self):
        self.redis = self.start_redis()
        self.start_instances(2, respond(200, b"ok"), self.routes(), redis_store(self.redis))
        self.check_trip_hold_and_lift()
        self.check_the_end_ends_it()
        self.assertEqual(self.redis.command("EXISTS", "sluice:{login:127.0.0.1}:tries:ban"), 0)
        self.check_a_look_up_during_a_ban_shows_every_limit()

    def test_memory_store(self):
        self.start_instances(1, respond(200, b"ok"), self.routes(), {"type": "memory"})
        self.check_trip_hold_and_lift()
        self.check_the_end_ends_it()
        self.check_a_look_up_during_a_ban_shows_every_limit()

    def check_a_reservation_refusal_bans_for_the_ban_only(self):
        # A limit whose response reports its cost: B is refused only because A's reservation
        # (15 of 20) has not settled yet. Its ban lasts `ban` (1 s), not until the window's
        # end (the store cannot know A will give 14 back): once A has settled and the ban
        # ended, the client passes.
        release = threading.Event()

        def answer(req, conn):
            if req.target == "/tokens/slow":
                release.wait(10)
            conn.send_response(200, headers=[("X-Tokens-Used", "1")], body=b"ok")
        self.up.behaviour = answer
        results = {}
        slow = threading.Thread(target=lambda: results.setdefault("a", self.get(0, "/tokens/slow")))
        slow.start()
        wait_until(lambda: self.upstream_saw("/tokens/slow") == 1, 5.0, message="A's reservation taken")
        refused = self.get(0, "/tokens/b")
        self.assertEqual(refused.status, 429)
        self.assertEqual(int(refused.header("Retry-After")), 1, "the ban's length, not the window's end")
        release.set()
        slow.join(10)
        self.assertEqual(results["a"].status, 200)
        wait_until(lambda: self.get(0, "/tokens/c").status == 200, 3.0, interval=0.1,
                   message="admitted once the ban ended")

    def reservation_route(self):
        return limited_route("tokens", [{"name": "tokens", "algorithm": "fixed_window", "limit": 20, "window": "1h",
                                         "key": ["client_ip"], "ban": "1s",
                                         "cost": {"response_header": "X-Tokens-Used", "reserve": 15}}])

    def test_a_reservation_refusal_bans_for_the_ban_only_on_redis(self):
        self.redis = self.start_redis()
        self.start_instances(1, respond(200, b"ok"), [self.reservation_route()], redis_store(self.redis))
        self.check_a_reservation_refusal_bans_for_the_ban_only()

    def test_a_reservation_refusal_bans_for_the_ban_only_on_the_memory_store(self):
        self.start_instances(1, respond(200, b"ok"), [self.reservation_route()], {"type": "memory"})
        self.check_a_reservation_refusal_bans_for_the_ban_only()

    def test_failed_logins_ban_the_client(self):
        # count and ban together: three failed logins in 15 minutes ban the client for an hour.
        def login(req, conn):
            conn.send_response(200 if req.header("x-password") == "right" else 401, body=b"")
        limit = {"name": "failures", "algorithm": "fixed_window", "limit": 3, "window": "15m", "ban": "1h",
                 "count": {"statuses": [401]}}
        self.redis = self.start_redis()
        self.start_instances(2, login, [limited_route("login", [limit])], redis_store(self.redis))

        def attempt(k, password):
            with RawClient(self.instances[k % 2].port) as c:
                return c.request("POST", "/login", [("X-Password", password)], b"").status
        self.assertEqual([attempt(k, "right") for k in range(4)], [200] * 4)
        self.assertEqual([attempt(k, "wrong") for k in range(3)], [401] * 3)
        self.assertEqual(attempt(0, "right"), 429)  # finds 3 of 3: the ban starts
        ttl = self.redis.command("PTTL", "sluice:{login:127.0.0.1}:failures:ban")
        self.assertGreater(ttl, 3_500_000)
        self.assertEqual(attempt(1, "right"), 429)
        self.assertEqual(len(self.up.requests), 7)
