"""Rate limiting through the real proxy: exact status sequences, keys, the limited
response (status, Retry-After, rate-limit headers, problem body), shadow limits and the
memory store.

Every test starts its own redis-server (or uses the memory store), upstream and sluice.
Where time matters, the expected header values are worked out from the wall-clock time
that passed since the first request was sent (an upper bound of the Redis time that
passed between the decisions), so they are exact whenever the requests take < 1 s and
never fail on a slow machine.
"""

import math
import time
import unittest

from harness import (SluiceTestCase, build_request, decide_calls, free_port, limited_route, proxy_config,
                     ratelimit_headers, redis_store, respond, retry_after, sliding_window,
                     token_bucket, wait_until)

RATE_LIMIT_HEADERS = {"ratelimit-policy", "ratelimit", "x-ratelimit-limit",
                      "x-ratelimit-remaining", "x-ratelimit-reset"}
IETF = {"ratelimit-policy", "ratelimit"}
LEGACY = {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
WORKERS = 2  # proxy_config's default; one Redis connection each


def ceil_after(seconds, elapsed):
    """The values ceil(seconds - d) can take for d in [0, elapsed]: what a countdown of
    `seconds` started at the first decision reads `elapsed` seconds later at most."""
    return set(range(math.ceil(seconds - elapsed), math.ceil(seconds) + 1))


class LimitsTestCase(SluiceTestCase):
    """Starts an upstream, (by default) a redis-server and a sluice with these routes."""

    def start_proxy(self, routes, *, store="redis", responses=None, client_ip=None,
                    redis_timeout="2s", extra=None):
        self.up = self.start_upstream(respond(200, b"upstream ok", [("X-From", "upstream")]))
        cfg_extra = {}
        if store == "redis":
            self.redis = self.start_redis()
            # A generous deadline: these tests are about decisions, not store latency, and
            # must not see store errors on a loaded machine.
            cfg_extra["store"] = redis_store(self.redis, timeout=redis_timeout)
        elif store == "memory":
            cfg_extra["store"] = {"type": "memory"}
        if responses:
            cfg_extra["responses"] = responses
        if extra:
            cfg_extra.update(extra)
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, routes, client_ip=client_ip, extra=cfg_extra))
        if store == "redis":
            self.sluice.wait_store_connected(WORKERS)
        return self.port

    def get(self, client, target, headers=(), **kw):
        return client.request("GET", target, headers, **kw)

    def run_statuses(self, target, n, headers=(), fresh_connections=False):
        """Sends n GETs (one keep-alive connection unless fresh_connections); returns
        the responses."""
        out = []
        c = None if fresh_connections else self.client(self.port)
        for _ in range(n):
            conn = self.client(self.port) if fresh_connections else c
            out.append(self.get(conn, target, headers))
            if fresh_connections:
                conn.close()
        return out

    def assert_statuses(self, responses, expected, msg=""):
        got = [r.status for r in responses]
        self.assertEqual(got, list(expected), f"{msg} statuses {got}, bodies "
                         f"{[r.body[:120] for r in responses]}")

    def entries_for(self, prefix, count, timeout=5.0):
        """The access-log entries whose target starts with prefix, once there are count."""
        def enough():
            found = [e for e in self.sluice.access_entries() if e["target"].startswith(prefix)]
            return found if len(found) >= count else None
        try:
            return wait_until(enough, timeout, message=f"{count} access lines for {prefix}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.sluice.log_text()}") from None

    def assert_limited_problem(self, resp, route, limit, status=429):
        doc = self.assert_problem(resp, status)
        self.assertEqual(doc.get("status"), status, doc)
        self.assertEqual(doc.get("route"), route, doc)
        self.assertEqual(doc.get("limit"), limit, doc)
        self.assertGreaterEqual(retry_after(resp), 1)
        return doc


# ---------------------------------------------------------------------------------------

