"""Exemptions (`exempt:` at the top level and per route): a request named by a client CIDR, a
header from a trusted peer or a method skips every limit of its route (every algorithm) with
no store call: Redis's INFO commandstats counts no FCALL/EVALSHA for it. It is logged
`decision=exempt`, gets no rate-limit headers, and is counted in
sluice_ratelimit_exempt_total, the summary line and /stats.json. An exempt header from a
peer outside client_ip.trusted_proxies is ignored.
"""

import json
import re
import threading
import unittest

from admin_api import Metrics, admin_request, wait_admin
from harness import (LOOPBACK, RawClient, SluiceTestCase, by_path, decide_calls, delayed, free_port, leaky_bucket,
                     limited_route, proxy_config, redis_store, respond, sliding_window, token_bucket, wait_until)

RATE_LIMIT_HEADERS = ("ratelimit-policy", "ratelimit", "retry-after")
SECRET = "let-me-in"



def every_kind(prefix):
    """One limit of each algorithm, each admitting one request an hour per client."""
    return [token_bucket(f"{prefix}_tb", 1, "1h", 1),
            sliding_window(f"{prefix}_sw", 1, "1h"),
            {"name": f"{prefix}_fw", "algorithm": "fixed_window", "limit": 1, "window": "1h"},
            leaky_bucket(f"{prefix}_lb", 1, "1h", 1)]


class ExemptTest(SluiceTestCase):
    def setUp(self):
        self.up = self.start_upstream(by_path({"/slot/slow": delayed(1.5, respond(200, b"slow"))},
                                              default=respond(200, b"ok")))
        self.redis = self.start_redis()
        self.port, self.admin = free_port(), free_port()
        routes = [
            limited_route("all", every_kind("all")),
            limited_route("slot", [{"name": "one", "algorithm": "concurrency", "limit": 1, "key": []}]),
            dict(limited_route("pre", [token_bucket("pre_tb", 1, "1h", 1)]), exempt={"methods": ["OPTIONS"]}),
        ]
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, routes,
            client_ip={"trusted_proxies": ["127.0.0.1/32"]},
            logging={"summary_interval": "1s"},
            extra={"store": redis_store(self.redis),
                   "admin": {"listen": f"{LOOPBACK}:{self.admin}"},
                   "exempt": {"client_ips": ["203.0.113.0/24", "2001:db8::/32"],
                              "headers": [{"name": "X-Internal", "value": SECRET}]}}))
        self.sluice.wait_store_connected(2)
        wait_admin(self.admin)

    def request(self, target, client=None, headers=(), method="GET", source=None):
        """One request on a connection of its own (from `source`, a loopback address)."""
        fields = [("X-Forwarded-For", client)] if client else []
        with RawClient(self.port, source=source) as c:
            return c.request(method, target, fields + list(headers))

    def assert_exempt(self, response):
        self.assertEqual(response.status, 200, response)
        for name in RATE_LIMIT_HEADERS:
            self.assertFalse(response.has_header(name), f"{name} on an exempt response")

    def test_exempt_clients_skip_every_limit_without_a_store_call(self):
        before = decide_calls(self.redis)
        for client in ["203.0.113.9"] * 5 + ["2001:db8::5"] * 5:
            self.assert_exempt(self.request("/all/x", client))
        self.assertEqual(decide_calls(self.redis), before, "an exempt request reached Redis")
        # Another client meets every limit: one request, then refused.
        self.assertEqual(self.request("/all/x", "198.51.100.7").status, 200)
        self.assertEqual(self.request("/all/x", "198.51.100.7").status, 429)
        self.assertGreater(decide_calls(self.redis), before)
        # Logged and counted as exempt.
        wait_until(lambda: len([e for e in self.sluice.access_entries() if e.get("route") == "all"]) == 12, 5.0,
                   message="12 access lines")
        entries = [e for e in self.sluice.access_entries() if e.get("route") == "all"]
        self.assertEqual([e["decision"] for e in entries], ["exempt"] * 10 + ["allowed", "limited"])
        self.assertEqual([e["limit"] for e in entries[:10]], ["-"] * 10)
        self.assertEqual(Metrics.fetch(self.admin).get("sluice_ratelimit_exempt_total", route="all"), 10)
        stats = json.loads(admin_request(self.admin, "/stats.json")[2])
        self.assertEqual(next(r for r in stats["routes"] if r["route"] == "all")["exempt"], 10)
        # The summary lines (one a second) add up to the same.
        wait_until(lambda: sum(int(n) for n in re.findall(r"summary route=all .*? exempt=(\d+) ",
                                                          self.sluice.stdout_text())) == 10,
                   5.0, message="summary lines of route all adding up to exempt=10")

    def test_an_exempt_request_takes_no_concurrency_slot(self):
        # A client holds the route's one slot; an exempt request goes through meanwhile,
        # another client is refused.
        held = {}
        holder = threading.Thread(target=lambda: held.setdefault("status", self.request("/slot/slow", "198.51.100.1").status))
        holder.start()
        self.addCleanup(holder.join)
        wait_until(lambda: len(self.up.requests) == 1, 5.0, message="the slot holder upstream")
        self.assert_exempt(self.request("/slot/fast", "203.0.113.1"))
        self.assertEqual(self.request("/slot/fast", "198.51.100.2").status, 429)
        holder.join()
        self.assertEqual(held["status"], 200)

    def test_an_exempt_header_counts_only_from_a_trusted_peer(self):
        before = decide_calls(self.redis)
        for _ in range(5):
            self.assert_exempt(self.request("/all/h", "198.51.100.20", [("x-internal", SECRET)]))
        self.assertEqual(decide_calls(self.redis), before)
        # A wrong value is no exemption.
        self.assertEqual(self.request("/all/h", "198.51.100.21", [("X-Internal", SECRET + "x")]).status, 200)
        self.assertEqual(self.request("/all/h", "198.51.100.21", [("X-Internal", SECRET + "x")]).status, 429)
        # 127.0.0.2 is not a trusted proxy: its header is ignored (and its X-Forwarded-For).
        self.assertEqual(self.request("/all/u", "203.0.113.5", [("X-Internal", SECRET)], source="127.0.0.2").status, 200)
        self.assertEqual(self.request("/all/u", "203.0.113.5", [("X-Internal", SECRET)], source="127.0.0.2").status, 429)

    def test_a_route_exempts_a_method(self):
        before = decide_calls(self.redis)
        for _ in range(4):
            self.assert_exempt(self.request("/pre", "198.51.100.30", method="OPTIONS"))
        self.assertEqual(decide_calls(self.redis), before)
        self.assertEqual(self.request("/pre", "198.51.100.30").status, 200)
        self.assertEqual(self.request("/pre", "198.51.100.30").status, 429)
        # The route's exemption is its own: OPTIONS on another route is limited.
        self.assertEqual(self.request("/all/o", "198.51.100.31", method="OPTIONS").status, 200)
        self.assertEqual(self.request("/all/o", "198.51.100.31", method="OPTIONS").status, 429)


if __name__ == "__main__":
    unittest.main()
