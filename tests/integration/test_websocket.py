"""WebSocket through sluice, with a real client and server (Debian's python3-websockets):
echo of text, binary and a 1 MB message, ping/pong, close from either side, the route's
limit applied to handshakes (the 11th of a burst of 10 gets 429), an upstream refusing the
handshake (403 relayed), the access line of a closed tunnel, the open-tunnels gauge, and
server.tunnel_idle_timeout.
"""

import asyncio
import http
import os
import re
import signal
import socket
import sys
import threading
import time
import unittest

sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-websockets
import websockets  # noqa: E402

from admin_api import admin_request, wait_admin  # noqa: E402
from harness import (SluiceTestCase, free_port, limited_route, proxy_config, token_bucket,  # noqa: E402
                     wait_until)


class EchoServer:
    """A websockets server in its own thread: /echo echoes every message, /bye answers the
    first message with "bye" and closes (code 4000), /forbidden refuses with 403."""

    def __init__(self):
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.ready.wait(10):
            raise AssertionError(f"the websocket echo server did not listen on {self.port} within 10 s")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    async def _handler(self, ws, path):
        if path.endswith("/bye"):
            await ws.recv()
            await ws.send("bye")
            await ws.close(code=4000, reason="server says bye")
            return
        async for message in ws:
            await ws.send(message)

    async def _process_request(self, path, headers):
        if path.endswith("/forbidden"):
            return http.HTTPStatus.FORBIDDEN, [("Content-Type", "text/plain")], b"no websocket for you\n"
        return None

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def main():
            self.server = await websockets.serve(self._handler, "127.0.0.1", self.port,
                                                 process_request=self._process_request, max_size=None)
            self.ready.set()
            await self.server.wait_closed()
        self.loop.run_until_complete(main())

    def stop(self):
        def close():
            self.server.close()
        self.loop.call_soon_threadsafe(close)
        self.thread.join(10)


def run(coroutine):
    return asyncio.new_event_loop().run_until_complete(coroutine)


class WebSocketTest(SluiceTestCase):
    def setUp(self):
        self.upstream = EchoServer()
        self.addCleanup(self.upstream.stop)

    def start_proxy(self, limits=None, server=None):
        self.port = free_port()
        self.admin = free_port()
        routes = [limited_route("ws", limits or [], path_prefix="/ws")]
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.upstream.address}, routes, server=server,
            extra={"store": {"type": "memory"}, "admin": {"listen": f"127.0.0.1:{self.admin}"}}))
        wait_admin(self.admin)

    def url(self, path):
        return f"ws://127.0.0.1:{self.port}{path}"

    def metric(self, name):
        _, _, body = admin_request(self.admin, "/metrics")
        m = re.search(rf"(?m)^{name} (\d+)$", body.decode())
        return int(m.group(1)) if m else None

    def test_echo_large_message_ping_and_client_close(self):
        self.start_proxy()
        big = os.urandom(1 << 20)  # 1 MiB that permessage-deflate cannot shrink

        async def session():
            async with websockets.connect(self.url("/ws/echo"), max_size=None) as ws:
                await ws.send("hello through sluice")
                self.assertEqual(await ws.recv(), "hello through sluice")
                await ws.send(b"\x00\x01binary")
                self.assertEqual(await ws.recv(), b"\x00\x01binary")
                await ws.send(big)
                self.assertEqual(await ws.recv(), big)
                pong = await ws.ping(b"are you there")
                await asyncio.wait_for(pong, 5)
                self.assertEqual(self.metric("sluice_tunnels_active"), 1)
        run(session())
        entry = self.sluice.wait_access(status="101")
        self.assertIn("tunnel_up=", entry["line"])
        up = int(re.search(r"tunnel_up=(\d+)", entry["line"]).group(1))
        down = int(re.search(r"tunnel_down=(\d+)", entry["line"]).group(1))
        self.assertGreater(up, len(big))    # the message and its framing (masked, client to server)
        self.assertGreater(down, len(big))
        wait_until(lambda: self.metric("sluice_tunnels_active") == 0, 5, message="the tunnel gauge back to 0")

    def test_close_from_the_server_reaches_the_client(self):
        self.start_proxy()

        async def session():
            async with websockets.connect(self.url("/ws/bye")) as ws:
                await ws.send("hi")
                self.assertEqual(await ws.recv(), "bye")
                with self.assertRaises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
                self.assertEqual(closed.exception.code, 4000)
                self.assertEqual(closed.exception.reason, "server says bye")
        run(session())
        self.sluice.wait_access(status="101")

    def test_handshakes_count_against_the_route_limit(self):
        self.start_proxy(limits=[token_bucket("handshakes", 1, "1h", 10, key=[])])

        async def burst():
            statuses = []
            for _ in range(11):
                try:
                    async with websockets.connect(self.url("/ws/echo")) as ws:
                        await ws.send("x")
                        await ws.recv()
                        statuses.append(101)
                except websockets.InvalidStatusCode as e:
                    statuses.append(e.status_code)
            return statuses
        statuses = run(burst())
        self.assertEqual(statuses, [101] * 10 + [429])

    def test_a_limit_counting_101_is_charged_as_the_tunnel_opens(self):
        # count: {statuses: [101]}: each tunnel opened is charged before its 101 goes, so the
        # limit holds while the tunnels stay open (charged when they closed, every handshake
        # meanwhile passed).
        limit = {"name": "tunnels", "algorithm": "fixed_window", "limit": 2, "window": "1h", "key": [],
                 "count": {"statuses": [101]}}
        self.start_proxy(limits=[limit])

        async def three_open_at_once():
            statuses, held = [], []
            for _ in range(3):
                try:
                    ws = await websockets.connect(self.url("/ws/echo"))
                    held.append(ws)
                    statuses.append(101)
                except websockets.InvalidStatusCode as e:
                    statuses.append(e.status_code)
            for ws in held:
                await ws.close()
            return statuses
        self.assertEqual(run(three_open_at_once()), [101, 101, 429])

    def test_an_upstream_refusing_the_handshake_is_relayed(self):
        self.start_proxy()

        async def refused():
            with self.assertRaises(websockets.InvalidStatusCode) as e:
                async with websockets.connect(self.url("/ws/forbidden")):
                    pass
            return e.exception.status_code
        self.assertEqual(run(refused()), 403)
        self.sluice.wait_access(status="403")

    def test_an_idle_tunnel_is_closed_after_tunnel_idle_timeout(self):
        self.start_proxy(server={"tunnel_idle_timeout": "1s"})

        async def idle():
            async with websockets.connect(self.url("/ws/echo"), ping_interval=None) as ws:
                await ws.send("one")
                await ws.recv()
                started = time.monotonic()
                with self.assertRaises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 10)
                return time.monotonic() - started
        took = run(idle())
        self.assertGreater(took, 0.8)
        self.assertLess(took, 5)


    def test_sigterm_gives_an_open_tunnel_shutdown_timeout_then_closes_it(self):
        self.start_proxy(server={"shutdown_timeout": "1s"})

        async def open_tunnel_then_stop():
            async with websockets.connect(self.url("/ws/echo"), ping_interval=None) as ws:
                await ws.send("before")
                self.assertEqual(await ws.recv(), "before")
                started = time.monotonic()
                self.sluice.send_signal(signal.SIGTERM)
                await ws.send("during the grace period")
                self.assertEqual(await ws.recv(), "during the grace period")
                with self.assertRaises(websockets.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 10)
                return time.monotonic() - started
        took = run(open_tunnel_then_stop())
        self.assertLess(took, 5)
        self.assertEqual(self.sluice.wait(10), 0)