class TokenBucketTest(LimitsTestCase):
    def test_burst_3_rate_1_per_10s(self):
        self.start_proxy([limited_route("tb", [token_bucket("burst", 1, "10s", 3, key=[])])])
        c = self.client(self.port)
        started = time.monotonic()
        responses, elapsed = [], []
        for i in range(5):
            responses.append(self.get(c, f"/tb/{i}"))
            elapsed.append(time.monotonic() - started)
        self.assert_statuses(responses, [200, 200, 200, 429, 429])
        self.assertEqual(len(self.up.requests), 3, "only the admitted requests reach the upstream")
        self.assertEqual([r.target for r in self.up.requests], ["/tb/0", "/tb/1", "/tb/2"])

        # Forwarded and limited responses alike: quota = burst, window = burst*per/rate.
        for i, r in enumerate(responses):
            h = ratelimit_headers(r)
            self.assertEqual(h["names"], IETF, f"response {i}: {r.headers}")
            self.assertEqual(h["policy"], ("burst", 3, 30), f"response {i}")
            name, remaining, reset = h["state"]
            self.assertEqual(name, "burst")
            self.assertEqual(remaining, max(0, 2 - i), f"response {i}: remaining")
            if i < 3:
                # After i+1 admitted requests the bucket is full again (i+1)*10 s after the
                # first decision.
                self.assertIn(reset, ceil_after(10 * (i + 1), elapsed[i]), f"response {i}: reset")
        for i in (3, 4):
            self.assert_limited_problem(responses[i], "tb", "burst")
            # The next token arrives 10 s after the first decision: Retry-After, and t too (when
            # more quota is there), not when the whole bucket is full again (30 s).
            self.assertIn(retry_after(responses[i]), ceil_after(10, elapsed[i]) - {0})
            self.assertEqual(ratelimit_headers(responses[i])["state"][2], retry_after(responses[i]))
            self.assertEqual(responses[i].header("x-from"), None)
        for r in responses[:3]:
            self.assertEqual(r.body, b"upstream ok")
            self.assertEqual(r.header("x-from"), "upstream")
            self.assertFalse(r.has_header("retry-after"))

        entries = self.entries_for("/tb/", 5)
        self.assertEqual([e["decision"] for e in entries],
                         ["allowed"] * 3 + ["limited"] * 2)
        self.assertEqual([e["limit"] for e in entries], ["burst"] * 5)
        self.assertEqual([e["remaining"] for e in entries], ["2", "1", "0", "0", "0"])
        self.assertEqual([e["route"] for e in entries], ["tb"] * 5)
        self.assertEqual([e["status"] for e in entries], ["200"] * 3 + ["429"] * 2)

    def test_fractional_rate_1_per_2s(self):
        # One token every 2 s, bucket of 1: half a token after 1 s is not a token.
        self.start_proxy([limited_route("frac", [token_bucket("slow", 1, "2s", 1, key=[])])])
        c = self.client(self.port)
        sent = time.monotonic()
        first = self.get(c, "/frac/1")
        second = self.get(c, "/frac/2")
        elapsed = time.monotonic() - sent
        self.assertEqual((first.status, second.status), (200, 429))
        self.assertEqual(ratelimit_headers(first)["policy"], ("slow", 1, 2))
        self.assertEqual(ratelimit_headers(first)["state"][:2], ("slow", 0))
        self.assertIn(retry_after(second), ceil_after(2, elapsed) - {0})

        # 1.1 s, not 1.0: exactly at a whole second, the few hundred microseconds between
        # this clock and the one that decides (Redis's, or sluice's for a remembered
        # rejection) decide whether 0.9997 s or 1.0003 s is left, i.e. Retry-After 1 or 2.
        time.sleep(max(0.0, sent + 1.1 - time.monotonic()))
        half = self.get(c, "/frac/3")
        self.assertEqual(half.status, 429, "1.1 s after the first request only 0.55 token is back")
        self.assertEqual(retry_after(half), 1)

        time.sleep(max(0.0, sent + 2.4 - time.monotonic()))
        again = self.get(c, "/frac/4")
        self.assertEqual(again.status, 200, "2 s after the first request the token is back")
        self.assertEqual(self.get(c, "/frac/5").status, 429)
        self.assertEqual([r.target for r in self.up.requests], ["/frac/1", "/frac/4"])

    def test_window_of_a_fractional_rate_is_rounded_up(self):
        # burst 2 at 3 per 2 s: full again after 2*2/3 = 1.33 s -> w=2.
        self.start_proxy([limited_route("w", [token_bucket("b", 3, "2s", 2, key=[])])])
        r = self.get(self.client(self.port), "/w")
        self.assertEqual(r.status, 200)
        self.assertEqual(ratelimit_headers(r)["policy"], ("b", 2, 2))
        self.assertEqual(ratelimit_headers(r)["state"], ("b", 1, 1))


