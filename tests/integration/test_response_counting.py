"""Limits that count only some responses (`count: {statuses: [...]}`): the request is checked
before forwarding (a client over the limit is refused and nothing reaches the upstream) and
charged after the response head when its status is listed, before the client has the head.

Real processes: two sluice instances sharing one redis-server (or one instance on the memory
store), an upstream that answers 401 to a wrong password.
"""

import collections
import os
import shutil
import tempfile

from admin_api import Metrics
from harness import (SluiceTestCase, by_path, close_without_answer, limited_route, redis_store, respond,
                     wait_until)

FAILURES = 5


def login():
    """The upstream's login: 200 for the right password, 401 for any other."""
    def answer(req, conn):
        if req.header("x-password") == "right":
            conn.send_response(200, body=b"welcome")
        else:
            conn.send_response(401, headers=[("WWW-Authenticate", "Basic")], body=b"no")
    return answer


def failures_limit(algorithm="sliding_window", statuses=(401,)):
    limit = {"name": "failures", "algorithm": algorithm, "key": ["client_ip"],
             "count": {"statuses": list(statuses)}}
    if algorithm == "token_bucket":
        limit.update(rate=FAILURES, per="1h", burst=FAILURES)
    else:
        limit.update(limit=FAILURES, window="15m")
    return limit


