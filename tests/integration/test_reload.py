"""Configuration reload on SIGHUP: under concurrent load, limits and routes changing, an
invalid file refused, limiter state kept, in-flight requests finishing on the old config,
settings that need a restart."""

import copy
import re
import signal
import threading
import time
import unittest

from admin_api import Metrics, listening_ports, wait_admin
from harness import (RawClient, SluiceTestCase, build_request, by_path, delayed,
                     free_port, proxy_config, respond, to_yaml, wait_until)
from harness import RedisServer

HOUR = "1h"  # no refill during a test: counts are exact


def token_bucket(name, burst):
    return {"name": name, "algorithm": "token_bucket", "rate": 1, "per": HOUR, "burst": burst,
            "key": ["client_ip"]}


def sliding_window(name, limit):
    return {"name": name, "algorithm": "sliding_window", "limit": limit, "window": HOUR,
            "key": ["client_ip"]}


def route(name, prefix, limits=None, upstream="app"):
    r = {"name": name, "match": {"path_prefix": prefix}, "upstream": upstream}
    if limits:
        r["limits"] = limits
    return r


class ReloadTestCase(SluiceTestCase):
    def start(self, routes, upstreams, *, store=None, logging=None, server=None):
        self.port = free_port()
        self.admin = free_port()
        extra = {"admin": {"listen": f"127.0.0.1:{self.admin}"}}
        if store:
            extra["store"] = store
        self.base = proxy_config(self.port, upstreams, routes, extra=extra, logging=logging,
                                 server=server)
        self.sluice = self.start_sluice(copy.deepcopy(self.base))
        wait_admin(self.admin)
        return self.sluice

    def config_with(self, routes=None, **sections):
        """The start config with other routes and/or sections replaced."""
        cfg = copy.deepcopy(self.base)
        if routes is not None:
            cfg["routes"] = routes
        for key, value in sections.items():
            cfg[key] = value
        return cfg

    def count(self, pattern):
        return len(re.findall(pattern, self.sluice.stderr_text()))

    def reload(self, config, expect="ok", timeout=5.0):
        """Writes config (dict or YAML text), sends SIGHUP and waits for the outcome line."""
        path = re.escape(self.sluice.config_path)
        ok = rf"reloaded {path}: \d+ routes, \d+ upstreams"
        refused = rf"reload of {path} refused"
        before = (self.count(ok), self.count(refused))
        self.sluice.write_config(config)
        self.sluice.send_signal(signal.SIGHUP)
        wait_until(lambda: (self.count(ok), self.count(refused)) != before, timeout,
                   message="the reload outcome in the log")
        after = (self.count(ok), self.count(refused))
        if expect == "ok":
            self.assertEqual(after, (before[0] + 1, before[1]),
                             f"reload refused:\n{self.sluice.stderr_text()[-3000:]}")
        else:
            self.assertEqual(after, (before[0], before[1] + 1), "an invalid reload was accepted")

    def reloads(self):
        m = Metrics.fetch(self.admin)
        return (m.get("sluice_reloads_total", result="ok") or 0,
                m.get("sluice_reloads_total", result="failed") or 0)

    def get(self, target, client=None):
        c = client or self.client(self.port)
        return c.request("GET", target)