class MemoryStoreTest(LimitsTestCase):
    def test_same_token_bucket_sequence_without_redis(self):
        self.start_proxy([limited_route("tb", [token_bucket("burst", 1, "10s", 3, key=[])])],
                         store="memory")
        started = time.monotonic()
        # New connections: both workers take turns, and share the instance's state.
        responses = self.run_statuses("/tb/m", 5, fresh_connections=True)
        elapsed = time.monotonic() - started
        self.assert_statuses(responses, [200, 200, 200, 429, 429])
        self.assertEqual(len(self.up.requests), 3)
        self.assertEqual([ratelimit_headers(r)["state"][1] for r in responses], [2, 1, 0, 0, 0])
        self.assertEqual(ratelimit_headers(responses[0])["policy"], ("burst", 3, 30))
        self.assert_limited_problem(responses[3], "tb", "burst")
        self.assertIn(retry_after(responses[4]), ceil_after(10, elapsed) - {0})
        entries = self.entries_for("/tb/m", 5)
        self.assertEqual([e["decision"] for e in entries], ["allowed"] * 3 + ["limited"] * 2)


class SlidingWindowTest(LimitsTestCase):
    def test_limit_3_window_2s_rolls(self):
        self.start_proxy([limited_route("sw", [sliding_window("win", 3, "2s", key=[])])])
        c = self.client(self.port)
        t0 = time.monotonic()
        first = self.get(c, "/sw/1")
        t_first = time.monotonic()            # its decision was at or before this
        self.assertEqual(first.status, 200)
        self.assertEqual(ratelimit_headers(first)["policy"], ("win", 3, 2))
        self.assertEqual(ratelimit_headers(first)["state"], ("win", 2, 2))

        # Two more a second later: the window is full.
        time.sleep(max(0.0, t0 + 1.0 - time.monotonic()))
        t1 = time.monotonic()                 # their decisions were at or after this
        batch = [self.get(c, "/sw/2"), self.get(c, "/sw/3"), self.get(c, "/sw/4")]
        t_batch = time.monotonic()
        self.assert_statuses(batch, [200, 200, 429])
        self.assertEqual([ratelimit_headers(r)["state"][1] for r in batch], [1, 0, 0])
        self.assert_limited_problem(batch[2], "sw", "win")
        # The oldest (the first) leaves 2 s after it was decided: about 1 s from now.
        self.assertIn(retry_after(batch[2]), {1, 2})

        # Once the first request has left the window (>= 2 s after it), but well before
        # the other two leave (2 s after t1), exactly one more fits.
        time.sleep(max(0.0, t_first + 2.25 - time.monotonic()))
        rolled = [self.get(c, "/sw/5"), self.get(c, "/sw/6")]
        self.assertLess(time.monotonic(), t1 + 2.0,
                        "the machine was too slow for this check to mean anything")
        self.assert_statuses(rolled, [200, 429], "one slot freed by the first request:")

        # After the two of the batch have left too, two more fit.
        time.sleep(max(0.0, t_batch + 2.25 - time.monotonic()))
        later = [self.get(c, "/sw/7"), self.get(c, "/sw/8"), self.get(c, "/sw/9")]
        self.assert_statuses(later, [200, 200, 429], "after the window passed:")
        self.assertEqual([r.target for r in self.up.requests],
                         ["/sw/1", "/sw/2", "/sw/3", "/sw/5", "/sw/7", "/sw/8"])


