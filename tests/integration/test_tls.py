"""TLS through sluice, with real clients and servers: certificates made by the `openssl`
command line for every run (a root CA, an intermediate, server certificates, an expired and
a self-signed one, a client certificate).

Listeners: curl and Python's ssl succeed against the served chain, SNI picks the certificate
(exact and wildcard names, the first certificate for unknown names), TLS 1.0/1.1 are refused
(and TLS 1.2 with min_version 1.3), plain HTTP to a TLS port gets a 400, the handshake
timeout, failures counted by reason without a log line each, X-Forwarded-Proto https, a
reload that picks up new certificate files and one that refuses a bad key, --check on bad
files, WebSocket over TLS.

Upstreams: HTTPS verified against a given CA and pooled, the server name checked (given or
the server's address), an untrusted, expired or misnamed certificate is a 502 (and nothing is
sent), verify: false, a client certificate for an upstream that requires one.
"""

import asyncio
import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

from admin_api import Metrics, wait_admin
from harness import (LOOPBACK, RawClient, SluiceTestCase, Upstream, delayed, echo, free_port, proxy_config,
                     respond, run_cli, wait_until)

sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-websockets
import websockets  # noqa: E402


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """Certificates in a temporary directory. Every path returned is absolute."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-tls-")
        self.root, self.root_key = self.path("root.pem"), self.path("root.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.root_key, "-out", self.root, "-days", "30", "-subj", "/CN=sluice test root",
                cwd=self.dir)
        self.inter, self.inter_key = self.issue("inter", "sluice test intermediate", [], ca=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def issue(self, name, cn, sans, *, ca=False, days=30, issuer=None, client=False, rsa=False):
        """(cert path, key path); the cert file holds the chain up to (not including) the root
        when the issuer is the intermediate."""
        issuer = issuer or "root"
        issuer_cert, issuer_key = (self.root, self.root_key) if issuer == "root" else (self.inter, self.inter_key)
        key, csr, cert = self.path(name + ".key"), self.path(name + ".csr"), self.path(name + ".pem")
        keyargs = ["rsa:2048"] if rsa else ["ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        openssl("req", "-newkey", *keyargs, "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=" + cn,
                cwd=self.dir)
        ext = [("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign" if ca
                else "basicConstraints=CA:FALSE\nextendedKeyUsage=" + ("clientAuth" if client else "serverAuth"))]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        extfile = self.path(name + ".ext")
        with open(extfile, "w") as f:
            f.write("\n".join(ext) + "\n")
        openssl("x509", "-req", "-in", csr, "-CA", issuer_cert, "-CAkey", issuer_key, "-CAcreateserial",
                "-out", cert, "-days", str(days), "-extfile", extfile, cwd=self.dir)
        if issuer == "inter":
            with open(cert, "a") as out, open(self.inter) as chain:
                out.write(chain.read())
        return cert, key

    def self_signed(self, name, cn, sans):
        key, cert = self.path(name + ".key"), self.path(name + ".pem")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", cert, "-days", "30", "-subj", "/CN=" + cn, "-addext", "subjectAltName=" + ",".join(sans),
                cwd=self.dir)
        return cert, key

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def names_of(der_cert):
    """The DNS names of a certificate in DER form (read with the openssl CLI)."""
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-ext", "subjectAltName"],
                         input=der_cert, capture_output=True, check=True).stdout.decode()
    return sorted(re.findall(r"DNS:([^,\s]+)", out))


def client_context(cafile, **kw):
    ctx = ssl.create_default_context(cafile=cafile)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def tls_connect(port, ctx, server_hostname):
    sock = socket.create_connection((LOOPBACK, port), timeout=5)
    try:
        return ctx.wrap_socket(sock, server_hostname=server_hostname)
    except BaseException:
        sock.close()
        raise


def https_get(port, ctx, host, path="/"):
    """(status, raw response bytes) of one GET over a new TLS connection to loopback, with
    `host` as SNI and Host header."""
    with tls_connect(port, ctx, host) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


class PkiMixin:
    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        p = cls.pki
        # a: served with its intermediate; names a.test, localhost and 127.0.0.1.
        cls.a = p.issue("a", "a.test", ["DNS:a.test", "DNS:localhost", "IP:127.0.0.1"], issuer="inter")
        cls.a2 = p.issue("a2", "a.test", ["DNS:a.test", "DNS:localhost", "IP:127.0.0.1"], issuer="inter")
        cls.b = p.issue("b", "b.test", ["DNS:b.test"], rsa=True)
        cls.wild = p.issue("wild", "w.test", ["DNS:*.w.test"])
        cls.expired = p.issue("expired", "a.test", ["DNS:a.test", "IP:127.0.0.1"], days=-1)
        cls.selfsigned = p.self_signed("self", "a.test", ["DNS:a.test", "IP:127.0.0.1"])
        cls.client_pair = p.issue("client", "sluice-client", [], client=True)

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def cert_entry(self, pair):
        return {"cert": pair[0], "key": pair[1]}


class TlsListenerTest(PkiMixin, SluiceTestCase):

    def start_tls(self, tls, *, admin=False, server=None, upstream=None):
        """sluice with a plain listener (first, so that waiting for it to listen makes no TLS
        connection) and a TLS one; returns (sluice, tls port, admin port or None)."""
        self.upstream = upstream or self.start_upstream(echo())
        plain, secure = free_port(), free_port()
        extra = {}
        admin_port = None
        if admin:
            admin_port = free_port()
            extra["admin"] = {"listen": f"{LOOPBACK}:{admin_port}"}
        srv = {"listen": [f"{LOOPBACK}:{plain}", {"address": f"{LOOPBACK}:{secure}", "tls": tls}]}
        if server:
            srv.update(server)
        s = self.start_sluice(proxy_config(plain, {"app": self.upstream.address}, server=srv, extra=extra),
                              port=plain)
        if admin:
            wait_admin(admin_port)
        self.plain_port = plain
        return s, secure, admin_port

    def failures(self, admin_port, reason):
        return Metrics.fetch(admin_port).get("sluice_tls_handshake_failures_total", reason=reason)

    def test_curl_gets_the_chain_and_the_request_is_marked_https(self):
        s, port, _ = self.start_tls(self.cert_entry(self.a))
        # curl trusts only the root: the intermediate must come from the certificate file.
        # It offers h2 too, which ALPN picks (test_http2.py serves it).
        out = subprocess.run(["curl", "-sS", "--http2", "--cacert", self.pki.root, "--resolve",
                              f"a.test:{port}:127.0.0.1", "-D", "-", f"https://a.test:{port}/hello?x=1"],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("HTTP/2 200"), out.stdout[:200])
        req = self.upstream.last()
        self.assertEqual(req.target, "/hello?x=1")
        self.assertEqual(req.header("x-forwarded-proto"), "https")
        self.assertEqual(req.header("host"), f"a.test:{port}")
        s.wait_access(status="200", target="/hello?x=1")
        # The plain listener of the same process still says http.
        with RawClient(self.plain_port) as c:
            self.assertEqual(c.request("GET", "/plain").status, 200)
        self.assertEqual(self.upstream.last().header("x-forwarded-proto"), "http")

    def test_python_ssl_keep_alive_and_alpn(self):
        _, port, admin_port = self.start_tls(self.cert_entry(self.a), admin=True)
        ctx = client_context(self.pki.root)
        ctx.set_alpn_protocols(["http/1.1"])
        conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=5)
        for i in range(5):
            conn.request("GET", f"/k{i}")
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        self.assertEqual(conn.sock.selected_alpn_protocol(), "http/1.1")
        self.assertIn(conn.sock.version(), ("TLSv1.2", "TLSv1.3"))
        conn.close()
        self.assertEqual(Metrics.fetch(admin_port).get("sluice_tls_handshakes_total"), 1)
        # h2 first when offered; a client offering neither gets no ALPN answer rather than a
        # refusal (it may then speak HTTP/1.1 or hang up, as with nginx).
        for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1", "h2"], "h2"), (["spdy/3"], None)):
            ctx2 = client_context(self.pki.root)
            ctx2.set_alpn_protocols(offered)
            with tls_connect(port, ctx2, "a.test") as sock:
                self.assertEqual(sock.selected_alpn_protocol(), chosen, offered)

    def test_sni_picks_the_certificate_and_unknown_names_get_the_first(self):
        _, port, _ = self.start_tls({"certificates": [self.cert_entry(self.a), self.cert_entry(self.b),
                                                      self.cert_entry(self.wild)]})
        ctx = client_context(self.pki.root)
        for name, expected in (("b.test", ["b.test"]), ("a.test", ["a.test", "localhost"]),
                               ("x.w.test", ["*.w.test"]), ("B.TEST", ["b.test"])):
            with tls_connect(port, ctx, name) as sock:
                self.assertEqual(names_of(sock.getpeercert(binary_form=True)), expected, name)
        # A name no certificate has: the first one is served, and a verifying client rejects it.
        with self.assertRaises(ssl.SSLCertVerificationError) as caught:
            tls_connect(port, ctx, "c.test")
        self.assertIn("c.test", str(caught.exception))
        # A wildcard covers one label only.
        with self.assertRaises(ssl.SSLCertVerificationError):
            tls_connect(port, ctx, "y.x.w.test")
        # No SNI at all: the first certificate.
        lax = client_context(self.pki.root, check_hostname=False)
        with tls_connect(port, lax, None) as sock:
            self.assertEqual(names_of(sock.getpeercert(binary_form=True)), ["a.test", "localhost"])
        # A request over the b.test certificate goes through like any other.
        status, _ = https_get(port, ctx, "b.test", "/via-b")
        self.assertEqual(status, 200)

    def test_old_protocols_are_refused(self):
        _, port, admin_port = self.start_tls(self.cert_entry(self.a), admin=True)
        old = client_context(self.pki.root)
        with warnings.catch_warnings():  # the point is to offer them
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
        for _ in range(2):
            with self.assertRaises(ssl.SSLError):
                tls_connect(port, old, "a.test")
        wait_until(lambda: self.failures(admin_port, "protocol_version") == 2, 5,
                   message="two protocol_version failures counted")
        out = subprocess.run(["curl", "-sS", "--tlsv1.0", "--tls-max", "1.1", "--cacert", self.pki.root,
                              f"https://localhost:{port}/"], capture_output=True, text=True, timeout=20)
        self.assertNotEqual(out.returncode, 0)
        self.assertEqual(len(self.upstream.requests), 0)
        # TLS 1.2 is accepted by default, with a forward-secret AEAD cipher.
        tls12 = client_context(self.pki.root)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with tls_connect(port, tls12, "a.test") as sock:
            self.assertEqual(sock.version(), "TLSv1.2")
            cipher = sock.cipher()[0]
            self.assertTrue(cipher.startswith("ECDHE-") and ("GCM" in cipher or "CHACHA20" in cipher), cipher)
        # No CBC, no RSA key exchange offered even to a client asking only for them.
        weak = client_context(self.pki.root)
        weak.maximum_version = ssl.TLSVersion.TLSv1_2
        weak.set_ciphers("AES128-SHA:AES256-SHA:ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:@SECLEVEL=0")
        with self.assertRaises(ssl.SSLError):
            tls_connect(port, weak, "a.test")

    def test_min_version_1_3(self):
        _, port, _ = self.start_tls(dict(self.cert_entry(self.a), min_version="1.3"))
        tls12 = client_context(self.pki.root)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises(ssl.SSLError):
            tls_connect(port, tls12, "a.test")
        with tls_connect(port, client_context(self.pki.root), "a.test") as sock:
            self.assertEqual(sock.version(), "TLSv1.3")

    def test_plain_http_to_a_tls_port_gets_400(self):
        s, port, admin_port = self.start_tls(self.cert_entry(self.a), admin=True)
        c = self.client(port)
        c.send(b"GET /secret HTTP/1.1\r\nHost: a.test\r\n\r\n")
        resp = c.read_response()
        self.assertEqual(resp.status, 400)
        self.assertIn(b"HTTPS", resp.body)
        c.wait_closed()
        self.assertEqual(self.failures(admin_port, "plain_http"), 1)
        s.wait_log(r"TLS handshake from 127\.0\.0\.1 failed: plain_http")
        self.assertEqual(len(self.upstream.requests), 0)

    def test_handshake_timeout(self):
        _, port, admin_port = self.start_tls(dict(self.cert_entry(self.a), handshake_timeout="300ms"),
                                             admin=True)
        silent = self.client(port)
        partial = self.client(port)
        partial.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello cut short
        started = time.monotonic()
        silent.wait_closed(timeout=3)
        partial.wait_closed(timeout=3)
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assertEqual(self.failures(admin_port, "timeout"), 2)
        # A client that completes its handshake in time is not affected.
        with tls_connect(port, client_context(self.pki.root), "a.test") as sock:
            self.assertTrue(sock.version())

    def test_a_graceful_stop_closes_connections_still_in_their_handshake_at_once(self):
        # They carry no request: as idle keep-alive connections, they are closed when the stop
        # begins (they held it for their handshake_timeout), and no failure is counted for them.
        s, port, admin_port = self.start_tls(dict(self.cert_entry(self.a), handshake_timeout="30s"),
                                             admin=True, server={"shutdown_timeout": "30s"})
        silent = self.client(port)
        partial = self.client(port)
        partial.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello cut short
        wait_until(lambda: Metrics.fetch(admin_port).get("sluice_connections_active") == 2, 5,
                   message="both connections taken")
        s.send_signal(signal.SIGTERM)
        self.assertEqual(silent.wait_closed(timeout=10), b"")
        self.assertEqual(partial.wait_closed(timeout=10), b"")
        self.assertEqual(s.wait(10), 0, s.log_text())
        self.assertNotIn("handshake", s.stderr_text())

    def test_a_graceful_stop_ends_tls_connections_with_close_notify(self):
        # An idle keep-alive connection, and one whose request is answered during the stop
        # (with Connection: close), end with close_notify: the client can tell sluice's close
        # from a cut connection (Python reads a bare FIN as SSLEOFError with ragged EOFs
        # not suppressed).
        def behaviour(req, conn):
            (delayed(1.0, respond(200, b"during")) if req.target == "/during" else respond(200, b"first"))(req, conn)

        slow = Upstream(behaviour).start()
        self.addCleanup(slow.stop)
        s, port, _ = self.start_tls(self.cert_entry(self.a), upstream=slow, server={"shutdown_timeout": "30s"})
        ctx = client_context(self.pki.root)

        def connect():
            sock = socket.create_connection((LOOPBACK, port), timeout=10)
            return ctx.wrap_socket(sock, server_hostname="a.test", suppress_ragged_eofs=False)

        def read_to_end(sock):
            data = b""
            while True:
                chunk = sock.recv(65536)  # raises SSLEOFError on a close without close_notify
                if not chunk:
                    return data
                data += chunk

        idle = connect()
        self.addCleanup(idle.close)
        idle.sendall(b"GET /first HTTP/1.1\r\nHost: a.test\r\n\r\n")
        first = b""
        while not first.endswith(b"first"):
            first += idle.recv(65536)
        busy = connect()
        self.addCleanup(busy.close)
        busy.sendall(b"GET /during HTTP/1.1\r\nHost: a.test\r\n\r\n")
        wait_until(lambda: len(slow.requests) >= 2, 5, message="the second request reached the upstream")
        s.send_signal(signal.SIGTERM)
        self.assertEqual(read_to_end(idle), b"")
        answer = read_to_end(busy)
        self.assertTrue(answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"during"), answer)
        self.assertIn(b"connection: close", answer.lower())
        self.assertEqual(s.wait(10), 0, s.log_text())

    def test_failed_handshakes_are_counted_not_logged_one_by_one(self):
        s, port, admin_port = self.start_tls(self.cert_entry(self.a), admin=True)
        for _ in range(40):
            with socket.create_connection((LOOPBACK, port), timeout=5) as sock:
                sock.sendall(b"\x16\x03\x01\x00\x05garbage-not-tls-at-all\r\n")
                try:
                    while sock.recv(4096):
                        pass
                except OSError:
                    pass
        wait_until(lambda: sum(v for _, v in Metrics.fetch(admin_port).select(
            "sluice_tls_handshake_failures_total")) == 40, 5, message="40 failed handshakes counted")
        lines = re.findall(r"TLS handshake from .* failed", s.log_text())
        self.assertGreaterEqual(len(lines), 1)
        self.assertLessEqual(len(lines), 4, "one warning per worker per 10 s at most")
        # Still serving.
        status, _ = https_get(port, client_context(self.pki.root), "a.test")
        self.assertEqual(status, 200)

    def test_reload_reads_new_certificate_files_and_refuses_a_bad_key(self):
        cert, key = os.path.join(self.pki.dir, "live.pem"), os.path.join(self.pki.dir, "live.key")
        shutil.copy(self.a[0], cert)
        shutil.copy(self.a[1], key)
        s, port, _ = self.start_tls({"cert": cert, "key": key})
        ctx = client_context(self.pki.root)

        def served():
            with tls_connect(port, ctx, "a.test") as sock:
                return sock.getpeercert(binary_form=True)

        def leaf(path):
            with open(path) as f:
                pem = f.read()
            return ssl.PEM_cert_to_DER_cert(pem[:pem.index("-----END CERTIFICATE-----") + 25])

        first, second = leaf(self.a[0]), leaf(self.a2[0])
        self.assertEqual(served(), first)
        kept = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=5)
        kept.request("GET", "/before")
        kept.getresponse().read()

        shutil.copy(self.a2[0], cert)
        shutil.copy(self.a2[1], key)
        s.send_signal(signal.SIGHUP)
        s.wait_log(r"reloaded .*sluice\.yaml")
        self.assertEqual(served(), second)
        # A connection made before the reload goes on with its own session.
        kept.request("GET", "/after")
        resp = kept.getresponse()
        resp.read()
        self.assertEqual(resp.status, 200)
        kept.close()

        # A key that does not belong to the certificate: the reload is refused, the running
        # certificate stays.
        shutil.copy(self.b[1], key)
        s.send_signal(signal.SIGHUP)
        s.wait_log(r"reload of .*sluice\.yaml refused")
        self.assertRegex(s.log_text(), r"does not match|not match")
        self.assertEqual(served(), second)

    def test_websocket_over_tls(self):
        from test_websocket import EchoServer
        ws_upstream = EchoServer()
        self.addCleanup(ws_upstream.stop)
        plain, secure = free_port(), free_port()
        srv = {"listen": [f"{LOOPBACK}:{plain}",
                          {"address": f"{LOOPBACK}:{secure}", "tls": self.cert_entry(self.a)}]}
        self.start_sluice(proxy_config(plain, {"ws": ws_upstream.address}, server=srv), port=plain)
        ctx = client_context(self.pki.root)

        async def chat():
            async with websockets.connect(f"wss://localhost:{secure}/echo", ssl=ctx) as ws:
                await ws.send("hello over tls")
                first = await ws.recv()
                big = os.urandom(300_000)
                await ws.send(big)
                second = await ws.recv()
                return first, second == big

        first, big_ok = asyncio.run(asyncio.wait_for(chat(), 20))
        self.assertEqual(first, "hello over tls")
        self.assertTrue(big_ok)

    def test_a_tunnel_over_tls_ends_each_direction_cleanly(self):
        # The upstream ends its side of the tunnel (FIN): the TLS client gets close_notify,
        # not a bare FIN (a cut connection), and can still send, as over TCP; its own
        # close_notify then reaches the upstream as the end of the other direction.
        listener = socket.create_server((LOOPBACK, 0))
        self.addCleanup(listener.close)
        got = {"after": b"", "ended": threading.Event()}

        def serve():
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nBYE")
                conn.shutdown(socket.SHUT_WR)
                while True:
                    piece = conn.recv(4096)
                    if not piece:
                        break
                    got["after"] += piece
            got["ended"].set()

        threading.Thread(target=serve, daemon=True).start()
        plain, secure = free_port(), free_port()
        srv = {"listen": [f"{LOOPBACK}:{plain}", {"address": f"{LOOPBACK}:{secure}", "tls": self.cert_entry(self.a)}]}
        self.start_sluice(proxy_config(plain, {"raw": f"{LOOPBACK}:{listener.getsockname()[1]}"}, server=srv),
                          port=plain)
        sock = client_context(self.pki.root).wrap_socket(
            socket.create_connection((LOOPBACK, secure), timeout=10), server_hostname="a.test",
            suppress_ragged_eofs=False)
        self.addCleanup(sock.close)
        sock.sendall(b"GET /raw HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        down = b""
        while True:
            piece = sock.recv(4096)  # SSLEOFError on a bare FIN
            if not piece:
                break
            down += piece
        self.assertTrue(down.startswith(b"HTTP/1.1 101 ") and down.endswith(b"\r\n\r\nBYE"), down)
        sock.sendall(b"STILL-SENDING")
        sock.unwrap()  # close_notify: the end of the client's direction
        self.assertTrue(got["ended"].wait(5), "the upstream saw the client's direction end")
        self.assertEqual(got["after"], b"STILL-SENDING")

    def test_check_validates_certificate_files(self):
        work = tempfile.mkdtemp(prefix="sluice-tls-check-")
        self.addCleanup(shutil.rmtree, work, True)
        garbage = os.path.join(work, "garbage.pem")
        with open(garbage, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
        encrypted = os.path.join(work, "enc.key")
        openssl("pkey", "-in", self.a[1], "-out", encrypted, "-aes256", "-passout", "pass:secret", cwd=work)

        def check(tls, upstream_tls=None):
            cfg = proxy_config(8080, {"app": {"servers": ["127.0.0.1:9"], **({"tls": upstream_tls}
                                                                             if upstream_tls else {})}},
                               server={"listen": [{"address": "127.0.0.1:8443", "tls": tls}]})
            from harness import to_yaml
            path = os.path.join(work, "sluice.yaml")
            with open(path, "w") as f:
                f.write(to_yaml(cfg))
            out = run_cli(["--check", "-c", path])
            return out.returncode, out.stdout + out.stderr

        rc, text = check(self.cert_entry(self.a))
        self.assertEqual(rc, 0, text)
        # Relative paths are relative to the configuration file, not to the working directory.
        os.makedirs(os.path.join(work, "certs"))
        shutil.copy(self.a[0], os.path.join(work, "certs", "site.pem"))
        shutil.copy(self.a[1], os.path.join(work, "certs", "site.key"))
        rc, text = check({"cert": "certs/site.pem", "key": "certs/site.key"})
        self.assertEqual(rc, 0, text)
        cases = [
            ({"cert": os.path.join(work, "missing.pem"), "key": self.a[1]}, r"'cert': .*missing\.pem"),
            ({"cert": garbage, "key": self.a[1]}, r"'cert'"),
            ({"cert": self.a[0], "key": self.b[1]}, r"not match"),
            ({"cert": self.a[0], "key": encrypted}, r"(?i)encrypted|passphrase"),
            ({"cert": work, "key": self.a[1]}, r"'cert': .*(regular file|directory)"),
            ({"cert": self.a[0]}, r"needs both 'cert'"),
            (dict(self.cert_entry(self.a), min_version="1.1"), r"min_version"),
            ({"certificates": []}, r"at least one"),
        ]
        for tls, pattern in cases:
            rc, text = check(tls)
            self.assertNotEqual(rc, 0, (tls, text))
            self.assertRegex(text, r"sluice\.yaml:\d+:\d+: ", (tls, text))
            self.assertRegex(text, pattern, (tls, text))
        # An expired certificate is a warning (a renewal may be on its way), not an error.
        rc, text = check(self.cert_entry(self.expired))
        self.assertEqual(rc, 0, text)
        self.assertRegex(text, r"expired on")
        # Upstream side: the CA file must hold certificates.
        rc, text = check(self.cert_entry(self.a), {"ca": garbage})
        self.assertNotEqual(rc, 0, text)
        self.assertRegex(text, r"'ca'")
        rc, text = check(self.cert_entry(self.a), {"ca": self.pki.root, "server_name": "bad name!"})
        self.assertNotEqual(rc, 0, text)
        self.assertRegex(text, r"'server_name'")


class TlsUpstreamTest(PkiMixin, SluiceTestCase):

    def server_context(self, pair, *, require_client=False):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*pair)
        if require_client:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.pki.root)
        return ctx

    def https_upstream(self, pair, behaviour=None, **kw):
        up = Upstream(behaviour or echo(), name="https-upstream", tls=self.server_context(pair, **kw)).start()
        self.addCleanup(up.stop)
        return up

    def proxy(self, upstream, tls):
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": {"servers": [upstream.address], "tls": tls}}))
        return s, port

    def test_verified_and_pooled(self):
        up = self.https_upstream(self.a)
        _, port = self.proxy(up, {"ca": self.pki.root, "server_name": "a.test"})
        with RawClient(port) as c:
            for i in range(5):
                resp = c.request("GET", f"/p{i}", body=b"x" * 1000, headers=[("Content-Type", "text/plain")])
                self.assertEqual(resp.status, 200)
        self.assertEqual(len(up.requests), 5)
        self.assertEqual(up.connections, 1, "one kept-alive TLS connection for all five requests")
        self.assertEqual(up.tls_failures, [])
        self.assertEqual(up.requests[-1].body, b"x" * 1000)

    def test_server_name_defaults_to_the_server_address(self):
        up = self.https_upstream(self.a)  # has IP:127.0.0.1
        _, port = self.proxy(up, {"ca": self.pki.root})
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/").status, 200)
        up_b = self.https_upstream(self.b)  # b.test only
        s, port_b = self.proxy(up_b, {"ca": self.pki.root})
        with RawClient(port_b) as c:
            self.assertEqual(c.request("GET", "/").status, 502)
        self.assertEqual(up_b.requests, [])
        s.wait_log(r"TLS handshake failed: .*(hostname mismatch|IP address mismatch)")

    def assert_refused(self, up, tls, reason):
        s, port = self.proxy(up, tls)
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/secret").status, 502)
        self.assertEqual(up.requests, [], "nothing may be sent to an unverified server")
        s.wait_log(r"upstream app server 127\.0\.0\.1:\d+: TLS handshake failed: .*" + reason)

    def test_untrusted_expired_or_misnamed_certificates_are_502(self):
        self.assert_refused(self.https_upstream(self.selfsigned), {"ca": self.pki.root, "server_name": "a.test"},
                            r"self.signed")
        self.assert_refused(self.https_upstream(self.selfsigned), {"ca": "system", "server_name": "a.test"},
                            r"self.signed")
        self.assert_refused(self.https_upstream(self.expired), {"ca": self.pki.root, "server_name": "a.test"},
                            r"expired")
        self.assert_refused(self.https_upstream(self.a), {"ca": self.pki.root, "server_name": "other.test"},
                            r"mismatch")

    def test_verify_false_accepts_any_certificate(self):
        up = self.https_upstream(self.selfsigned)
        _, port = self.proxy(up, {"verify": False, "server_name": "whatever.test"})
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/").status, 200)
        self.assertEqual(len(up.requests), 1)

    def test_client_certificate(self):
        up = self.https_upstream(self.a, require_client=True)
        s, port = self.proxy(up, {"ca": self.pki.root, "server_name": "a.test"})
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/").status, 502)
        self.assertEqual(up.requests, [])
        up2 = self.https_upstream(self.a, require_client=True)
        _, port2 = self.proxy(up2, {"ca": self.pki.root, "server_name": "a.test",
                                    "cert": self.client_pair[0], "key": self.client_pair[1]})
        with RawClient(port2) as c:
            self.assertEqual(c.request("GET", "/").status, 200)
        subject = dict(x[0] for x in up2.peer_certs[-1]["subject"])
        self.assertEqual(subject["commonName"], "sluice-client")

    def test_bytes_past_a_response_over_tls_are_not_taken_as_the_next_response(self):
        # As over plain TCP (test_keepalive): a broken upstream sends more than its
        # Content-Length, in the response's own TLS record or in a record of its own after
        # it. Over TLS those bytes may be read from the socket already and wait in Asio's
        # BIO pair or OpenSSL's buffers (read ahead), where a peek at the socket cannot see
        # them: the connection is not reused all the same. (Before Stream::holds_unread_tls
        # the record sent apart answered the next request.)
        def overlong(req, conn):
            if req.target.startswith("/apart/"):
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nJUNK")
            else:
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcJUNK")

        up = self.https_upstream(self.a, behaviour=overlong)
        _, port = self.proxy(up, {"ca": self.pki.root, "server_name": "a.test"})
        with RawClient(port) as c:
            for i in range(3):
                for kind in ("together", "apart"):
                    resp = c.request("GET", f"/{kind}/{i}")
                    self.assertEqual((resp.status, resp.body), (200, b"abc"), f"/{kind}/{i}")
        self.assertEqual(len(up.requests), 6)
        self.assertEqual(up.connections, 6)

    def test_a_pooled_connection_closed_without_close_notify_is_retried_as_over_tcp(self):
        # The upstream reads a connection's second request and closes it, without TLS's
        # close_notify (a keep-alive timeout racing the request; many servers close so).
        # As over plain TCP, the GET is sent again on a new connection: the client gets 200,
        # not a 502 "stream truncated".
        def first_then_close(req, conn):
            if req.index_on_conn == 0:
                conn.send_response(200, [], b"first")
            else:
                conn.close()

        up = self.https_upstream(self.a, behaviour=first_then_close)
        _, port = self.proxy(up, {"ca": self.pki.root, "server_name": "a.test"})
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/one").status, 200)
            r = c.request("GET", "/two")
            self.assertEqual((r.status, r.body), (200, b"first"))
        self.assertEqual([q.target for q in up.requests], ["/one", "/two", "/two"])
        self.assertEqual(up.connections, 2)

    def test_an_upstream_that_speaks_plain_http_is_502(self):
        plain = self.start_upstream(respond(200, body=b"plain"))
        s, port = self.proxy(plain, {"ca": self.pki.root})
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/").status, 502)
        s.wait_log(r"TLS handshake failed")


if __name__ == "__main__":
    unittest.main()


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class QuickStartTest(SluiceTestCase):
    """What the README's quick start shows: HTTPS with the development certificate that
    scripts/dev_tls.sh makes, and the demo backend's WebSocket chat through sluice, over
    ws:// and wss:// at once."""

    def test_https_and_websocket_chat(self):
        certs = tempfile.mkdtemp(prefix="sluice-dev-tls-")
        self.addCleanup(shutil.rmtree, certs, True)
        made = subprocess.run(["bash", os.path.join(REPO, "scripts", "dev_tls.sh"), certs],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        self.assertEqual(made.returncode, 0, made.stderr)
        backend_port = free_port()
        backend = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts", "demo_backend.py"),
                                    "--listen", f"127.0.0.1:{backend_port}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(backend.wait, 10)
        self.addCleanup(backend.terminate)
        wait_until(lambda: _accepts(backend_port), 10, message="demo backend listening")

        plain, secure = free_port(), free_port()
        srv = {"listen": [f"{LOOPBACK}:{plain}", {"address": f"{LOOPBACK}:{secure}", "tls": {
            "cert": os.path.join(certs, "localhost.pem"), "key": os.path.join(certs, "localhost.key")}}]}
        self.start_sluice(proxy_config(plain, {"app": f"127.0.0.1:{backend_port}"}, server=srv), port=plain)

        ca = os.path.join(certs, "ca.pem")
        out = subprocess.run(["curl", "-sS", "--cacert", ca, f"https://localhost:{secure}/hello"],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('"X-Forwarded-Proto": "https"', out.stdout)
        out = subprocess.run(["curl", "-sS", "--cacert", ca, f"https://localhost:{secure}/chat"],
                             capture_output=True, text=True, timeout=20)
        self.assertIn("new WebSocket(", out.stdout)

        ctx = client_context(ca)

        async def chat():
            async with websockets.connect(f"wss://localhost:{secure}/chat", ssl=ctx) as alice, \
                    websockets.connect(f"ws://127.0.0.1:{plain}/chat") as bob:
                # Both see bob join (alice also saw herself join first).
                first = await alice.recv()
                assert "joined" in first, first
                await asyncio.wait_for(_until(alice, "joined (2 here)"), 5)
                await asyncio.wait_for(_until(bob, "joined (2 here)"), 5)
                await alice.send("hello from wss")
                got_alice = await asyncio.wait_for(_until(alice, "hello from wss"), 5)
                got_bob = await asyncio.wait_for(_until(bob, "hello from wss"), 5)
                pong = await alice.ping()
                await asyncio.wait_for(pong, 5)
                return got_alice, got_bob

        got_alice, got_bob = asyncio.run(asyncio.wait_for(chat(), 30))
        self.assertRegex(got_alice, r"^guest\d+: hello from wss$")
        self.assertEqual(got_alice, got_bob)


def _accepts(port):
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


async def _until(ws, text):
    while True:
        message = await ws.recv()
        if text in message:
            return message
