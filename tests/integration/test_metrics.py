"""The admin port: /metrics counters and histograms, connections gauge, /healthz, /readyz
(with a real redis-server stopped and restarted), /stats.json, 404/405, admin disabled."""

import time
import unittest

from admin_api import Metrics, admin_request, listening_ports, stats_json, wait_admin
from harness import SluiceTestCase, free_port, proxy_config, respond, wait_until
from harness import RedisServer

HOUR = "1h"  # a refill period far longer than any test: token counts are exact


def token_bucket(name, burst, rate=1, per=HOUR, **extra):
    return {"name": name, "algorithm": "token_bucket", "rate": rate, "per": per,
            "burst": burst, "key": ["client_ip"], **extra}


def sliding_window(name, limit, window=HOUR, **extra):
    return {"name": name, "algorithm": "sliding_window", "limit": limit, "window": window,
            "key": ["client_ip"], **extra}


class AdminTestCase(SluiceTestCase):
    def start_with_admin(self, routes, upstream, *, store=None, extra=None):
        self.port = free_port()
        self.admin = free_port()
        more = {"admin": {"listen": f"127.0.0.1:{self.admin}"}}
        if store:
            more["store"] = store
        if extra:
            more.update(extra)
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": upstream.address}, routes, extra=more))
        wait_admin(self.admin)
        return self.sluice

    def metrics(self):
        return Metrics.fetch(self.admin)

    def wait_metric(self, predicate, message, timeout=5.0):
        """Polls /metrics until predicate(Metrics) holds; returns that scrape. The counters
        are updated right after a response is written, so a scrape may briefly lag."""
        box = {}

        def check():
            box["m"] = self.metrics()
            return predicate(box["m"])
        try:
            wait_until(check, timeout, interval=0.05, message=message)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast scrape:\n{box.get('m').text if box else ''}") from None
        return box["m"]


def requests_by_route_code(m):
    return {(l["route"], l["code"]): v for l, v in m.select("sluice_requests_total")}


def decisions(m):
    return {(l["route"], l["limit"], l["decision"]): v
            for l, v in m.select("sluice_ratelimit_decisions_total")}