class MultiLimitTest(LimitsTestCase):
    def test_rejected_request_consumes_no_quota_of_any_limit(self):
        # "per_key" (1 a minute per X-Api-Key) and "route" (shared, 4 a minute). A
        # limited response names the first limit in route order that rejected.
        self.start_proxy([limited_route("multi", [
            sliding_window("per_key", 1, "1m", key=["header:X-Api-Key"]),
            sliding_window("route", 4, "1m", key=[]),
        ])])
        c = self.client(self.port)
        key = [("X-Api-Key", "k1")]
        r1 = self.get(c, "/multi/1", key)
        self.assertEqual(r1.status, 200)
        # Advertised: the limit closest to exhaustion (per_key: 0 left; route: 3 left).
        self.assertEqual(ratelimit_headers(r1)["state"][:2], ("per_key", 0))

        rejected = [self.get(c, f"/multi/rej{i}", key) for i in range(5)]
        self.assert_statuses(rejected, [429] * 5)
        for r in rejected:
            self.assert_limited_problem(r, "multi", "per_key")
            self.assertEqual(ratelimit_headers(r)["policy"], ("per_key", 1, 60))
            self.assertEqual(ratelimit_headers(r)["state"][:2], ("per_key", 0))

        # Without the header only "route" applies. Had the five rejected requests taken
        # from it, it would be exhausted; it has 3 left.
        free = [self.get(c, f"/multi/free{i}") for i in range(4)]
        self.assert_statuses(free, [200, 200, 200, 429])
        self.assertEqual([ratelimit_headers(r)["state"] for r in free[:3]],
                         [("route", 2, 60), ("route", 1, 60), ("route", 0, 60)])
        self.assert_limited_problem(free[3], "multi", "route")
        # Now "route" rejects; a new key is allowed by per_key but still rejected, and
        # consumes nothing of per_key either: the same k2 is rejected by "route" again,
        # not by per_key (which comes first and would name itself had it been consumed).
        r = self.get(c, "/multi/k2a", [("X-Api-Key", "k2")])
        self.assert_limited_problem(r, "multi", "route")
        r = self.get(c, "/multi/k2b", [("X-Api-Key", "k2")])
        self.assert_limited_problem(r, "multi", "route")
        self.assertEqual(len(self.up.requests), 4)

        entries = self.entries_for("/multi/", 12)
        limited = [e for e in entries if e["decision"] == "limited"]
        self.assertEqual([e["limit"] for e in limited], ["per_key"] * 5 + ["route"] * 3)


