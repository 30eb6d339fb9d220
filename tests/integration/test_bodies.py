"""Bodies: large bodies both ways (Content-Length and chunked), HEAD, 204, 304,
1xx relaying, Expect: 100-continue."""

import threading
import unittest

from harness import (EarlyAnswerUpstream, SluiceTestCase, big_response, build_request, by_path, chunked_body,
                     close_delimited, echo, echo_body, free_port, informational,
                     pattern_bytes, proxy_config, respond, sha256_hex)

MiB = 1 << 20
BIG_TIMEOUT = 30.0  # socket timeout for the multi-megabyte transfers


class BodiesTest(SluiceTestCase):
    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))

    def big_client(self):
        return self.client(self.port, timeout=BIG_TIMEOUT)

    # request bodies ---------------------------------------------------------------
    def test_8mb_request_body_with_content_length(self):
        data = pattern_bytes(8 * MiB, seed=11)
        r = self.big_client().request("POST", "/upload", [("Content-Type", "application/x-test")],
                                      data)
        self.assertEqual(r.status, 200, r.body[:300])
        doc = r.json()
        self.assertEqual(doc["body_length"], len(data))
        self.assertEqual(doc["body_sha256"], sha256_hex(data))
        got = self.up.last()
        self.assertEqual(got.method, "POST")
        self.assertEqual(got.header("content-type"), "application/x-test")

    def test_8mb_request_body_chunked(self):
        data = pattern_bytes(8 * MiB, seed=12)
        c = self.big_client()
        # Odd chunk sizes, one with a chunk extension; the upstream may get it re-chunked
        # or with a Content-Length: only the bytes are compared.
        c.send(build_request("POST", "/upload-chunked", [("Transfer-Encoding", "chunked")])
               + chunked_body(data, sizes=(1, 1000, 65536, 100003, 7), extension_on=3))
        r = c.read_response()
        self.assertEqual(r.status, 200, r.body[:300])
        doc = r.json()
        self.assertEqual(doc["body_length"], len(data))
        self.assertEqual(doc["body_sha256"], sha256_hex(data))

    def test_empty_chunked_request_body(self):
        c = self.client(self.port)
        c.send(build_request("POST", "/empty", [("Transfer-Encoding", "chunked")]) + b"0\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body_length"], 0)

    def test_request_body_echoed_back_both_ways(self):
        self.up.behaviour = echo_body()
        data = pattern_bytes(4 * MiB, seed=13)
        r = self.big_client().request("PUT", "/mirror", body=data)
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), len(data))
        self.assertEqual(sha256_hex(r.body), sha256_hex(data))

    # response bodies --------------------------------------------------------------
    def check_big_response(self, chunked):
        big = big_response(20 * MiB, chunked=chunked, seed=21 + chunked)
        self.up.behaviour = big
        c = self.big_client()
        r = c.request("GET", "/download")
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), big.size)
        self.assertEqual(sha256_hex(r.body), big.sha256)
        self.assertEqual(r.header("x-body-sha256"), big.sha256)
        # The connection is still usable: the body was framed correctly.
        self.up.behaviour = respond(200, b"after")
        self.assertEqual(c.request("GET", "/after").body, b"after")

    def test_20mb_response_body_with_content_length(self):
        self.check_big_response(chunked=False)

    def test_20mb_response_body_chunked(self):
        self.check_big_response(chunked=True)

    def test_close_delimited_response_body(self):
        body = pattern_bytes(1 * MiB, seed=31)
        self.up.behaviour = close_delimited(body)
        r = self.big_client().request("GET", "/eof")
        self.assertEqual(r.status, 200)
        self.assertEqual(sha256_hex(r.body), sha256_hex(body))

    # bodiless responses -----------------------------------------------------------
    def test_head_gets_headers_only(self):
        self.up.behaviour = by_path({
            "/head-length": respond(200, b"x" * 1234),
            "/head-chunked": respond(200, b"y" * 500, chunked=True),
            "/next": respond(200, b"next"),
        })
        c = self.client(self.port)
        r = c.request("HEAD", "/head-length")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-length"), "1234")
        self.assertEqual(self.up.last().method, "HEAD")
        r = c.request("HEAD", "/head-chunked")
        self.assertEqual(r.status, 200)
        # Any stray body byte after a HEAD response would corrupt this next response.
        r = c.request("GET", "/next")
        self.assertEqual((r.status, r.body), (200, b"next"))
        self.assertEqual(c.read_available(0.2), b"")

    def test_204_has_no_body(self):
        self.up.behaviour = by_path({"/204": respond(204, headers=[("X-Kind", "nothing")]),
                                     "/next": respond(200, b"next")})
        c = self.client(self.port)
        r = c.request("DELETE", "/204")
        self.assertEqual(r.status, 204)
        self.assertEqual(r.header("x-kind"), "nothing")
        self.assertFalse(r.has_header("transfer-encoding"), r.headers)
        self.assertIn(r.header("content-length"), (None, "0"))
        r = c.request("GET", "/next")
        self.assertEqual((r.status, r.body), (200, b"next"))
        self.assertEqual(c.read_available(0.2), b"")

    def test_304_has_no_body(self):
        self.up.behaviour = by_path({
            "/304": respond(304, headers=[("ETag", '"v1"'), ("Content-Length", "500")]),
            "/next": respond(200, b"next"),
        })
        c = self.client(self.port)
        r = c.request("GET", "/304", [("If-None-Match", '"v1"')])
        self.assertEqual(r.status, 304)
        self.assertEqual(r.header("etag"), '"v1"')
        self.assertEqual(self.up.last().header("if-none-match"), '"v1"')
        r = c.request("GET", "/next")
        self.assertEqual((r.status, r.body), (200, b"next"))
        self.assertEqual(c.read_available(0.2), b"")

    # interim responses ------------------------------------------------------------
    def test_103_early_hints_are_relayed_before_the_final_response(self):
        self.up.behaviour = informational(
            [(103, [("Link", "</style.css>; rel=preload; as=style")]),
             (103, [("Link", "</app.js>; rel=preload; as=script")])],
            then=respond(200, b"final body"))
        r = self.client(self.port).request("GET", "/hints")
        self.assertEqual([i.status for i in r.informational], [103, 103])
        self.assertEqual(r.informational[0].header("link"), "</style.css>; rel=preload; as=style")
        self.assertEqual(r.informational[1].header("link"), "</app.js>; rel=preload; as=script")
        self.assertEqual((r.status, r.body), (200, b"final body"))

    def test_1xx_is_not_sent_to_an_http_1_0_client(self):
        self.up.behaviour = informational([(103, [("Link", "</a.css>; rel=preload")])],
                                          then=respond(200, b"final body"))
        r = self.client(self.port).request("GET", "/hints", version="HTTP/1.0")
        self.assertEqual(r.informational, [])
        self.assertEqual((r.status, r.body), (200, b"final body"))

    def test_an_interim_response_with_ambiguous_framing_is_refused(self):
        # Content-Length with Transfer-Encoding makes no sense on a 1xx: 502, nothing relayed.
        self.up.behaviour = informational([(103, [("Content-Length", "5"), ("Transfer-Encoding", "chunked")])],
                                          then=respond(200, b"final body"))
        r = self.client(self.port).request("GET", "/hints")
        self.assertEqual(r.informational, [])
        self.assertEqual(r.status, 502)
        self.assertIn(b"Content-Length together with Transfer-Encoding", r.body)

    # Expect: 100-continue ---------------------------------------------------------
    def test_expect_100_continue(self):
        body = b"the body after 100"
        c = self.client(self.port)
        c.send(build_request("POST", "/expect", [("Expect", "100-continue"),
                                                 ("Content-Length", str(len(body)))]))
        interim = c.read_response(method="POST", informational="return", timeout=3)
        self.assertEqual(interim.status, 100, "the proxy must answer 100 Continue itself")
        self.assertEqual(interim.version, "HTTP/1.1")
        c.send(body)
        r = c.read_response(method="POST")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body"], body.decode())
        got = self.up.last()
        self.assertEqual(got.body, body)
        self.assertFalse(got.has_header("expect"), got.headers)

    def test_an_upstreams_100_continue_is_not_relayed_other_interim_responses_are(self):
        self.up.behaviour = informational([(100, []), (103, [("Link", "</a.css>; rel=preload")])],
                                          then=respond(200, b"final"))
        body = b"0123456789"
        c = self.client(self.port)
        c.send(build_request("POST", "/expect", [("Expect", "100-continue"), ("Content-Length", str(len(body)))]))
        ours = c.read_response(method="POST", informational="return", timeout=3)
        self.assertEqual(ours.status, 100)
        c.send(body)
        r = c.read_response(method="POST")
        self.assertEqual(r.status, 200)
        self.assertEqual([i.status for i in r.informational], [103], "one 100 Continue, sluice's own")
        # Without Expect: the upstream's 100 is not relayed either.
        r = c.request("POST", "/plain", body=body)
        self.assertEqual(r.status, 200)
        self.assertEqual([i.status for i in r.informational], [103])

    def test_expect_100_continue_with_chunked_body(self):
        body = pattern_bytes(300000, seed=41)
        c = self.client(self.port)
        c.send(build_request("POST", "/expect", [("Expect", "100-continue"),
                                                 ("Transfer-Encoding", "chunked")]))
        interim = c.read_response(method="POST", informational="return", timeout=3)
        self.assertEqual(interim.status, 100)
        c.send(chunked_body(body, sizes=(4096, 12345)))
        r = c.read_response(method="POST")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body_sha256"], sha256_hex(body))
        self.assertFalse(self.up.last().has_header("expect"))

    # a final response before the request body is all sent ----------------------------
    def test_a_final_response_the_upstream_sends_before_taking_the_body_reaches_the_client(self):
        up = EarlyAnswerUpstream(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain\r\n"
                                 b"Content-Length: 15\r\n\r\nupload too big!")
        self.addCleanup(up.close)
        port = free_port()
        self.start_sluice(proxy_config(port, {"early": up.address}))
        for framing in ("Content-Length", "chunked"):
            with self.subTest(framing=framing):
                body = pattern_bytes(8 * MiB, seed=7)
                if framing == "chunked":
                    head = build_request("POST", "/upload", [("Transfer-Encoding", "chunked")])
                    body = chunked_body(body, sizes=(65536,))
                else:
                    head = build_request("POST", "/upload", [("Content-Length", str(len(body)))])
                c = self.client(port, timeout=BIG_TIMEOUT)
                c.send(head)

                def send_body():
                    try:
                        c.send(body)
                    except OSError:
                        pass  # the proxy closed once the response was out: the rest is not wanted
                sender = threading.Thread(target=send_body, daemon=True)
                sender.start()
                r = c.read_response(method="POST", timeout=BIG_TIMEOUT)
                self.assertEqual(r.status, 413, r.body)
                self.assertEqual(r.body, b"upload too big!")
                self.assertIn("close", r.header("connection", "").lower(),
                              "the request body was not all read: the connection cannot carry another request")
                c.wait_closed(5)
                sender.join(5)
        self.assertEqual(len(up.heads), 2)

    def test_expect_100_continue_without_route_gets_404_not_100(self):
        port = free_port()
        s = self.start_sluice(proxy_config(
            port, {"app": self.up.address},
            routes=[{"name": "only", "match": {"path": "/only"}, "upstream": "app"}]))
        c = self.client(s.port)
        c.send(build_request("POST", "/elsewhere", [("Expect", "100-continue"),
                                                    ("Content-Length", "10")]))
        r = c.read_response(method="POST", informational="return", timeout=3)
        self.assert_problem(r, 404)
        self.assertEqual(len(self.up.requests), 0)


if __name__ == "__main__":
    unittest.main()
