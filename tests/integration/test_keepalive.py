"""Keep-alive: client connections (HTTP/1.1 and 1.0) and the upstream connection pool."""

import socket
import threading
import time
import unittest

from harness import (SluiceTestCase, build_request, close_delimited, echo, free_port, head_then_late_body,
                     proxy_config, respond, wait_until)


class ClientKeepAliveTest(SluiceTestCase):
    def setUp(self):
        self.up = self.start_upstream(echo())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}))

    def test_http_1_1_connection_serves_many_requests(self):
        c = self.client(self.port)
        for i in range(5):
            r = c.request("GET", f"/ka/{i}")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json()["target"], f"/ka/{i}")
            self.assertFalse(r.connection_close())
        self.assertFalse(c.is_closed(0.2))

    def test_pipelined_requests_are_answered_in_order(self):
        c = self.client(self.port)
        c.send(b"".join(build_request("GET", f"/pipe/{i}") for i in range(3)))
        targets = [c.read_response().json()["target"] for _ in range(3)]
        self.assertEqual(targets, ["/pipe/0", "/pipe/1", "/pipe/2"])

    def test_http_1_1_connection_close_is_honoured(self):
        c = self.client(self.port)
        r = c.request("GET", "/bye", [("Connection", "close")])
        self.assertEqual(r.status, 200)
        c.wait_closed(3)

    def test_http_1_0_closes_after_the_response_by_default(self):
        c = self.client(self.port)
        r = c.request("GET", "/old", version="HTTP/1.0")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["target"], "/old")
        c.wait_closed(3)

    def test_http_1_0_keep_alive(self):
        c = self.client(self.port)
        for i in range(3):
            r = c.request("GET", f"/old-ka/{i}", [("Connection", "keep-alive")], version="HTTP/1.0")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json()["target"], f"/old-ka/{i}")
            self.assertIn("keep-alive", (r.header("connection") or "").lower(),
                          "an HTTP/1.0 client needs Connection: keep-alive to keep the connection")
            self.assertNotEqual(r.framing, "close")
            self.assertNotEqual(r.framing, "chunked", "HTTP/1.0 has no chunked coding")

    def test_http_1_0_client_gets_no_chunked_coding(self):
        self.up.behaviour = respond(200, b"chunked from upstream" * 100, chunked=True)
        c = self.client(self.port)
        r = c.request("GET", "/old-chunked", version="HTTP/1.0")
        self.assertEqual(r.status, 200)
        self.assertFalse(r.has_header("transfer-encoding"), r.headers)
        self.assertEqual(r.body, b"chunked from upstream" * 100)

    def test_connection_survives_a_404(self):
        port = free_port()
        s = self.start_sluice(proxy_config(
            port, {"app": self.up.address},
            routes=[{"name": "only", "match": {"path_prefix": "/only"}, "upstream": "app"}]))
        c = self.client(s.port)
        self.assert_problem(c.request("GET", "/nothing-here"), 404)
        self.assertEqual(c.request("GET", "/only/x").status, 200)

    def test_idle_connection_is_closed_after_idle_timeout(self):
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": self.up.address},
                                           server={"idle_timeout": "1s"}))
        c = self.client(s.port)
        self.assertEqual(c.request("GET", "/then-idle").status, 200)
        start = time.monotonic()
        data = c.wait_closed(5)
        self.assertEqual(data, b"")
        self.assertGreaterEqual(time.monotonic() - start, 0.5)