class KeyTest(LimitsTestCase):
    TRUSTED = {"trusted_proxies": ["127.0.0.0/8"]}

    def test_clients_behind_a_trusted_proxy_get_separate_quotas(self):
        self.start_proxy([limited_route("ip", [sliding_window("per_ip", 2, "1m")])],
                         client_ip=self.TRUSTED)
        c = self.client(self.port)
        a = [("X-Forwarded-For", "203.0.113.7")]
        b = [("X-Forwarded-For", "198.51.100.2")]
        self.assert_statuses([self.get(c, "/ip/a1", a), self.get(c, "/ip/a2", a)], [200, 200])
        self.assert_statuses([self.get(c, "/ip/a3", a)], [429])
        self.assert_statuses([self.get(c, "/ip/b1", b), self.get(c, "/ip/b2", b),
                              self.get(c, "/ip/b3", b)], [200, 200, 429])
        # The right-most address that is not trusted is the client, however the list is
        # spelled: still client a.
        for xff in (["198.51.100.9, 203.0.113.7"], ["203.0.113.7, 127.0.0.5"],
                    ["10.1.1.1", "203.0.113.7"], ["203.0.113.7,127.0.0.9, 127.0.0.8"]):
            r = self.get(c, "/ip/a-again", [("X-Forwarded-For", v) for v in xff])
            self.assertEqual(r.status, 429, f"X-Forwarded-For {xff}")
        # The name in any case is the same field; a name that only looks like it is not one
        # (the client is then the trusted peer itself, which has a quota of its own).
        r = self.get(c, "/ip/a-case", [("x-FORWARDED-for", "203.0.113.7")])
        self.assertEqual(r.status, 429)
        r = self.get(c, "/ip/fox", [("X-Forwarded-Fox", "203.0.113.7")])
        self.assertEqual(r.status, 200)
        # A third client still has its full quota.
        r = self.get(c, "/ip/c1", [("X-Forwarded-For", "192.0.2.33")])
        self.assertEqual(r.status, 200)
        self.assertEqual(ratelimit_headers(r)["state"][:2], ("per_ip", 1))
        self.assertEqual(len(self.up.requests), 6)

    def test_untrusted_peer_cannot_escape_with_x_forwarded_for(self):
        self.start_proxy([limited_route("ip", [sliding_window("per_ip", 2, "1m")])],
                         client_ip={"trusted_proxies": ["10.0.0.0/8"]})
        c = self.client(self.port)
        statuses = []
        for i in range(6):
            spoof = [("X-Forwarded-For", f"198.51.100.{i + 1}")]
            statuses.append(self.get(c, f"/ip/spoof{i}", spoof).status)
        self.assertEqual(statuses, [200, 200, 429, 429, 429, 429])
        # Nor without the header: it is the same client, 127.0.0.1.
        self.assertEqual(self.get(self.client(self.port), "/ip/plain").status, 429)
        self.assertEqual(len(self.up.requests), 2)
        keys = self.redis.keys("sluice*")
        self.assertTrue(keys and all("127.0.0.1" in k for k in keys), keys)
        self.assertFalse(any("198.51.100" in k for k in keys), keys)

    def test_header_key(self):
        self.start_proxy([limited_route("api", [
            sliding_window("per_key", 2, "1m", key=["header:X-Api-Key"])])])
        c = self.client(self.port)
        ka = [("X-Api-Key", "alpha")]
        kb = [("X-Api-Key", "beta")]
        self.assert_statuses([self.get(c, "/api/a", ka) for _ in range(3)], [200, 200, 429])
        self.assert_statuses([self.get(c, "/api/b", kb) for _ in range(3)], [200, 200, 429])
        before = len(self.up.requests)
        # Without the header the limit does not apply at all, past its limit too.
        bare = [self.get(c, f"/api/none{i}") for i in range(5)]
        self.assert_statuses(bare, [200] * 5, "no X-Api-Key:")
        self.assertEqual(len(self.up.requests), before + 5)
        entries = self.entries_for("/api/none", 5)
        for e in entries:
            self.assertIn(e["decision"], ("allowed", "unlimited"), e["line"])
            self.assertEqual(e["limit"], "-", e["line"])
        # The keyed clients are still limited.
        self.assertEqual(self.get(c, "/api/a", ka).status, 429)

    def test_empty_key_is_one_counter_for_the_route(self):
        self.start_proxy([limited_route("shared", [sliding_window("all", 3, "1m", key=[])])],
                         client_ip=self.TRUSTED)
        c = self.client(self.port)
        statuses = [self.get(c, f"/shared/{i}", [("X-Forwarded-For", f"192.0.2.{i + 1}"),
                                                  ("X-Api-Key", f"k{i}")]).status
                    for i in range(6)]
        self.assertEqual(statuses, [200, 200, 200, 429, 429, 429])
        # Other connections too.
        self.assertEqual(self.get(self.client(self.port), "/shared/x").status, 429)
        self.assertEqual(len(self.up.requests), 3)

    def test_path_and_method_keys(self):
        self.start_proxy([
            limited_route("bypath", [sliding_window("per_path", 1, "1m", key=["path"])]),
            limited_route("bymethod", [sliding_window("per_method", 1, "1m", key=["method"])]),
        ])
        c = self.client(self.port)
        self.assertEqual(self.get(c, "/bypath/a").status, 200)
        self.assertEqual(self.get(c, "/bypath/a?q=1").status, 429, "the query is not the path")
        self.assertEqual(self.get(c, "/bypath/b").status, 200)
        self.assertEqual(self.get(c, "/bypath/b").status, 429)
        self.assertEqual(c.request("GET", "/bymethod/x").status, 200)
        self.assertEqual(c.request("GET", "/bymethod/y").status, 429)
        self.assertEqual(c.request("DELETE", "/bymethod/x").status, 200)
        self.assertEqual(c.request("DELETE", "/bymethod/x").status, 429)
        self.assertEqual(len(self.up.requests), 4)


