"""Routes with `action: check` (issue 15): sluice as the rate-limit decision service of
another proxy. Directly (nginx's and Traefik's header names), and behind a real nginx
with auth_request, the limit holding for the clients nginx serves.
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import (RawClient, SluiceTestCase, free_port, proxy_config, ratelimit_headers, respond,
                     retry_after, wait_until)


def check_route(name, limits, *, path="/check", limited_status=None):
    route = {"name": name, "match": {"path": path}, "action": "check", "limits": limits}
    if limited_status is not None:
        route["limited_status"] = limited_status
    return route


PER_PAGE = {"name": "per_page", "algorithm": "token_bucket", "rate": 1, "per": "1h", "burst": 3,
            "key": ["client_ip", "method", "path"]}


def find_nginx():
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class CheckDirectTest(SluiceTestCase):
    def start(self, trusted=("127.0.0.1/32",), limited_status=None):
        self.up = self.start_upstream(respond(200, b"never"))
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, [check_route("check", [PER_PAGE], limited_status=limited_status)],
            client_ip={"trusted_proxies": list(trusted)}))

    def ask(self, headers):
        c = RawClient(self.port)
        try:
            return c.request("GET", "/check", headers)
        finally:
            c.close()

    def test_answers_for_the_original_request(self):
        self.start()
        nginx_style = [("X-Forwarded-For", "203.0.113.7"), ("X-Original-Method", "POST"),
                       ("X-Original-URI", "/login?next=%2Fhome")]
        responses = [self.ask(nginx_style) for _ in range(4)]
        self.assertEqual([r.status for r in responses], [200, 200, 200, 429])
        for i, r in enumerate(responses[:3]):
            self.assertEqual(r.body, b"")
            self.assertIsNone(r.header("content-type"))
            self.assertEqual(ratelimit_headers(r)["state"][:2], ("per_page", 2 - i))
        self.assertGreaterEqual(retry_after(responses[3]), 3000)  # one token an hour
        self.assert_problem(responses[3], 429)
        # Traefik's names for the same request count against the same key.
        traefik_style = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Method", "POST"),
                         ("X-Forwarded-Uri", "/login")]
        self.assertEqual(self.ask(traefik_style).status, 429)
        # Another page, another method or another client: another key.
        self.assertEqual(self.ask([("X-Forwarded-For", "203.0.113.7"), ("X-Original-Method", "POST"),
                                   ("X-Original-URI", "/other")]).status, 200)
        self.assertEqual(self.ask([("X-Forwarded-For", "203.0.113.7"), ("X-Original-Method", "GET"),
                                   ("X-Original-URI", "/login")]).status, 200)
        self.assertEqual(self.ask([("X-Forwarded-For", "198.51.100.2"), ("X-Original-Method", "POST"),
                                   ("X-Original-URI", "/login")]).status, 200)
        # Nothing was forwarded anywhere.
        self.assertEqual(self.up.requests, [])
        entry = self.sluice.wait_access(status="429")
        self.assertEqual((entry["route"], entry["decision"], entry["limit"]), ("check", "limited", "per_page"))
        # The line names the request that was decided (method, URI, client), not the check.
        self.assertEqual((entry["method"], entry["target"], entry["client"], entry["peer"]),
                         ("POST", "/login?next=%2Fhome", "203.0.113.7", "127.0.0.1"), entry["line"])

    def test_ambiguous_or_invalid_originals_are_refused(self):
        self.start()
        for headers in ([("X-Original-URI", "/a"), ("X-Forwarded-Uri", "/b")],
                        [("X-Original-URI", "not a target")],
                        [("X-Original-URI", "http://evil.example/x")],
                        [("X-Original-Method", "GE T")]):
            r = self.ask(headers)
            self.assertEqual(r.status, 400, headers)
            self.assert_problem(r, 400)

    def test_an_untrusted_peer_cannot_name_another_request(self):
        self.start(trusted=("10.0.0.0/8",))
        statuses = [self.ask([("X-Original-URI", f"/page{i}"), ("X-Forwarded-For", f"192.0.2.{i}")]).status
                    for i in range(4)]
        # The headers are ignored: every ask is GET /check from 127.0.0.1, one key.
        self.assertEqual(statuses, [200, 200, 200, 429])

    def test_limited_status_per_route(self):
        self.start(limited_status=403)
        statuses = [self.ask([("X-Original-URI", "/x")]).status for _ in range(4)]
        self.assertEqual(statuses, [200, 200, 200, 403])


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{nginx_port};
        location / {{
            auth_request /_ratelimit;
            auth_request_set $ratelimit_retry $upstream_http_retry_after;
            auth_request_set $ratelimit_state $upstream_http_ratelimit;
            add_header RateLimit $ratelimit_state always;
            error_page 403 = @ratelimited;
            proxy_pass http://{upstream};
        }}
        location = /_ratelimit {{
            internal;
            proxy_pass http://127.0.0.1:{sluice_port}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Forwarded-For $remote_addr;
        }}
        location @ratelimited {{
            add_header Retry-After $ratelimit_retry always;
            return 429;
        }}
    }}
}}
"""


class NginxAuthRequestTest(SluiceTestCase):
    def test_nginx_auth_request_in_front(self):
        nginx = find_nginx()
        self.assertIsNotNone(nginx, "nginx is not installed (scripts/deps.sh installs nginx-light)")
        self.up = self.start_upstream(respond(200, b"from the app"))
        sluice_port, nginx_port = free_port(), free_port()
        self.sluice = self.start_sluice(proxy_config(
            sluice_port, {"app": self.up.address},
            [check_route("check", [PER_PAGE], limited_status=403)],
            client_ip={"trusted_proxies": ["127.0.0.1/32"]}))
        tmp = tempfile.mkdtemp(prefix="sluice-nginx-")
        self.addCleanup(shutil.rmtree, tmp, True)
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(tmp=tmp, nginx_port=nginx_port, sluice_port=sluice_port,
                                      upstream=self.up.address))
        proc = subprocess.Popen([nginx, "-p", tmp, "-c", conf], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)

        def stop():
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            proc.stderr.close()
        self.addCleanup(stop)

        def up():
            if proc.poll() is not None:
                raise AssertionError(f"nginx exited: {proc.stderr.read().decode()}")
            try:
                RawClient(nginx_port).close()
                return True
            except OSError:
                return False
        wait_until(up, 10, message="nginx listening")

        def get(target):
            c = RawClient(nginx_port)
            try:
                return c.request("GET", target)
            finally:
                c.close()
        responses = [get("/account?tab=1") for _ in range(5)]
        self.assertEqual([r.status for r in responses], [200, 200, 200, 429, 429],
                         [r.body[:200] for r in responses])
        self.assertEqual([r.body for r in responses[:3]], [b"from the app"] * 3)
        self.assertEqual(ratelimit_headers(responses[2])["state"][:2], ("per_page", 0))
        self.assertGreaterEqual(retry_after(responses[3]), 3000)
        # Only the admitted requests reached the app; sluice saw nginx's original URI.
        self.assertEqual(len(self.up.requests), 3)
        self.assertEqual(get("/other").status, 200)
        self.assertEqual(len(self.up.requests), 4)
        entry = self.sluice.wait_access(status="403")
        self.assertEqual(entry["route"], "check")
        # nginx's subrequest is logged as the request it decided: method, URI with its query.
        decided = self.sluice.wait_access(status="200", route="check")
        self.assertEqual((decided["method"], decided["target"]), ("GET", "/account?tab=1"), decided["line"])


if __name__ == "__main__":
    unittest.main()
