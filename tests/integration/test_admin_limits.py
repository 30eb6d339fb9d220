"""The admin port's /limits (issue 15): a key's state without consuming, its reset, the bearer
token, and loopback-only resets without one; against real Redis and the memory store.
"""

import json
import select
import socket
import threading
import time
import unittest

from harness import (RawClient, SluiceTestCase, build_request, free_port, limited_route,
                     proxy_config, redis_store, respond, token_bucket, wait_until)

WORKERS = 2
TOKEN = "s3cret-token-0123456789abcdef"


def non_loopback_address():
    """An IPv4 address of this machine that is not loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("203.0.113.1", 9))  # no packet is sent: this only picks a route
        address = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if address.startswith("127.") else address


class AdminLimitsTestCase(SluiceTestCase):
    def start_stack(self, routes, *, token=None, admin_host="127.0.0.1", memory=False, upstream=None):
        self.up = self.start_upstream(upstream or respond(200, b"ok"))
        self.redis = None if memory else self.start_redis()
        self.admin_port = free_port()
        admin = {"listen": f"{admin_host}:{self.admin_port}"}
        if token:
            admin["token"] = token
        store = {"type": "memory"} if memory else redis_store(self.redis)
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}, routes,
                                                     extra={"store": store, "admin": admin}))
        if not memory:
            self.sluice.wait_store_connected(WORKERS)

    def admin(self, method, target, headers=(), host="127.0.0.1"):
        c = RawClient(self.admin_port, host=host)
        try:
            return c.request(method, target, list(headers) + [("Connection", "close")])
        finally:
            c.close()

    def admin_json(self, method, target, headers=(), status=200, host="127.0.0.1"):
        r = self.admin(method, target, headers, host)
        self.assertEqual(r.status, status, r.body)
        self.assertEqual((r.header("content-type") or "").split(";")[0], "application/json")
        return json.loads(r.body)

    def get(self, target):
        c = RawClient(self.port)
        try:
            return c.request("GET", target)
        finally:
            c.close()


class InspectAndResetTest(AdminLimitsTestCase):
    ROUTES = [limited_route("r", [token_bucket("tb", 1, "1h", 3),
                                  {"name": "daily", "algorithm": "fixed_window", "limit": 100,
                                   "window": "day", "key": ["header:x-api-key"]}])]

    def check_inspect_then_reset(self):
        auth = [("Authorization", f"Bearer {TOKEN}")]
        for _ in range(2):
            self.assertEqual(self.get("/r/a").status, 200)
        state = self.admin_json("GET", "/limits?route=r&client=127.0.0.1", auth)
        self.assertEqual(state["route"], "r")
        self.assertEqual(state["key"], {"client": "127.0.0.1"})
        tb, daily = state["limits"]
        self.assertEqual((tb["name"], tb["algorithm"], tb["applies"], tb["capacity"], tb["remaining"]),
                         ("tb", "token_bucket", True, 3, 1))
        self.assertGreater(tb["reset_ms"], 3_500_000)  # two tokens: 2 h to full, less what passed
        self.assertEqual(daily, {"name": "daily", "algorithm": "fixed_window", "shadow": False,
                                 "capacity": 100, "applies": False})
        # Looking takes nothing.
        again = self.admin_json("GET", "/limits?route=r&client=127.0.0.1&limit=tb", auth)
        self.assertEqual([l["remaining"] for l in again["limits"]], [1])
        self.assertEqual(self.get("/r/b").status, 200)
        self.assertEqual(self.get("/r/c").status, 429)
        self.assertEqual(self.get("/r/d").status, 429)  # (a worker may now remember the rejection)
        reset = self.admin_json("DELETE", "/limits?route=r&client=127.0.0.1", auth)
        self.assertEqual(reset, {"route": "r", "key": {"client": "127.0.0.1"}, "reset": ["tb"], "keys_deleted": 1})
        # Every worker answers from the store again: three more pass on either worker.
        self.assertEqual([self.get(f"/r/after{i}").status for i in range(4)], [200, 200, 200, 429])
        self.sluice.wait_log("admin: reset route r limits tb for key")
        metrics = self.admin("GET", "/metrics").text
        self.assertIn('sluice_limit_resets_total{route="r",limit="tb"} 1', metrics)
        # POST /limits/reset does the same.
        reset = self.admin_json("POST", "/limits/reset?route=r&client=127.0.0.1&limit=tb", auth)
        self.assertEqual(reset["keys_deleted"], 1)
        self.assertEqual(self.get("/r/again").status, 200)

    def test_redis(self):
        self.start_stack(self.ROUTES, token=TOKEN)
        self.check_inspect_then_reset()
        self.assertEqual(self.redis.keys(), ["sluice:{r}:tb:127.0.0.1"])  # the request after the reset

    def test_memory_store(self):
        self.start_stack(self.ROUTES, token=TOKEN, memory=True)
        self.check_inspect_then_reset()

    def test_bad_queries(self):
        self.start_stack(self.ROUTES, token=TOKEN)
        auth = [("Authorization", f"Bearer {TOKEN}")]
        self.assertEqual(self.admin_json("GET", "/limits?route=r", auth, status=400),
                         {"error": "'client' is needed: limit 'tb' is keyed on client_ip"})
        self.assertEqual(self.admin_json("GET", "/limits?route=zz&client=1.2.3.4", auth, status=404),
                         {"error": "no route named 'zz'"})
        self.assertEqual(self.admin_json("GET", "/limits?route=r&client=%zz", auth, status=400),
                         {"error": "malformed percent-escape in the query"})
        r = self.admin("PUT", "/limits?route=r&client=1.2.3.4", auth)
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("allow"), "GET, HEAD, DELETE")
        r = self.admin("GET", "/limits/reset?route=r&client=1.2.3.4", auth)
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("allow"), "POST")


class ControlBytesTest(AdminLimitsTestCase):
    def test_a_key_value_holding_a_control_byte_can_be_looked_up_and_reset(self):
        # A tab in a header, a %0A in a query parameter: a client could otherwise hold a key
        # that support can neither see nor reset.
        self.start_stack([limited_route("r", [token_bucket("per_key", 1, "1h", 1, key=["header:x-api-key"]),
                                              token_bucket("per_id", 1, "1h", 1, key=["query:id"])])], memory=True)
        with RawClient(self.port) as c:
            self.assertEqual(c.request("GET", "/r/x?id=a%0Ab", [("X-Api-Key", "k\t1")]).status, 200)
            self.assertEqual(c.request("GET", "/r/x?id=a%0Ab", [("X-Api-Key", "k\t1")]).status, 429)
        state = self.admin_json("GET", "/limits?route=r&header.x-api-key=k%091&query.id=a%0Ab")
        self.assertEqual(state["key"], {"header.x-api-key": "k\t1", "query.id": "a\nb"})
        self.assertEqual([limit["remaining"] for limit in state["limits"]], [0, 0])
        self.assertEqual(self.admin_json("DELETE", "/limits?route=r&header.x-api-key=k%091&query.id=a%0Ab")["reset"],
                         ["per_key", "per_id"])
        with RawClient(self.port) as c:
            self.assertEqual(c.request("GET", "/r/x?id=a%0Ab", [("X-Api-Key", "k\t1")]).status, 200)
        # Names stay plain.
        self.assertEqual(self.admin_json("GET", "/limits?route=r&header.x%0A=1", status=400),
                         {"error": "control character in a query parameter's name"})


class TokenTest(AdminLimitsTestCase):
    def test_the_token_guards_limits_and_only_limits(self):
        self.start_stack([limited_route("r", [token_bucket("tb", 1, "1s", 3)])], token=TOKEN)
        target = "/limits?route=r&client=127.0.0.1"
        r = self.admin("GET", target)
        self.assertEqual(r.status, 401)
        self.assertEqual(r.header("www-authenticate"), 'Bearer realm="sluice-admin"')
        for wrong in ["Bearer nope", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN, "Bearer "]:
            self.assertEqual(self.admin("GET", target, [("Authorization", wrong)]).status, 401, wrong)
            self.assertEqual(self.admin("DELETE", target, [("Authorization", wrong)]).status, 401, wrong)
        self.assertEqual(self.admin("GET", target, [("Authorization", f"bearer {TOKEN}")]).status, 200)
        self.assertEqual(self.admin("GET", "/metrics").status, 200)
        self.assertEqual(self.admin("GET", "/healthz").status, 200)

    def test_without_a_token_resets_are_for_loopback_only(self):
        address = non_loopback_address()
        if address is None:
            self.skipTest("this machine has no non-loopback IPv4 address to connect from")
        self.start_stack([limited_route("r", [token_bucket("tb", 1, "1h", 3)])], admin_host="0.0.0.0")
        target = "/limits?route=r&client=127.0.0.1"
        self.assertEqual(self.admin_json("GET", target, host=address)["route"], "r")  # looking is open
        self.assertEqual(self.admin_json("DELETE", target, host=address, status=403),
                         {"error": "resets are served to loopback only unless admin.token is set"})
        self.assertEqual(self.admin_json("DELETE", target)["reset"], ["tb"])


class BrowserTest(AdminLimitsTestCase):
    """A browser on the admin port's machine is on loopback too: a page of another site must
    not reset limits through it (a form posted cross-site), nor read them through a name it
    makes resolve to 127.0.0.1 (DNS rebinding). Browsers say where a request comes from
    (Origin, Sec-Fetch-Site); other clients send neither and are served as before."""

    def test_requests_a_browser_makes_for_another_site_are_refused(self):
        self.start_stack([limited_route("r", [token_bucket("tb", 1, "1h", 1)])])
        self.assertEqual(self.get("/r/a").status, 200)
        self.assertEqual(self.get("/r/a").status, 429)
        own = f"127.0.0.1:{self.admin_port}"
        reset = "/limits/reset?route=r&client=127.0.0.1"
        # The request a browser sends for <form method=post action="http://127.0.0.1:PORT/...">
        # on another site's page, and the same from an older browser (Origin only).
        for fields in ([("Origin", "https://attacker.example"), ("Sec-Fetch-Site", "cross-site"),
                        ("Sec-Fetch-Mode", "navigate")],
                       [("Origin", "https://attacker.example")],
                       [("Origin", "null")],
                       [("Sec-Fetch-Site", "same-site")]):
            r = self.admin("POST", reset, [("Host", own)] + fields)
            self.assertEqual(r.status, 403, fields)
            self.assertIn(b"refused", r.body)
        self.assertEqual(self.get("/r/a").status, 429, "nothing was reset")
        # A page of attacker.example, resolved to 127.0.0.1, reading as its own origin.
        for fields in ([("Sec-Fetch-Site", "same-origin")],
                       [("Sec-Fetch-Site", "same-origin"), ("Origin", f"http://attacker.example:{self.admin_port}")]):
            r = self.admin("GET", "/limits?route=r&client=127.0.0.1",
                           [("Host", f"attacker.example:{self.admin_port}")] + fields)
            self.assertEqual(r.status, 403, fields)
            self.assertEqual(self.admin("GET", "/stats.json", [("Host", f"attacker.example:{self.admin_port}")] +
                                        fields).status, 403)
        # The operator's own browser, by address or localhost: the page, its feed, a reset.
        for host in (own, f"localhost:{self.admin_port}", f"[::1]:{self.admin_port}"):
            self.assertEqual(self.admin("GET", "/stats", [("Host", host), ("Sec-Fetch-Site", "none")]).status, 200)
            self.assertEqual(self.admin("GET", "/stats.json", [("Host", host), ("Sec-Fetch-Site", "same-origin")])
                             .status, 200)
        r = self.admin("POST", reset, [("Host", own), ("Origin", f"http://{own}"), ("Sec-Fetch-Site", "same-origin")])
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.get("/r/a").status, 200, "reset")
        # Not a browser (curl, Prometheus): any Host.
        self.assertEqual(self.admin("GET", "/metrics", [("Host", "sluice-admin.internal:9901")]).status, 200)
        self.assertEqual(self.admin("GET", "/limits?route=r&client=127.0.0.1", [("Host", "admin.example")]).status,
                         200)


class AdminConnectionsTest(AdminLimitsTestCase):
    def test_the_admin_port_holds_a_bounded_number_of_connections(self):
        self.start_stack([limited_route("r", [token_bucket("tb", 1, "1h", 1)])], memory=True)
        held = [socket.create_connection(("127.0.0.1", self.admin_port), timeout=5) for _ in range(140)]
        try:
            # Past 128 open, each new connection closes the oldest; the others stay.
            def closed():
                ready, _, _ = select.select(held, [], [], 0.5)
                return [c for c in ready if c.recv(1, socket.MSG_PEEK) == b""]
            wait_until(lambda: len(closed()) >= 12, 5.0, message="the connections past the bound closed")
            self.assertEqual(closed(), held[:12])
            self.sluice.wait_log(r"admin: 128 connections are open: closing the oldest")
            # A health probe is served all the same.
            self.assertEqual(self.admin("GET", "/healthz").status, 200)
            self.assertEqual(len(closed()), 13)
        finally:
            for c in held:
                c.close()


class ConcurrencyStateTest(AdminLimitsTestCase):
    def test_slots_in_flight_are_shown(self):
        release = threading.Event()

        def slow(req, conn):
            release.wait(10)
            respond(200, b"done")(req, conn)

        self.start_stack([limited_route("s", [{"name": "slots", "algorithm": "concurrency", "limit": 3,
                                               "key": []}])], token=TOKEN, upstream=slow)
        clients = [RawClient(self.port, timeout=15) for _ in range(2)]
        for i, c in enumerate(clients):
            c.send(build_request("GET", f"/s/{i}"))
        wait_until(lambda: len(self.up.requests) == 2, 5, message="two requests upstream")
        state = self.admin_json("GET", "/limits?route=s", [("Authorization", f"Bearer {TOKEN}")])
        slots = state["limits"][0]
        self.assertEqual((slots["in_flight"], slots["remaining"], slots["capacity"]), (2, 1, 3))
        release.set()
        for c in clients:
            self.assertEqual(c.read_response().status, 200)
            c.close()
        # The slots go back once the responses are written: a Redis call of their own, which the
        # look-up below (another connection) can overtake when it is sent the moment the last
        # response arrives. What counts is that they go back.
        def in_flight():
            state = self.admin_json("GET", "/limits?route=s", [("Authorization", f"Bearer {TOKEN}")])
            return state["limits"][0]["in_flight"]
        wait_until(lambda: in_flight() == 0, 5, message="both slots given back after the responses")


if __name__ == "__main__":
    unittest.main()