class LimitedResponseTest(LimitsTestCase):
    def test_limited_response_problem_body_upstream_untouched_connection_kept(self):
        self.start_proxy([
            limited_route("login", [token_bucket("burst", 1, "1m", 1, key=[])]),
            {"name": "open", "match": {"path_prefix": "/open"}, "upstream": "app"},
        ])
        c = self.client(self.port)
        self.assertEqual(self.get(c, "/login").status, 200)
        before = self.up.snapshot()
        for _ in range(3):
            r = self.get(c, "/login", [("Content-Type", "text/plain")])
            doc = self.assert_limited_problem(r, "login", "burst")
            self.assertEqual(r.status, 429)
            self.assertEqual(int(r.header("content-length")), len(r.body))
            self.assertFalse(r.connection_close(), r.headers)
            self.assertIn(retry_after(r), set(range(1, 61)))
            self.assertIsInstance(doc.get("status"), int)
        # A limited POST with a small body: the body is read and dropped, the connection
        # stays usable.
        r = c.request("POST", "/login", body=b"user=a&password=b")
        self.assert_limited_problem(r, "login", "burst")
        self.assert_nothing_reached(self.up, before)
        # The same keep-alive connection still works, for a route without limits too.
        r = self.get(c, "/open/after")
        self.assertEqual((r.status, r.body), (200, b"upstream ok"))
        self.assertEqual(self.up.last().target, "/open/after")
        self.assertFalse(r.has_header("ratelimit") or r.has_header("ratelimit-policy"))
        entry = self.sluice.wait_access(target="/open/after")
        self.assertEqual((entry["decision"], entry["limit"]), ("unlimited", "-"))

    def test_limited_head_request_gets_the_headers_without_the_body(self):
        # RFC 9110 9.3.2: an answer to HEAD has the headers a GET would get and no content.
        # Bytes of a body after it would be read as the next response on the connection.
        self.start_proxy([limited_route("h", [token_bucket("burst", 1, "1m", 1, key=[])])])
        c = self.client(self.port)
        self.assertEqual(self.get(c, "/h/first").status, 200)
        before = self.up.snapshot()
        as_get = self.get(c, "/h/get")
        self.assert_limited_problem(as_get, "h", "burst")
        r = c.request("HEAD", "/h/head")
        self.assertEqual(r.status, 429)
        self.assertEqual(r.body, b"")
        self.assertEqual(r.header("content-type"), "application/problem+json")
        self.assertEqual(int(r.header("content-length")), len(as_get.body),
                         "the Content-Length a GET gets")
        self.assertFalse(r.connection_close(), r.headers)
        self.assertGreaterEqual(retry_after(r), 1)
        # An unrouted HEAD (404) too; then the connection still reads the next response whole.
        r = c.request("HEAD", "/nowhere")
        self.assertEqual((r.status, r.body), (404, b""))
        after = self.get(c, "/h/last")
        self.assert_limited_problem(after, "h", "burst")
        self.assert_nothing_reached(self.up, before)
        entry = self.sluice.wait_access(target="/h/head")
        self.assertEqual((entry["method"], entry["status"], entry["bytes"], entry["decision"]),
                         ("HEAD", "429", "0", "limited"))

    def test_custom_limited_status(self):
        for status in (503, 420):
            with self.subTest(limited_status=status):
                self.start_proxy([limited_route("c", [sliding_window("one", 1, "1m", key=[])])],
                                 responses={"limited_status": status})
                c = self.client(self.port)
                self.assertEqual(self.get(c, "/c").status, 200)
                r = self.get(c, "/c")
                self.assert_limited_problem(r, "c", "one", status=status)
                self.assertEqual(ratelimit_headers(r)["state"][:2], ("one", 0))
                entry = self.sluice.wait_access(target="/c", status=str(status))
                self.assertEqual(entry["decision"], "limited")
                self.assertEqual(len(self.up.requests), 1)

    def test_header_styles_with_exact_values(self):
        expected_names = {"ietf": IETF, "legacy": LEGACY, "both": IETF | LEGACY, "none": set()}
        for style, names in expected_names.items():
            with self.subTest(headers=style):
                self.start_proxy(
                    [limited_route("h", [sliding_window("minute", 5, "1m", key=[]),
                                         token_bucket("burst", 1, "4s", 2, key=[])])],
                    responses={"headers": style})
                c = self.client(self.port)
                started = time.monotonic()
                rs = [self.get(c, "/h") for _ in range(3)]
                elapsed = time.monotonic() - started
                self.assert_statuses(rs, [200, 200, 429])
                for i, r in enumerate(rs):
                    self.assertEqual({n for n in r.header_names() if n in RATE_LIMIT_HEADERS},
                                     names, f"{style} response {i}: {r.headers}")
                h = [ratelimit_headers(r) for r in rs]
                # After 1 request: minute 4 left, burst 1 left -> burst is advertised
                # (bucket of 2 at 1 per 4 s: q=2, w=8; full again 4 s after).
                # After 2: burst 0 left, full again in 8 s. Then burst rejects: its t is when
                # it admits the request again (the next token, 4 s), as Retry-After; its
                # X-RateLimit-Reset still when it is full again (8 s).
                want = [("burst", 2, 8, 1, 4, 4), ("burst", 2, 8, 0, 8, 8), ("burst", 2, 8, 0, 4, 8)]
                for i, (name, q, w, rem, t, full) in enumerate(want):
                    if style in ("ietf", "both"):
                        self.assertEqual(h[i]["policy"], (name, q, w), f"{style} {i}")
                        self.assertEqual(h[i]["state"][:2], (name, rem), f"{style} {i}")
                        self.assertIn(h[i]["state"][2], ceil_after(t, elapsed) - ({0} if i == 2 else set()),
                                      f"{style} {i}")
                    if style in ("legacy", "both"):
                        self.assertEqual((h[i]["limit"], h[i]["remaining"]), (q, rem), f"{style} {i}")
                        self.assertIn(h[i]["reset"], ceil_after(full, elapsed), f"{style} {i}")
                self.assert_limited_problem(rs[2], "h", "burst")
                # The next token of "burst" comes 4 s after the first decision.
                self.assertIn(retry_after(rs[2]), ceil_after(4, elapsed) - {0})

    def test_a_remembered_refusal_counts_down_to_the_full_quota_too(self):
        # A worker answers a refusal it had from Redis from memory until its retry time: the
        # full quota's time (X-RateLimit-Reset) counts down with Retry-After.
        self.start_proxy([limited_route("b", [token_bucket("slow", 1, "20s", 2, key=[])])],
                         responses={"headers": "both"})
        c = self.client(self.port)
        self.assert_statuses([self.get(c, "/b") for _ in range(2)], [200, 200])
        first = self.get(c, "/b")
        self.assertEqual(first.status, 429)
        # One token in 20 s, the two of a full bucket in 40 s.
        self.assertEqual(retry_after(first), 20)
        self.assertEqual(ratelimit_headers(first)["reset"], 40)
        calls = decide_calls(self.redis)
        time.sleep(1.2)
        again = self.get(c, "/b")
        self.assertEqual(again.status, 429)
        self.assertEqual(decide_calls(self.redis), calls, "answered from the worker's memory")
        h = ratelimit_headers(again)
        self.assertLessEqual(retry_after(again), 19)
        self.assertEqual(h["state"][2], retry_after(again))
        self.assertEqual(h["reset"], retry_after(again) + 20)

    def test_sliding_window_headers_when_limited(self):
        self.start_proxy([limited_route("s", [sliding_window("win", 2, "10s", key=[])])],
                         responses={"headers": "both"})
        c = self.client(self.port)
        started = time.monotonic()
        rs = [self.get(c, "/s") for _ in range(3)]
        elapsed = time.monotonic() - started
        self.assert_statuses(rs, [200, 200, 429])
        h = ratelimit_headers(rs[2])
        self.assertEqual(h["policy"], ("win", 2, 10))
        self.assertEqual(h["state"][:2], ("win", 0))
        self.assertIn(h["state"][2], ceil_after(10, elapsed))
        self.assertEqual((h["limit"], h["remaining"]), (2, 0))
        self.assertIn(h["reset"], ceil_after(10, elapsed))
        self.assertIn(retry_after(rs[2]), ceil_after(10, elapsed) - {0})

    def test_expect_100_continue_limited_gets_429_without_100(self):
        self.start_proxy([limited_route("up", [sliding_window("one", 1, "1m", key=[])])])
        self.assertEqual(self.get(self.client(self.port), "/up/first").status, 200)
        before = self.up.snapshot()
        c = self.client(self.port)
        c.send(build_request("POST", "/up/file", [("Expect", "100-continue"),
                                                  ("Content-Length", "1000")]))
        r = c.read_response(method="POST", informational="return", timeout=3)
        self.assertEqual(r.status, 429, "a limited request is answered before any 100 Continue")
        self.assertEqual(r.informational, [])
        self.assert_limited_problem(r, "up", "one")
        self.assert_nothing_reached(self.up, before)