class ReloadUnderLoadTest(ReloadTestCase):
    """Four clients hammer the proxy while it reloads three times."""

    def test_three_reloads_under_concurrent_load(self):
        up = self.start_upstream(respond(200, b"ok"))
        routes_a = [route("api", "/api", [token_bucket("burst", 2)]), route("free", "/free")]
        routes_b = [route("api", "/api", [token_bucket("burst", 50)]), route("free", "/free"),
                    route("new", "/new")]
        self.start(routes_a, {"app": up.address})
        config_a, config_b = self.config_with(routes_a), self.config_with(routes_b)

        stop = threading.Event()
        lock = threading.Lock()
        results = []   # (path, status)
        failures = []  # (thread, exception text)

        def worker(index):
            keep_alive = index < 2
            client = None
            n = 0
            while not stop.is_set():
                path = "/api" if n % 2 == 0 else "/free"
                n += 1
                try:
                    if client is None:
                        client = RawClient(self.port, timeout=5.0)
                    r = client.request("GET", f"{path}?t={index}&n={n}")
                    with lock:
                        results.append((path, r.status))
                    if not keep_alive or r.connection_close():
                        client.close()
                        client = None
                except Exception as e:  # every request must get a response
                    with lock:
                        failures.append((index, f"{path} #{n}: {type(e).__name__}: {e}"))
                    if client is not None:
                        client.close()
                    client = None
            if client is not None:
                client.close()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        self.addCleanup(lambda: (stop.set(), [t.join(10) for t in threads]))

        def api(status=None):
            with lock:
                return sum(1 for p, s in results if p == "/api" and (status is None or s == status))

        started = time.monotonic()
        # Both admitted requests must have come back (on a loaded machine the first one through
        # a fresh upstream connection can still be on its way when 30 rejections are in).
        wait_until(lambda: api() >= 30 and api(200) >= 2, 5.0, message="30 /api responses under config A")
        self.assertEqual(api(200), 2, "burst 2: exactly two /api requests pass")
        self.assertEqual(self.get("/new").status, 404)

        self.reload(config_b)   # burst 2 -> 50: 48 more pass at once, route "new" appears
        wait_until(lambda: api(200) >= 50, 5.0, message="50 /api requests passed after burst 50")
        self.assertEqual(self.get("/new").status, 200)

        # Back to burst 2: the bucket (50 used) is far over it, and a smaller burst caps what
        # was used (the first request read under it writes the bucket as read: empty of 2).
        self.reload(config_a)
        self.assertEqual(self.get("/api?probe").status, 429)
        self.assertEqual(self.get("/new").status, 404)
        self.reload(config_b)   # burst 50 again: 2 used, 48 more pass
        wait_until(lambda: api(200) >= 98, 5.0, message="48 more /api requests passed after burst 50 again")
        wait_until(lambda: time.monotonic() - started >= 3.0, 5.0, interval=0.05)
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(10)
            self.assertFalse(t.is_alive(), "a load thread hangs")

        self.assertEqual(failures, [], f"{len(failures)} requests failed")
        statuses = {}
        for p, s in results:
            statuses.setdefault(p, {}).setdefault(s, 0)
            statuses[p][s] += 1
        self.assertEqual(set(statuses["/api"]), {200, 429}, statuses)
        self.assertEqual(set(statuses["/free"]), {200}, statuses)
        self.assertEqual(statuses["/api"][200], 98,
                         "limiter state survives the reloads: 2 + 48 + 48 pass in all")
        self.assertGreater(len(results), 200, f"too little load to mean anything: {statuses}")
        self.assertEqual(self.get("/new").status, 200)
        self.assertEqual(self.reloads(), (3, 0))
        self.assertEqual(len(up.requests), statuses["/api"][200] + statuses["/free"][200] + 2,
                         "every forwarded request, and only those, reached the upstream")
        print(f"\nload during reloads: {len(results)} requests, {statuses}", flush=True)


