"""Routing, header rewriting (hop-by-hop, X-Forwarded-*, Via) and the access log."""

import re
import unittest

from harness import SluiceTestCase, echo, free_port, proxy_config, respond

# Request headers that must never reach the upstream when a client sends them.
HOP_BY_HOP_REQUEST = [
    ("Connection", "keep-alive, X-Custom-Hop, X-Forwarded-For"),
    ("Keep-Alive", "timeout=99"),
    ("Proxy-Connection", "keep-alive"),
    ("TE", "trailers"),
    ("Trailer", "X-Checksum"),
    ("Upgrade", "websocket"),
    ("Proxy-Authorization", "Basic Zm9vOmJhcg=="),
    ("X-Custom-Hop", "secret"),
]


class RoutingTest(SluiceTestCase):
    """First route in file order whose path/path_prefix, methods and host all match."""

    def setUp(self):
        self.ups = {name: self.start_upstream(respond(200, name.encode(), [("X-Upstream", name)]),
                                              name=name)
                    for name in ("a", "b", "c")}
        port = free_port()
        routes = [
            {"name": "exact", "match": {"path": "/exact"}, "upstream": "a"},
            {"name": "writes", "match": {"path_prefix": "/api", "methods": ["POST", "PUT"]},
             "upstream": "b"},
            {"name": "apihost", "match": {"path_prefix": "/api", "host": "api.example.com"},
             "upstream": "c"},
            {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "a"},
        ]
        self.sluice = self.start_sluice(proxy_config(
            port, {n: u.address for n, u in self.ups.items()}, routes))
        self.port = port

    def test_route_table(self):
        cases = [
            # method, target, Host, expected route (None: 404), expected upstream
            ("GET", "/exact", "localhost", "exact", "a"),
            ("GET", "/exact/below", "localhost", None, None),
            ("POST", "/api/items/1", "localhost", "writes", "b"),
            ("PUT", "/api/items/2", "localhost", "writes", "b"),
            ("POST", "/api/items/3", "api.example.com", "writes", "b"),   # file order wins
            ("GET", "/api/items/4", "api.example.com", "apihost", "c"),
            ("GET", "/api/items/5", "API.Example.COM:8443", "apihost", "c"),
            ("GET", "/api/items/6", "www.example.com", "api", "a"),
            ("DELETE", "/api/items/7", "localhost", "api", "a"),
            ("GET", "/other", "localhost", None, None),
        ]
        for method, target, host, route, upstream in cases:
            with self.subTest(method=method, target=target, host=host):
                before = {n: len(u.requests) for n, u in self.ups.items()}
                c = self.client(self.port)
                r = c.request(method, target, host=host)
                if route is None:
                    self.assert_problem(r, 404)
                    entry = self.sluice.wait_access(target=target, method=method)
                    self.assertEqual(entry["status"], "404")
                    self.assertEqual(entry["route"], "-")
                    self.assertEqual({n: len(u.requests) for n, u in self.ups.items()}, before)
                    continue
                self.assertEqual(r.status, 200, r.body)
                self.assertEqual(r.header("x-upstream"), upstream)
                got = self.ups[upstream].last()
                self.assertEqual((got.method, got.target), (method, target))
                entry = self.sluice.wait_access(target=target, method=method)
                self.assertEqual(entry["route"], route)
                self.assertEqual(entry["status"], "200")

    def test_exact_path_ignores_the_query(self):
        r = self.client(self.port).request("GET", "/exact?x=1&y=2")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("x-upstream"), "a")
        self.assertEqual(self.ups["a"].last().target, "/exact?x=1&y=2")

    def test_404_is_problem_json_and_keeps_the_connection(self):
        c = self.client(self.port)
        self.assert_problem(c.request("GET", "/nowhere"), 404)
        r = c.request("GET", "/exact")
        self.assertEqual(r.status, 200)
        entry = self.sluice.wait_access(target="/nowhere")
        self.assertEqual((entry["status"], entry["route"], entry["upstream_ms"]), ("404", "-", "-"))