class CountersTest(AdminTestCase):
    """A known mix of traffic gives exactly these counter values."""

    def setUp(self):
        self.up = self.start_upstream(respond(200, b"ok"))
        self.start_with_admin([
            {"name": "login", "match": {"path_prefix": "/login"}, "upstream": "app",
             "limits": [token_bucket("burst", 7)]},
            {"name": "open", "match": {"path_prefix": "/open"}, "upstream": "app"},
        ], self.up)

    def test_exact_counters_for_a_known_mix(self):
        m = self.metrics()
        self.assertEqual(requests_by_route_code(m), {}, "zero-valued request counters must be omitted")
        self.assertEqual(decisions(m), {}, "zero-valued decision counters must be omitted")
        self.assertEqual(m.histogram("sluice_store_latency_seconds")[2], 0)
        self.assertEqual(m.histogram("sluice_upstream_latency_seconds")[2], 0)

        c = self.client(self.port)
        login = [c.request("GET", f"/login?n={i}").status for i in range(12)]
        self.assertEqual(login, [200] * 7 + [429] * 5)
        self.assertEqual([c.request("GET", "/open/x").status for _ in range(3)], [200] * 3)
        self.assertEqual([c.request("GET", "/nowhere").status for _ in range(2)], [404] * 2)
        c.close()
        self.assertEqual(len(self.up.requests), 10)

        m = self.wait_metric(lambda m: sum(requests_by_route_code(m).values()) >= 17,
                             "17 requests counted in sluice_requests_total")
        self.assertEqual(requests_by_route_code(m), {
            ("login", "200"): 7, ("login", "429"): 5, ("open", "200"): 3, ("-", "404"): 2})
        self.assertEqual(decisions(m), {
            ("login", "burst", "allowed"): 7, ("login", "burst", "limited"): 5})
        self.assertEqual(m.get("sluice_store_errors_total"), 0)

        # One store round trip per request on a limited route; one upstream exchange per
        # forwarded request.
        for name, count in (("sluice_store_latency_seconds", 12),
                            ("sluice_upstream_latency_seconds", 10)):
            with self.subTest(histogram=name):
                buckets, total, n = m.histogram(name)
                self.assertEqual(m.types.get(name), "histogram")
                self.assertEqual(n, count)
                self.assertGreater(len(buckets), 1)
                self.assertEqual(buckets[-1], (float("inf"), count), "+Inf bucket == _count")
                les = [le for le, _ in buckets]
                self.assertEqual(les, sorted(les))
                cumulative = [v for _, v in buckets]
                self.assertEqual(cumulative, sorted(cumulative), "buckets are cumulative")
                self.assertGreater(total, 0)
                self.assertLess(total, count * 5.0)

        self.assertEqual(m.types.get("sluice_requests_total"), "counter")
        self.assertEqual(m.types.get("sluice_ratelimit_decisions_total"), "counter")
        self.assertEqual(m.types.get("sluice_connections_active"), "gauge")
        self.assertEqual(m.types.get("sluice_store_up"), "gauge")
        self.assertEqual(m.get("sluice_store_up"), 1)
        self.assertEqual(m.get("sluice_log_dropped_total"), 0)
        self.assertIn(m.get("sluice_reloads_total", result="ok"), (None, 0))
        self.assertIn(m.get("sluice_reloads_total", result="failed"), (None, 0))

        # /stats.json tells the same story per route.
        doc = stats_json(self.admin)
        routes = {r["route"]: r for r in doc["routes"]}
        self.assertEqual({k: routes["login"][k] for k in
                          ("requests", "forwarded", "limited", "shadow_limited", "store_errors")},
                         {"requests": 12, "forwarded": 7, "limited": 5, "shadow_limited": 0,
                          "store_errors": 0})
        self.assertEqual((routes["open"]["requests"], routes["open"]["forwarded"],
                          routes["open"]["limited"]), (3, 3, 0))
        self.assertEqual((routes["-"]["requests"], routes["-"]["forwarded"]), (2, 0))
        self.assertIs(doc["store_up"], True)
        self.assertGreater(doc["uptime_seconds"], 0)

    def test_metrics_content_type(self):
        status, headers, body = admin_request(self.admin, "/metrics")
        self.assertEqual(status, 200)
        ctype = headers.get("content-type", "")
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        self.assertIn("version=0.0.4", ctype)
        Metrics(body.decode())  # every line parses