class ReloadSemanticsTest(ReloadTestCase):
    def test_in_flight_request_finishes_on_the_old_config(self):
        old = self.start_upstream(by_path({"/slow": delayed(1.5, respond(200, b"old upstream"))},
                                          default=respond(200, b"old upstream")), name="old")
        new = self.start_upstream(respond(200, b"new upstream"), name="new")
        self.start([route("main", "/")], {"app": old.address, "other": new.address})

        c1 = self.client(self.port)
        c1.send(build_request("GET", "/slow"))
        old.wait_requests(1)
        self.reload(self.config_with([route("main", "/", upstream="other")]))
        t0 = time.monotonic()
        # New requests use the new config at once, while the old one is still in flight.
        c2 = self.client(self.port)
        self.assertEqual(self.get("/slow", c2).body, b"new upstream")
        r = c1.read_response()
        self.assertEqual((r.status, r.body), (200, b"old upstream"),
                         "the in-flight request finishes on the config it started with")
        self.assertGreater(time.monotonic() - t0, 0.3, "the slow answer came from the old upstream")
        # The next request on that same keep-alive connection is a new request: new config.
        self.assertEqual(self.get("/slow", c1).body, b"new upstream")
        self.assertEqual(len(old.requests), 1)

    def test_kept_alive_connection_sees_a_route_added_by_reload(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.start([route("a", "/a")], {"app": up.address})
        c = self.client(self.port)
        self.assertEqual(self.get("/b", c).status, 404)
        self.reload(self.config_with([route("a", "/a"), route("b", "/b")]))
        self.assertEqual(self.get("/b", c).status, 200)
        self.sluice.wait_access(target="/b", status="200", route="b")
        self.reload(self.config_with([route("a", "/a")]))
        self.assertEqual(self.get("/b", c).status, 404)
        self.assertEqual(self.reloads(), (2, 0))

    def test_kept_alive_connection_gets_the_new_limits(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.start([route("api", "/api", [token_bucket("burst", 2)])], {"app": up.address})
        c = self.client(self.port)
        self.assertEqual([self.get("/api", c).status for _ in range(3)], [200, 200, 429])
        self.reload(self.config_with([route("api", "/api", [token_bucket("burst", 4)])]))
        self.assertEqual([self.get("/api", c).status for _ in range(3)], [200, 200, 429],
                         "the first request after the reload was decided with burst 2")

    def test_kept_alive_connection_reads_its_next_head_under_the_reloaded_server_settings(self):
        # The connection waits for its next request while the reload replaces (and frees)
        # the configuration it was accepted under; the head that then arrives is read with
        # the new max_header_bytes, raised and lowered.
        up = self.start_upstream(respond(200, b"ok"))
        self.start([route("api", "/")], {"app": up.address}, server={"max_header_bytes": 1024})
        big = [("X-Big", "b" * 2000)]
        c = self.client(self.port)
        self.assertEqual(self.get("/", c).status, 200)
        self.assertEqual(self.client(self.port).request("GET", "/", big).status, 431)
        server = self.base["server"]
        self.reload(self.config_with(server={**server, "max_header_bytes": 4096}))
        self.assertEqual(c.request("GET", "/", big).status, 200,
                         "the head was read under the max_header_bytes before the reload")
        self.reload(self.config_with(server={**server, "max_header_bytes": 1024}))
        self.assertEqual(c.request("GET", "/", big).status, 431)

    def test_invalid_file_is_refused_and_the_old_config_keeps_serving(self):
        up = self.start_upstream(respond(200, b"ok"))
        routes = [route("api", "/api", [token_bucket("burst", 3)])]
        s = self.start(routes, {"app": up.address})
        self.assertEqual([self.get("/api").status for _ in range(2)], [200, 200])

        # A typo that would silently drop the limit (and a raised burst): refused.
        typo = self.config_with([{"name": "api", "match": {"path_prefix": "/api"},
                                  "upstream": "app", "limts": [token_bucket("burst", 100)]}])
        line = next(i for i, l in enumerate(to_yaml(typo).splitlines(), 1) if "limts" in l)
        self.reload(typo, expect="refused")
        path = re.escape(s.config_path)
        s.wait_log(rf"reload: {path}:{line}:\d+: ")
        s.wait_log(rf"reload of {path} refused; the running configuration stays")
        self.assertEqual(self.reloads(), (0, 1))

        # Broken YAML: refused too, with its position.
        diagnostics = self.count(rf"reload: {path}:\d+:\d+: ")
        self.reload(s.config_text.replace("routes:", "routes: [", 1), expect="refused")
        self.assertEqual(self.reloads(), (0, 2))
        wait_until(lambda: self.count(rf"reload: {path}:\d+:\d+: ") > diagnostics, 5.0,
                   message="a FILE:LINE:COL diagnostic for the broken YAML")

        # A file whose first token is a comma made yaml-cpp 0.7 loop forever, allocating,
        # and took the running proxy down; it is refused like any broken YAML.
        self.reload(",\n" + s.config_text, expect="refused")
        self.assertEqual(self.reloads(), (0, 3))
        s.wait_log(rf"reload: {path}:1:1: invalid YAML: unexpected character")

        # An empty file (one caught while `cp` writes it) is refused: read as every default it
        # took every route away.
        self.reload("", expect="refused")
        self.assertEqual(self.reloads(), (0, 4))
        s.wait_log(rf"reload: {path}:1:1: the file is empty")

        # An upstream name that does not resolve: refused at its FILE:LINE:COL, as --check says.
        unresolvable = self.config_with(routes)
        unresolvable["upstreams"]["app"]["servers"] = ["no-such-host.invalid:80"]
        line = next(i for i, l in enumerate(to_yaml(unresolvable).splitlines(), 1) if "no-such-host" in l)
        self.reload(unresolvable, expect="refused")
        self.assertEqual(self.reloads(), (0, 5))
        s.wait_log(rf"reload: {path}:{line}:\d+: upstream 'app' server 'no-such-host.invalid:80' does not resolve")

        # The old config (burst 3, one token left) still decides.
        self.assertEqual([self.get("/api").status for _ in range(2)], [200, 429])
        self.assertTrue(s.running())

        # A valid file afterwards is accepted.
        self.reload(self.config_with(routes + [route("more", "/more")]))
        s.wait_log(rf"reloaded {path}: 2 routes, 1 upstreams")
        self.assertEqual(self.reloads(), (1, 5))
        self.assertEqual(self.get("/more").status, 200)

    def test_settings_that_need_a_restart_are_named(self):
        up = self.start_upstream(respond(200, b"ok"))
        s = self.start([route("a", "/a")], {"app": up.address},
                       logging={"access_log": "stdout"})
        other_port, other_admin = free_port(), free_port()
        cfg = self.config_with([route("a", "/a"), route("b", "/b")])
        cfg["server"]["listen"] = [f"127.0.0.1:{other_port}"]
        cfg["server"]["workers"] = 3
        cfg["admin"] = {"listen": f"127.0.0.1:{other_admin}"}
        cfg["logging"]["access_log"] = "off"
        cfg["store"] = {"type": "redis", "redis": {"address": "127.0.0.1:1", "timeout": "50ms"}}
        self.reload(cfg)
        for key in ("server.listen", "server.workers", "admin.listen", "logging.access_log",
                    r"store\b[^;]*"):
            with self.subTest(setting=key):
                s.wait_log(rf"reload: {key} changed; that takes effect only after a restart")
        # Those stay as started; the rest of the file is applied.
        self.assertEqual(listening_ports(s.proc.pid), {self.port, self.admin})
        self.assertEqual(self.get("/b").status, 200)
        s.wait_access(target="/b", route="b")  # access log still on stdout
        self.assertEqual(Metrics.fetch(self.admin).get("sluice_store_up"), 1,
                         "still the memory store")


class CountsSurviveReloadTest(ReloadTestCase):
    """Limiter state is kept for the same route and limit names, in both stores."""

    store = {"type": "memory"}

    def store_config(self):
        return dict(self.store)

    def test_exhausted_limits_stay_exhausted_and_new_parameters_apply_at_once(self):
        up = self.start_upstream(respond(200, b"ok"))
        routes = [route("login", "/login", [token_bucket("burst", 3)]),
                  route("search", "/search", [sliding_window("window", 3)]),
                  route("other", "/other", [token_bucket("burst", 1)])]
        self.start(routes, {"app": up.address}, store=self.store_config())
        # Every request on a new connection: what a kept-alive connection sees across a
        # reload is the subject of ReloadSemanticsTest.
        for target in ("/login", "/search"):
            self.assertEqual([self.get(target).status for _ in range(4)], [200, 200, 200, 429],
                             target)

        # Reload changing only another route: both stay exhausted.
        changed_other = [routes[0], routes[1], route("other", "/other", [token_bucket("burst", 9)]),
                         route("extra", "/extra")]
        self.reload(self.config_with(changed_other))
        self.assertEqual(self.get("/extra").status, 200)
        self.assertEqual(self.get("/login").status, 429, "token bucket state lost on reload")
        self.assertEqual(self.get("/search").status, 429, "sliding window state lost on reload")

        # Raise the burst and the window limit: the new parameters count what was used.
        raised = [route("login", "/login", [token_bucket("burst", 6)]),
                  route("search", "/search", [sliding_window("window", 5)])] + changed_other[2:]
        self.reload(self.config_with(raised))
        self.assertEqual([self.get("/login").status for _ in range(4)], [200, 200, 200, 429])
        self.assertEqual([self.get("/search").status for _ in range(3)], [200, 200, 429])
        self.assertEqual(self.reloads(), (2, 0))

    def test_an_exhausted_bucket_refills_at_the_rate_a_reload_raised(self):
        # 3 per 30 s used up (full again in 30 s); raised to 100/s (3 in 30 ms): the bucket is
        # still empty after the reload, and refills at the new rate from then, not when the
        # old one would have (every refused request read the old state capped to empty again,
        # and took nothing, so nothing moved it for the old 30 s).
        up = self.start_upstream(respond(200, b"ok"))
        slow = {"name": "burst", "algorithm": "token_bucket", "rate": 1, "per": "10s", "burst": 3}
        self.start([route("login", "/login", [slow])], {"app": up.address}, store=self.store_config())
        self.assertEqual([self.get("/login").status for _ in range(4)], [200, 200, 200, 429])
        fast = dict(slow, rate=100, per="1s")
        self.reload(self.config_with([route("login", "/login", [fast])]))
        self.assertEqual(self.get("/login").status, 429, "what was used is kept")
        wait_until(lambda: self.get("/login").status == 200, 2.0, message="a token at the new rate")


class CountsSurviveReloadRedisTest(CountsSurviveReloadTest):
    def store_config(self):
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        return {"type": "redis", "redis": {"address": redis.address, "timeout": "2s"}}

    def start(self, *args, **kw):
        s = super().start(*args, **kw)
        wait_until(lambda: Metrics.fetch(self.admin).get("sluice_store_up") == 1, 5.0,
                   message="sluice connected to redis")
        return s


if __name__ == "__main__":
    unittest.main()