class ForwardingTest(SluiceTestCase):
    """Untrusted peer (trusted_proxies empty): hop-by-hop removal, XFF, XFP, Via."""

    trusted = []

    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, client_ip={"trusted_proxies": self.trusted}))

    def send(self, headers=(), target="/fwd", version="HTTP/1.1", method="GET", body=None):
        c = self.client(self.port)
        r = c.request(method, target, headers, body, version=version)
        self.assertEqual(r.status, 200, r.body[:300])
        return r, self.up.last()

    def test_request_target_method_and_end_to_end_headers_are_forwarded(self):
        r, got = self.send([("X-Multi", "1"), ("X-Multi", "2"), ("X-End-To-End", "kept")],
                           target="/path/%7Ex?a=1&b=%20", method="PATCH", body=b"patch-body")
        self.assertEqual(got.method, "PATCH")
        # The path goes upstream normalised (%7E is "~", unreserved), the query as it came.
        self.assertEqual(got.target, "/path/~x?a=1&b=%20")
        self.assertEqual(got.joined("x-multi"), "1, 2")
        self.assertEqual(got.header("x-end-to-end"), "kept")
        self.assertEqual(got.body, b"patch-body")

    def test_hop_by_hop_request_headers_are_removed(self):
        r, got = self.send(HOP_BY_HOP_REQUEST + [("X-End-To-End", "kept")])
        names = got.header_names()
        for name in ("keep-alive", "proxy-connection", "te", "trailer", "upgrade",
                     "proxy-authorization", "x-custom-hop"):
            self.assertNotIn(name, names, f"{name} reached the upstream: {got.headers}")
        for value in got.header_values("connection"):
            self.assertNotIn("x-custom-hop", value.lower())
            self.assertNotIn("x-forwarded-for", value.lower())
        self.assertEqual(got.header("x-end-to-end"), "kept")
        # Connection named X-Forwarded-For: the client's copy goes, the proxy's own stays.
        self.assertEqual(got.header_values("x-forwarded-for"), ["127.0.0.1"])

    def test_hop_by_hop_response_headers_are_removed(self):
        self.up.behaviour = respond(200, b"ok", [
            ("Connection", "X-Resp-Hop"),
            ("X-Resp-Hop", "secret"),
            ("Keep-Alive", "timeout=77, max=7"),
            ("Proxy-Connection", "keep-alive"),
            ("Proxy-Authenticate", 'Basic realm="upstream"'),
            ("Upgrade", "h2c"),
            ("Trailer", "X-Checksum"),
            ("X-End-To-End", "kept"),
        ])
        r = self.client(self.port).request("GET", "/resp")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"ok")
        names = r.header_names()
        for name in ("x-resp-hop", "proxy-connection", "proxy-authenticate", "upgrade", "trailer"):
            self.assertNotIn(name, names, f"{name} reached the client: {r.headers}")
        self.assertNotIn("timeout=77, max=7", r.header_values("keep-alive"))
        for value in r.header_values("connection"):
            self.assertNotIn("x-resp-hop", value.lower())
        self.assertEqual(r.header("x-end-to-end"), "kept")

    def test_x_forwarded_for_is_the_peer(self):
        r, got = self.send()
        self.assertEqual(got.header_values("x-forwarded-for"), ["127.0.0.1"])

    def test_x_forwarded_for_from_untrusted_peer_is_replaced(self):
        r, got = self.send([("X-Forwarded-For", "203.0.113.9")])
        self.assertEqual(got.header_values("x-forwarded-for"), ["127.0.0.1"])
        r, got = self.send([("X-Forwarded-For", "198.51.100.1, 203.0.113.9"),
                            ("X-Forwarded-For", "192.0.2.3")])
        self.assertEqual(got.header_values("x-forwarded-for"), ["127.0.0.1"])

    def test_claims_of_the_client_from_untrusted_peer_are_not_passed_on(self):
        # RFC 7239's Forwarded says what X-Forwarded-For says, X-Real-IP too; X-Forwarded-Host,
        # -Port and -Prefix say how the request was addressed (frameworks build links from
        # them): from a client, forgeries.
        claims = [("Forwarded", "for=203.0.113.9;proto=https"), ("forwarded", "for=1.2.3.4"),
                  ("X-Real-IP", "203.0.113.9"), ("X-Forwarded-Host", "evil.test"), ("X-Forwarded-Port", "443"),
                  ("X-Forwarded-Prefix", "/admin")]
        r, got = self.send(claims + [("X-Realm", "kept")])
        self.assertEqual(r.status, 200)
        for name, _ in claims:
            self.assertEqual(got.header_values(name), [], name)
        self.assertEqual(got.header_values("x-realm"), ["kept"])

    def test_x_forwarded_proto_from_untrusted_peer_is_http(self):
        r, got = self.send()
        self.assertEqual(got.header_values("x-forwarded-proto"), ["http"])
        r, got = self.send([("X-Forwarded-Proto", "https")])
        self.assertEqual(got.header_values("x-forwarded-proto"), ["http"])

    def test_via_on_the_request(self):
        r, got = self.send()
        self.assertEqual(got.joined("via"), "1.1 sluice")
        r, got = self.send([("Via", "1.1 edge")])
        self.assertEqual(got.joined("via"), "1.1 edge, 1.1 sluice")

    def test_via_for_an_http_1_0_client(self):
        r, got = self.send(version="HTTP/1.0")
        self.assertEqual(got.joined("via"), "1.0 sluice")

    def test_via_on_the_response(self):
        self.up.behaviour = respond(200, b"x")
        r = self.client(self.port).request("GET", "/v")
        self.assertEqual(r.joined("via"), "1.1 sluice")
        self.up.behaviour = respond(200, b"x", [("Via", "1.1 backend")])
        r = self.client(self.port).request("GET", "/v")
        self.assertEqual(r.joined("via"), "1.1 backend, 1.1 sluice")

    def test_access_log_line(self):
        self.up.behaviour = respond(200, b"hello")
        r = self.client(self.port).request("GET", "/logged")
        self.assertEqual(r.status, 200)
        entry = self.sluice.wait_access(target="/logged")
        self.assertEqual(entry["client"], "127.0.0.1")
        self.assertEqual(entry["method"], "GET")
        self.assertEqual(entry["version"], "HTTP/1.1")
        self.assertEqual(entry["status"], "200")
        self.assertEqual(entry["bytes"], "5")
        self.assertEqual(entry["route"], "main")
        self.assertEqual(entry["limit"], "-")
        self.assertEqual(entry["decision"], "unlimited")
        self.assertEqual(entry["remaining"], "-")
        self.assertRegex(entry["upstream_ms"], r"^\d+(\.\d+)?$")
        self.assertRegex(entry["total_ms"], r"^\d+(\.\d+)?$")
        self.assertRegex(entry["line"], r'127\.0\.0\.1 "GET /logged HTTP/1\.1" 200 5 route=main '
                                        r'limit=- decision=unlimited remaining=- '
                                        r'upstream_ms=[\d.]+ total_ms=[\d.]+')

    def test_one_access_line_per_request(self):
        c = self.client(self.port)
        for i in range(3):
            self.assertEqual(c.request("GET", f"/count/{i}").status, 200)
        for i in range(3):
            self.sluice.wait_access(target=f"/count/{i}", status="200")
        lines = [e for e in self.sluice.access_entries() if e["target"].startswith("/count/")]
        self.assertEqual(len(lines), 3, [e["line"] for e in lines])

    def test_startup_line_mentions_listen_address(self):
        self.sluice.wait_log(re.escape(f"127.0.0.1:{self.port}"))