class PerLimitDecisionsTest(AdminTestCase):
    """Decisions are counted per limit of the route: allowed, limited, shadow_limited."""

    def test_each_limit_counts_its_own_decision(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.start_with_admin([{
            "name": "api", "match": {"path_prefix": "/api"}, "upstream": "app",
            "limits": [token_bucket("burst", 5), sliding_window("window", 3),
                       token_bucket("watch", 1, shadow=True)],
        }], up)
        c = self.client(self.port)
        self.assertEqual([c.request("GET", "/api").status for _ in range(5)],
                         [200, 200, 200, 429, 429])
        m = self.wait_metric(lambda m: sum(requests_by_route_code(m).values()) >= 5,
                             "5 requests counted")
        self.assertEqual(requests_by_route_code(m), {("api", "200"): 3, ("api", "429"): 2})
        # burst (5) allows all five; window (3) allows three and limits two; the shadow
        # limit (1) allows the first and would have rejected the four others.
        self.assertEqual(decisions(m), {
            ("api", "burst", "allowed"): 5,
            ("api", "window", "allowed"): 3, ("api", "window", "limited"): 2,
            ("api", "watch", "allowed"): 1, ("api", "watch", "shadow_limited"): 4,
        })
        self.assertEqual(m.histogram("sluice_store_latency_seconds")[2], 5)
        self.assertEqual(m.histogram("sluice_upstream_latency_seconds")[2], 3)
        routes = {r["route"]: r for r in stats_json(self.admin)["routes"]}
        self.assertEqual((routes["api"]["requests"], routes["api"]["forwarded"],
                          routes["api"]["limited"], routes["api"]["shadow_limited"]),
                         (5, 3, 2, 4), "shadow_limited: every request the shadow limit "
                                       "would have rejected (as in the per-limit decisions)")


class ConnectionsGaugeTest(AdminTestCase):
    def test_gauge_follows_open_keep_alive_connections(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.start_with_admin(None, up)
        gauge = lambda m: m.get("sluice_connections_active")  # noqa: E731
        # The start-up check's probe connection may still be closing: wait for it. Every
        # scrape is itself an open admin connection, so a gauge that counted admin
        # connections would never read 0 here.
        self.wait_metric(lambda m: gauge(m) == 0, "admin connections are not client connections")

        clients = [self.client(self.port) for _ in range(5)]
        for c in clients:
            r = c.request("GET", "/")
            self.assertEqual(r.status, 200)
            self.assertFalse(r.connection_close())
        self.wait_metric(lambda m: gauge(m) == 5, "sluice_connections_active == 5")
        self.assertEqual(stats_json(self.admin)["connections_active"], 5)

        for c in clients[:3]:
            c.close()
        self.wait_metric(lambda m: gauge(m) == 2, "sluice_connections_active == 2 after 3 closed")
        for c in clients[3:]:
            c.close()
        self.wait_metric(lambda m: gauge(m) == 0, "sluice_connections_active back to 0")
        self.assertEqual(stats_json(self.admin)["connections_active"], 0)


class EndpointsTest(AdminTestCase):
    def setUp(self):
        self.up = self.start_upstream(respond(200, b"ok"))
        self.start_with_admin(None, self.up)

    def test_healthz(self):
        status, headers, body = admin_request(self.admin, "/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(body.strip(), b"ok")
        status, headers, body = admin_request(self.admin, "/healthz", method="HEAD")
        self.assertEqual((status, body), (200, b""))

    def test_readyz_with_memory_store_is_200(self):
        self.assertEqual(admin_request(self.admin, "/readyz")[0], 200)
        self.assertEqual(self.metrics().get("sluice_store_up"), 1)

    def test_unknown_path_is_404(self):
        for path in ("/", "/nope", "/metrics/extra", "/statsx", "/healthz/"):
            with self.subTest(path=path):
                self.assertEqual(admin_request(self.admin, path)[0], 404)

    def test_query_string_is_ignored(self):
        self.assertEqual(admin_request(self.admin, "/healthz?verbose=1")[0], 200)
        self.assertEqual(admin_request(self.admin, "/metrics?name[]=x")[0], 200)

    def test_other_methods_are_405(self):
        for method, path in (("POST", "/metrics"), ("PUT", "/healthz"), ("DELETE", "/readyz"),
                             ("POST", "/stats"), ("PATCH", "/stats.json"), ("POST", "/nope")):
            with self.subTest(method=method, path=path):
                status, headers, _ = admin_request(self.admin, path, method=method)
                self.assertEqual(status, 405)
                self.assertIn("GET", headers.get("allow", ""))


class AdminListenTest(SluiceTestCase):
    def test_admin_listens_where_configured_and_empty_disables_it(self):
        up = self.start_upstream(respond(200, b"ok"))
        port, admin = free_port(), free_port()
        s = self.start_sluice(proxy_config(port, {"app": up.address},
                                           extra={"admin": {"listen": f"127.0.0.1:{admin}"}}))
        wait_admin(admin)
        self.assertEqual(listening_ports(s.proc.pid), {port, admin})
        self.assertEqual(s.stop(), 0)

        # The kernel hands a port just freed out again: the new listener must not land on the
        # old admin port, or the refusal checked below would be the proxy answering.
        port = free_port()
        while port == admin:
            port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": up.address},
                                           extra={"admin": {"listen": ""}}))
        self.assertEqual(self.client(port).request("GET", "/").status, 200)
        self.assertEqual(listening_ports(s.proc.pid), {port},
                         "admin.listen \"\" must open no admin listener (not even the default "
                         "127.0.0.1:9901)")
        with self.assertRaises(OSError):
            admin_request(admin, "/healthz", timeout=1.0)


class ReadinessWithRedisTest(AdminTestCase):
    """/readyz and sluice_store_up follow a real redis-server going away and coming back;
    requests meanwhile follow on_error (allow / deny) and are counted as store errors."""

    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.cleanup)
        self.up = self.start_upstream(respond(200, b"ok"))
        self.start_with_admin([
            {"name": "open", "match": {"path_prefix": "/open"}, "upstream": "app",
             "limits": [token_bucket("burst", 1000)]},
            {"name": "strict", "match": {"path_prefix": "/strict"}, "upstream": "app",
             "on_error": "deny", "limits": [token_bucket("burst", 1000)]},
        ], self.up, store={"type": "redis", "on_error": "allow",
                           "redis": {"address": self.redis.address, "timeout": "1s"}})

    def readyz(self):
        return admin_request(self.admin, "/readyz", timeout=2.0)[0]

    def wait_ready_state(self, status, timeout):
        start = time.monotonic()
        wait_until(lambda: self.readyz() == status, timeout, interval=0.05,
                   message=f"/readyz answering {status}")
        return time.monotonic() - start

    def test_readyz_follows_redis(self):
        self.wait_ready_state(200, 5.0)
        self.assertEqual(self.metrics().get("sluice_store_up"), 1)
        self.assertIs(stats_json(self.admin)["store_up"], True)
        c = self.client(self.port)
        self.assertEqual(c.request("GET", "/open").status, 200)
        self.assertEqual(c.request("GET", "/strict").status, 200)
        self.sluice.wait_access(target="/strict", decision="allowed")

        self.redis.stop()
        self.wait_ready_state(503, 3.0)
        self.assertEqual(self.metrics().get("sluice_store_up"), 0)
        self.assertIs(stats_json(self.admin)["store_up"], False)
        self.assertEqual(admin_request(self.admin, "/healthz")[0], 200,
                         "/healthz stays 200 while the store is down")

        c = self.client(self.port)
        self.assertEqual([c.request("GET", "/open").status for _ in range(2)], [200, 200])
        self.assertEqual([c.request("GET", "/strict").status for _ in range(2)], [503, 503])
        m = self.wait_metric(lambda m: m.get("sluice_store_errors_total") == 4
                             and sum(requests_by_route_code(m).values()) >= 6,
                             "4 store errors and 6 requests counted")
        self.assertEqual(requests_by_route_code(m), {
            ("open", "200"): 3, ("strict", "200"): 1, ("strict", "503"): 2})
        self.assertEqual(decisions(m), {
            ("open", "burst", "allowed"): 1, ("open", "burst", "store_error_allowed"): 2,
            ("strict", "burst", "allowed"): 1, ("strict", "burst", "store_error_denied"): 2})
        routes = {r["route"]: r for r in stats_json(self.admin)["routes"]}
        self.assertEqual((routes["open"]["store_errors"], routes["strict"]["store_errors"]), (2, 2))

        self.redis.start()
        self.wait_ready_state(200, 6.0)
        self.assertEqual(self.metrics().get("sluice_store_up"), 1)
        c = self.client(self.port)
        self.assertEqual(c.request("GET", "/strict").status, 200)
        entry = self.sluice.wait_access(target="/strict", status="200", decision="allowed")
        self.assertTrue(entry)


if __name__ == "__main__":
    unittest.main()