class RawTunnelUpstream:
    """A bare upstream for one tunnel: reads a handshake, answers 101 and EARLY-UPSTREAM in the
    same write, then echoes what comes ("ECHO:" before each piece); records every byte it
    got after the handshake's head."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.after_head = b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            head, rest = data.split(b"\r\n\r\n", 1)
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                         b"Upgrade: websocket\r\n\r\nEARLY-UPSTREAM")
            pending = rest
            while True:
                if pending:
                    self.after_head += pending
                    conn.sendall(b"ECHO:" + pending)
                pending = conn.recv(4096)
                if not pending:
                    break
        self.done.set()

    def stop(self):
        self.sock.close()


class TunnelHandOffTest(SluiceTestCase):
    """What each side sent in the same packets as the handshake crosses the tunnel, first."""

    def test_bytes_sent_with_the_handshakes_cross_first(self):
        upstream = RawTunnelUpstream()
        self.addCleanup(upstream.stop)
        port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            port, {"app": upstream.address}, [limited_route("ws", [], path_prefix="/ws")],
            extra={"store": {"type": "memory"}}))
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(b"GET /ws/raw HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
                  b"EARLY-CLIENT")
        expected_down = b"EARLY-UPSTREAMECHO:EARLY-CLIENT"
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < len(expected_down):
            piece = c.recv(4096)
            self.assertTrue(piece, got)
            got += piece
        head, body = got.split(b"\r\n\r\n", 1)
        self.assertTrue(head.startswith(b"HTTP/1.1 101 "), head)
        self.assertEqual(body, expected_down)
        c.shutdown(socket.SHUT_WR)
        self.assertTrue(upstream.done.wait(5), "the upstream saw the tunnel end")
        c.close()
        self.assertEqual(upstream.after_head, b"EARLY-CLIENT")
        entry = self.sluice.wait_access(status="101")
        self.assertEqual(int(re.search(r"tunnel_up=(\d+)", entry["line"]).group(1)), len(b"EARLY-CLIENT"))
        self.assertEqual(int(re.search(r"tunnel_down=(\d+)", entry["line"]).group(1)), len(expected_down))


if __name__ == "__main__":
    unittest.main()