class ShadowTest(LimitsTestCase):
    def test_shadow_limit_forwards_and_logs(self):
        self.start_proxy([limited_route("sh", [sliding_window("trial", 2, "1m", key=[],
                                                              shadow=True)])])
        c = self.client(self.port)
        rs = [self.get(c, f"/sh/{i}") for i in range(5)]
        self.assert_statuses(rs, [200] * 5)
        self.assertEqual([r.body for r in rs], [b"upstream ok"] * 5)
        self.assertEqual(len(self.up.requests), 5)
        for r in rs:
            self.assertFalse(r.has_header("retry-after"))
        entries = self.entries_for("/sh/", 5)
        self.assertEqual([e["decision"] for e in entries], ["allowed"] * 2 + ["shadow_limited"] * 3)
        for e in entries[2:]:
            self.assertEqual((e["limit"], e["status"]), ("trial", "200"), e["line"])

    def test_shadow_next_to_enforced_limit(self):
        self.start_proxy([limited_route("mix", [
            sliding_window("trial", 1, "1m", key=[], shadow=True),
            sliding_window("real", 3, "1m", key=[]),
        ])])
        c = self.client(self.port)
        rs = [self.get(c, f"/mix/{i}") for i in range(4)]
        self.assert_statuses(rs, [200, 200, 200, 429])
        # The headers speak of the enforced limit only.
        self.assertEqual([ratelimit_headers(r)["state"][:2] for r in rs],
                         [("real", 2), ("real", 1), ("real", 0), ("real", 0)])
        self.assert_limited_problem(rs[3], "mix", "real")
        entries = self.entries_for("/mix/", 4)
        self.assertEqual([e["decision"] for e in entries],
                         ["allowed", "shadow_limited", "shadow_limited", "limited"])
        self.assertEqual([e["limit"] for e in entries[1:3]], ["trial", "trial"])
        self.assertEqual(entries[3]["limit"], "real")


if __name__ == "__main__":
    unittest.main()