class UpstreamReuseTest(SluiceTestCase):
    def start(self, workers, behaviour=None):
        self.up = self.start_upstream(behaviour or respond(200, b"pooled"))
        port = free_port()
        self.sluice = self.start_sluice(proxy_config(port, {"app": self.up.address},
                                                     server={"workers": workers}))
        return port

    def test_one_client_connection_reuses_the_upstream_connection(self):
        port = self.start(workers=2)
        c = self.client(port)
        for i in range(10):
            self.assertEqual(c.request("GET", f"/seq/{i}").body, b"pooled")
            time.sleep(0.01)
        self.assertEqual(len(self.up.requests), 10)
        self.assertLessEqual(self.up.connections, 2, f"{self.up.connections} upstream connections")

    def test_separate_client_connections_share_the_upstream_connection(self):
        port = self.start(workers=1)
        for i in range(10):
            c = self.client(port)
            self.assertEqual(c.request("GET", f"/conn/{i}").body, b"pooled")
            c.close()
            time.sleep(0.02)
        self.assertEqual(len(self.up.requests), 10)
        self.assertEqual(self.up.connections, 1, f"{self.up.connections} upstream connections")

    def test_separate_client_connections_with_two_workers(self):
        port = self.start(workers=2)
        for i in range(10):
            c = self.client(port)
            self.assertEqual(c.request("GET", f"/conn2/{i}").body, b"pooled")
            c.close()
            time.sleep(0.02)
        self.assertLessEqual(self.up.connections, 2, f"{self.up.connections} upstream connections")

    def test_bursts_beyond_max_idle_reuse_connections_then_the_surplus_is_closed(self):
        # max_idle 1, bursts of 4 concurrent requests: the 3 connections beyond max_idle stay
        # for the next burst (rather than 3 closed and 3 opened per burst), and are closed
        # after about a second without use.
        def slow(req, conn):
            conn.sleep(0.1)
            conn.send_response(200, [], b"pooled")

        self.up = self.start_upstream(slow)
        port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            port, {"app": {"servers": [self.up.address], "max_idle": 1}}, server={"workers": 1}))
        clients = [self.client(port) for _ in range(4)]
        for burst in range(4):
            statuses = []

            def one(c, i):
                statuses.append(c.request("GET", f"/burst/{burst}/{i}").status)

            threads = [threading.Thread(target=one, args=(c, i)) for i, c in enumerate(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            self.assertEqual(statuses, [200] * 4)
            time.sleep(0.2)
        self.assertEqual(len(self.up.requests), 16)
        self.assertEqual(self.up.connections, 4, "connections opened for 4 bursts of 4")
        self.assertEqual(self.up.open_connections(), 4)
        # Idle past the grace period: back to max_idle.
        wait_until(lambda: self.up.open_connections() == 1, 3.0, message="surplus closed")
        time.sleep(0.3)
        self.assertEqual(self.up.open_connections(), 1)
        r = clients[0].request("GET", "/after")
        self.assertEqual((r.status, self.up.connections), (200, 4))  # the kept one is reused

    def test_a_client_gone_before_the_end_of_its_response_leaves_the_upstream_connection_pooled(self):
        # The upstream's response is whole before its last bytes go to the client: the
        # connection is pooled then, whatever becomes of that write.
        head_sent = threading.Event()

        def head_then_rest(req, conn):
            if req.target == "/gone":
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n0123456789")
                head_sent.set()
                conn.sleep(0.5)
                conn.send(b"abcdefghij")
            else:
                conn.send_response(200, [], b"next")

        port = self.start(workers=1, behaviour=head_then_rest)
        gone = socket.create_connection(("127.0.0.1", port), timeout=5)
        gone.sendall(build_request("GET", "/gone", [("Host", "t")]))
        self.assertTrue(head_sent.wait(5))
        # The head has reached the client (left unread): it closes, and its connection is reset.
        wait_until(lambda: len(gone.recv(4096, socket.MSG_PEEK)) > 0, 5.0, message="the head at the client")
        gone.close()
        self.sluice.wait_access(target="/gone")  # (the last bytes' write failed by then)
        r = self.client(port).request("GET", "/next")
        self.assertEqual((r.status, r.body), (200, b"next"))
        self.assertEqual(self.up.connections, 1, "the first request's connection was not reused")

    def test_eof_framed_response_is_not_reused(self):
        port = self.start(workers=1, behaviour=close_delimited(b"until eof"))
        c = self.client(port)
        for i in range(3):
            r = c.request("GET", f"/eof/{i}")
            self.assertEqual((r.status, r.body), (200, b"until eof"))
        self.assertEqual(self.up.connections, 3)
        self.assertEqual(len(self.up.requests), 3)

    def test_upstream_connection_close_is_not_reused(self):
        # The upstream says Connection: close but keeps the socket open for 3s (and reads
        # nothing more): a proxy that reused it would wait on it past the client's timeout.
        def answer_then_linger(req, conn):
            conn.send_response(200, [("Connection", "close")], b"closing")
            conn.sleep(3.0)
            conn.close()

        port = self.start(workers=1, behaviour=answer_then_linger)
        c = self.client(port)
        for i in range(3):
            r = c.request("GET", f"/cc/{i}", timeout=2)
            self.assertEqual((r.status, r.body), (200, b"closing"))
        self.assertEqual(len({req.conn_id for req in self.up.requests}), 3)

    def test_upstream_closing_an_idle_pooled_connection_is_not_fatal(self):
        # The upstream closes each connection 0.1s after answering (a short keep-alive
        # timeout). The next request must still get a 200, on a new connection.
        def answer_then_close_soon(req, conn):
            conn.send_response(200, [], b"fresh")
            conn.sleep(0.1)
            conn.close()

        port = self.start(workers=1, behaviour=answer_then_close_soon)
        c = self.client(port)
        for i in range(3):
            r = c.request("GET", f"/idle-close/{i}", timeout=3)
            self.assertEqual((r.status, r.body), (200, b"fresh"))
            wait_until(lambda: self.up.open_connections() == 0, 5.0, message="the upstream's close")
        self.assertEqual(len(self.up.requests), 3)


    def test_a_request_with_a_body_is_not_sent_on_a_pooled_connection_the_upstream_closed(self):
        # A request with a body is not resent after a failure, so a pooled connection is
        # checked before it is used for one, however briefly it was idle.
        def answer_then_close_soon(req, conn):
            conn.send_response(200, [], b"got " + req.body)
            conn.sleep(0.05)
            conn.close()

        port = self.start(workers=1, behaviour=answer_then_close_soon)
        c = self.client(port)
        for i in range(3):
            r = c.request("POST", f"/post-after-close/{i}", body=b"x" * 10, timeout=3)
            self.assertEqual((r.status, r.body), (200, b"got xxxxxxxxxx"))
            # Sent as soon as the upstream has closed the pooled connection.
            wait_until(lambda: self.up.open_connections() == 0, 5.0, message="the upstream's close")
        self.assertEqual(len(self.up.requests), 3)
        self.assertEqual(self.up.connections, 3)

    def test_only_an_idempotent_request_is_sent_again_after_its_pooled_connection_broke(self):
        # The upstream reads each request after a connection's first, then resets the
        # connection: it may have acted on it. A GET is sent once more on a new connection
        # (RFC 9110 9.2.2: idempotent); a POST or PATCH without a body is not (502), as nginx.
        def first_then_reset(req, conn):
            if req.index_on_conn == 0:
                conn.send_response(200, [], b"first")
            else:
                conn.reset()

        port = self.start(workers=1, behaviour=first_then_reset)
        for method in ("POST", "PATCH"):
            c = self.client(port)
            self.assertEqual(c.request("GET", f"/warm/{method}", timeout=3).status, 200)
            r = c.request(method, f"/orders/{method}", [("Content-Length", "0")], timeout=3)
            self.assertEqual(r.status, 502, method)
            c.close()
        c = self.client(port)
        self.assertEqual(c.request("GET", "/warm/GET", timeout=3).status, 200)
        r = c.request("GET", "/again", timeout=3)
        self.assertEqual((r.status, r.body), (200, b"first"))
        time.sleep(0.2)  # a resent copy would arrive within this
        sent = [(q.method, q.target) for q in self.up.requests if not q.target.startswith("/warm/")]
        self.assertEqual(sent, [("POST", "/orders/POST"), ("PATCH", "/orders/PATCH"), ("GET", "/again"),
                                ("GET", "/again")])

    def test_a_request_the_upstream_began_to_answer_is_never_sent_again(self):
        # On a pooled connection, a request without a body that fails before any byte of
        # response is sent once more on a new connection. Once the upstream has answered
        # anything (an interim 103, or part of a head) it has the request: a second copy would
        # run it twice. (After a 103 sluice once resent the 103's own head as the request.)
        def first_then_cut(req, conn):
            if req.index_on_conn == 0:
                conn.send_response(200, [], b"first")
            elif "/hints/" in req.target:
                conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
                conn.close()
            else:
                conn.send(b"HTTP/1.1 200 OK\r\nContent-")
                conn.close()

        port = self.start(workers=1, behaviour=first_then_cut)
        for kind in ("hints", "partial"):
            with self.subTest(kind=kind):
                before, conns_before = len(self.up.requests), self.up.connections
                c = self.client(port)
                first = c.request("GET", f"/{kind}/0", timeout=3)
                self.assertEqual((first.status, first.body), (200, b"first"))
                r = c.request("GET", f"/{kind}/1", timeout=3)
                self.assertEqual(r.status, 502)
                if kind == "hints":
                    self.assertEqual([i.status for i in r.informational], [103])
                c.close()
                # Both requests reached the upstream once, on one connection; nothing else came.
                wait_until(lambda: self.up.connections >= conns_before + 1, 3, message="the connection")
                time.sleep(0.2)  # a resent copy would arrive within this
                self.assertEqual([q.target for q in self.up.requests[before:]], [f"/{kind}/0", f"/{kind}/1"])
                self.assertEqual(self.up.connections, conns_before + 1)
                self.assertEqual(self.up.incomplete, 0)

    def test_bytes_past_the_content_length_are_not_taken_as_the_next_response(self):
        # A broken upstream sends more than its Content-Length: the client gets the declared
        # body, and the connection is not reused (the extra bytes would answer the next request).
        def overlong(req, conn):
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcJUNK")

        port = self.start(workers=1, behaviour=overlong)
        c = self.client(port)
        for i in range(3):
            r = c.request("GET", f"/overlong/{i}", timeout=3)
            self.assertEqual((r.status, r.body), (200, b"abc"))
        self.assertEqual(len(self.up.requests), 3)
        self.assertEqual(self.up.connections, 3)

    def test_a_body_sent_after_an_answer_to_head_reaches_nobody(self):
        # An upstream that answers HEAD as it should (its Content-Length, no body), then
        # sends a body anyway, in a write of its own: a whole response, say. It leaves after
        # the answer, in a later packet (here held back by Nagle until the answer is
        # acknowledged, which on a reused connection comes with the next request): the peek
        # before reuse cannot see it, and on a reused connection it would be read as the
        # answer to another client's request. Such a connection is not reused.
        fake = b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nSet-Cookie: session=attacker\r\n\r\nFAKE-FOR-VICTIM"
        port = self.start(workers=1, behaviour=head_then_late_body(fake))
        attacker, victim = self.client(port), self.client(port)
        for i in range(10):
            r = attacker.request("HEAD", f"/upload/{i}", timeout=3)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"")
            r = victim.request("GET", f"/account/{i}", timeout=3)
            self.assertEqual((r.status, r.body), (200, f"/account/{i}".encode()), r.headers)
            self.assertFalse(r.has_header("set-cookie"))
        # Answers to HEAD that announce no body leave the connection to be reused.
        def plain_head(req, conn):
            body = req.target.encode()
            if req.method == "HEAD":
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            else:
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        self.up.behaviour = plain_head
        before = self.up.connections
        for i in range(3):
            self.assertEqual(attacker.request("HEAD", f"/h/{i}", timeout=3).status, 200)
            self.assertEqual(victim.request("GET", f"/g/{i}", timeout=3).body, f"/g/{i}".encode())
        self.assertLessEqual(self.up.connections - before, 1)


if __name__ == "__main__":
    unittest.main()