class TrustedForwardingTest(SluiceTestCase):
    """The TCP peer (127.0.0.1) is a trusted proxy: incoming XFF is kept and extended,
    an incoming X-Forwarded-Proto is kept."""

    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address},
            client_ip={"trusted_proxies": ["127.0.0.0/8"]}))

    def send(self, headers=()):
        r = self.client(self.port).request("GET", "/t", headers)
        self.assertEqual(r.status, 200)
        return self.up.last()

    def test_x_forwarded_for_is_appended(self):
        got = self.send([("X-Forwarded-For", "203.0.113.9")])
        self.assertEqual(got.joined("x-forwarded-for"), "203.0.113.9, 127.0.0.1")
        got = self.send([("X-Forwarded-For", "198.51.100.1, 203.0.113.9")])
        self.assertEqual(got.joined("x-forwarded-for"), "198.51.100.1, 203.0.113.9, 127.0.0.1")

    def test_several_x_forwarded_for_lines_are_kept_in_order(self):
        got = self.send([("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-For", "203.0.113.9")])
        self.assertEqual(got.joined("x-forwarded-for"), "198.51.100.1, 203.0.113.9, 127.0.0.1")

    def test_without_incoming_x_forwarded_for_it_is_the_peer(self):
        got = self.send()
        self.assertEqual(got.joined("x-forwarded-for"), "127.0.0.1")

    def test_claims_of_the_client_are_kept_from_a_trusted_peer(self):
        got = self.send([("Forwarded", "for=203.0.113.9;proto=https"), ("X-Real-IP", "203.0.113.9"),
                         ("X-Forwarded-Host", "www.test")])
        self.assertEqual(got.header_values("forwarded"), ["for=203.0.113.9;proto=https"])
        self.assertEqual(got.header_values("x-real-ip"), ["203.0.113.9"])
        self.assertEqual(got.header_values("x-forwarded-host"), ["www.test"])

    def test_x_forwarded_proto_is_kept_from_a_trusted_peer(self):
        self.assertEqual(self.send([("X-Forwarded-Proto", "https")]).header_values(
            "x-forwarded-proto"), ["https"])
        self.assertEqual(self.send().header_values("x-forwarded-proto"), ["http"])

    def test_connection_naming_x_forwarded_for_does_not_remove_the_proxys_own(self):
        got = self.send([("Connection", "X-Forwarded-For"), ("X-Forwarded-For", "203.0.113.9")])
        # A Connection option cannot remove a forwarding header (issue 12): the trusted
        # peer's X-Forwarded-For stays, and the peer is appended to it.
        self.assertEqual(got.joined("x-forwarded-for"), "203.0.113.9, 127.0.0.1")


if __name__ == "__main__":
    unittest.main()