class ResponseCountingTest(SluiceTestCase):
    def attempt(self, k, password):
        """One login through instance k % count, on a new connection (as a browser's form)."""
        c = self.client(self.instances[k % len(self.instances)].port)
        r = c.request("POST", "/login", headers=[("X-Password", password)], body=b"")
        c.close()
        return r

    def charges(self, result="charged"):
        total = 0
        for port in self.admin_ports:
            v = Metrics.fetch(port).get("sluice_ratelimit_charges_total", route="login", limit="failures",
                                        result=result)
            total += v or 0
        return total

    def run_login_sequence(self, retry_after):
        """Successes never count; five failures do, each answered 401; the sixth attempt and
        any attempt after it (a right password too) are refused before the upstream, for
        about `retry_after` seconds."""
        for k in range(12):
            self.assertEqual(self.attempt(k, "right").status, 200, f"success {k}")
        for k in range(FAILURES):
            r = self.attempt(k, "wrong")
            self.assertEqual(r.status, 401, f"failure {k + 1}")
            # Checked only: the remaining figure is what was left before this failure.
            self.assertTrue(r.header("RateLimit", "").startswith(f'"failures";r={FAILURES - k};t='),
                            r.header("RateLimit"))
        refused = self.attempt(FAILURES, "wrong")
        self.assertEqual(refused.status, 429)
        self.assertIn(int(refused.header("Retry-After")), (retry_after - 1, retry_after))
        self.assertEqual(self.attempt(FAILURES + 1, "right").status, 429, "a right password is refused too")
        logins = [r for r in self.up.requests if r.target == "/login"]
        self.assertEqual(len(logins), 12 + FAILURES, "refused attempts never reach the upstream")
        self.assertEqual(collections.Counter(r.header("x-password") for r in logins),
                         {"right": 12, "wrong": FAILURES})
        self.assertEqual(self.charges(), FAILURES)
        self.assertEqual(self.charges("failed"), 0)
        entries = wait_until(lambda: (lambda e: e if len(e) >= 12 + FAILURES + 2 else None)(
            [e for s in self.instances for e in s.access_entries() if e["target"] == "/login"]), 5.0,
            message="access lines")
        decisions = collections.Counter((e["status"], e["decision"]) for e in entries)
        self.assertEqual(decisions, {("200", "allowed"): 12, ("401", "allowed"): FAILURES, ("429", "limited"): 2})

    def test_failures_counted_across_two_instances_on_redis(self):
        self.redis = self.start_redis()
        self.start_instances(2, login(), [limited_route("login", [failures_limit()], path="/login")],
                             redis_store(self.redis))
        self.run_login_sequence(900)  # the first failure leaves the window in 15 minutes
        # Redis holds the five failures, one entry each (the successes took nothing).
        keys = self.redis.command("KEYS", "sluice:*")
        self.assertEqual(len(keys), 1, keys)
        self.assertEqual(self.redis.command("ZCARD", keys[0]), FAILURES)

    def test_failures_counted_on_the_memory_store(self):
        self.start_instances(1, login(), [limited_route("login", [failures_limit("token_bucket")], path="/login")],
                             {"type": "memory"})
        self.run_login_sequence(720)  # a failure a twelfth of an hour

    def test_status_classes_count_the_upstreams_errors_and_sluices_own_502(self):
        # 5xx counted in a fixed window of 3: two 500s and one 502 (the upstream closed the
        # connection without an answer) fill it; 200s and 404s never count.
        upstream = by_path({"/flaky/ok": respond(200, b"ok"), "/flaky/missing": respond(404, b"no"),
                            "/flaky/fail": respond(500, b"boom"), "/flaky/gone": close_without_answer()})
        limit = {"name": "errors", "algorithm": "fixed_window", "limit": 3, "window": "1h", "key": [],
                 "count": {"statuses": ["5xx"]}}
        self.redis = self.start_redis()
        self.start_instances(2, upstream, [limited_route("flaky", [limit])], redis_store(self.redis))
        c = [self.client(s.port) for s in self.instances]
        for i in range(6):
            self.assertEqual(c[i % 2].request("GET", "/flaky/ok").status, 200)
            self.assertEqual(c[i % 2].request("GET", "/flaky/missing").status, 404)
        self.assertEqual(c[0].request("GET", "/flaky/fail").status, 500)
        self.assertEqual(self.client(self.instances[1].port).request("GET", "/flaky/gone").status, 502)
        self.assertEqual(c[1].request("GET", "/flaky/fail").status, 500)
        before = len(self.up.requests)
        for k in range(2):
            self.assertEqual(self.client(self.instances[k].port).request("GET", "/flaky/ok").status, 429)
        self.assertEqual(len(self.up.requests), before)
        counted = 0
        for port in self.admin_ports:
            counted += Metrics.fetch(port).get("sluice_ratelimit_charges_total", route="flaky", limit="errors",
                                               result="charged") or 0
        # Each charge, the 502's too, was made before its response went to the client.
        self.assertEqual(counted, 3)

    def test_sluices_own_502_for_a_body_invalid_before_anything_was_sent_is_what_is_charged(self):
        # The upstream's 200 head comes with a body sluice cannot read (a chunk size "zz"):
        # nothing has gone to the client yet, so it gets sluice's own 502, and a limit
        # counting 5xx is charged for that 502 (the head's 200 counts nothing).
        def bad_body(req, conn):
            conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n")
            conn.close()
        upstream = by_path({"/flaky/ok": respond(200, b"ok"), "/flaky/bad": bad_body})
        limit = {"name": "errors", "algorithm": "fixed_window", "limit": 1, "window": "1h", "key": [],
                 "count": {"statuses": ["5xx"]}}
        self.start_instances(1, upstream, [limited_route("flaky", [limit])], {"type": "memory"})
        port = self.instances[0].port
        self.assertEqual(self.client(port).request("GET", "/flaky/ok").status, 200)
        self.assertEqual(self.client(port).request("GET", "/flaky/bad").status, 502)
        self.assertEqual(self.client(port).request("GET", "/flaky/ok").status, 429)

    def test_a_plans_counted_limit_is_charged_under_the_key_it_was_checked_under(self):
        # A route with plans: the hash tag is made of what every limit of every plan has
        # (here nothing: one limit is keyed on the client, the other on the identity), and the
        # charge uses that tag too, so the failures land on the key the check reads.
        plans = {"basic": [{"name": "failures", "algorithm": "sliding_window", "limit": 2, "window": "1h",
                            "key": ["client_ip"], "count": {"statuses": [401]}},
                           {"name": "quota", "algorithm": "fixed_window", "limit": 100, "window": "1h"}]}
        plan_map = os.path.join(tempfile.mkdtemp(prefix="sluice-count-"), "plans.yaml")
        self.addCleanup(shutil.rmtree, os.path.dirname(plan_map), True)
        with open(plan_map, "w", encoding="utf-8") as f:
            f.write("k1: basic\n")
        route = {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "app",
                 "identity": "header:x-api-key", "plan_map": plan_map, "default_plan": "basic"}
        self.redis = self.start_redis()
        self.start_instances(2, by_path({"/api/bad": respond(401, b"no"), "/api/ok": respond(200, b"ok")}),
                             [route], redis_store(self.redis), extra={"plans": plans})

        def get(k, target):
            c = self.client(self.instances[k % 2].port)
            return c.request("GET", target, headers=[("X-Api-Key", "k1")]).status
        self.assertEqual([get(k, "/api/ok") for k in range(3)], [200] * 3)
        self.assertEqual([get(k, "/api/bad") for k in range(2)], [401] * 2)
        self.assertEqual(get(0, "/api/ok"), 429)
        self.assertEqual(get(1, "/api/ok"), 429)
        keys = sorted(k for k in self.redis.command("KEYS", "sluice:*") if "failures" in k)
        self.assertEqual(keys, ["sluice:{api}:failures:127.0.0.1"])
        self.assertEqual(self.redis.command("ZCARD", keys[0]), 2)

    def test_a_failed_charge_is_logged_and_counted_and_the_response_still_goes(self):
        self.redis = self.start_redis()
        self.start_instances(1, login(), [limited_route("login", [failures_limit()], path="/login")],
                             redis_store(self.redis, timeout="200ms"))
        self.assertEqual(self.attempt(0, "right").status, 200)
        # Redis stops answering between the check and the charge: the 401 still reaches the
        # client (after the store's deadline), the failure is counted as failed and logged.
        def pause_then_fail(req, conn):
            self.redis.pause(1500)
            conn.send_response(401, body=b"no")
        self.up.behaviour = pause_then_fail
        r = self.attempt(0, "wrong")
        self.assertEqual(r.status, 401)
        self.assertEqual(self.charges("failed"), 1)
        self.assertEqual(self.charges(), 0)
        self.instances[0].wait_log(r"route login: charging a 401 response to the limits that count it failed")
