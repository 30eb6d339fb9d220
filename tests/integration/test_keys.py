"""Key parts beyond the client address (issue 27): client networks (`client_ip/24/64`: one
IPv6 host has a whole /64, so a per-address limit alone does not hold), query parameters,
cookies and path segments. Through real sluice processes on a real Redis (and the memory
store for the networks): clients of one network share a count, another network does not;
a value spelled two ways is one key; a request without the value is not limited by that
limit (and the access line says `skipped=`); a parameter or cookie given twice with
different values is a 400 that reaches nothing.
"""

import base64
import hashlib
import hmac
import json
import os
import subprocess
import tempfile
import time
import unittest

from admin_api import Metrics, wait_admin
from harness import (LOOPBACK, RawClient, SluiceTestCase, free_port, limited_route, proxy_config, redis_store,
                     respond, token_bucket)


class KeyPartsTest(SluiceTestCase):
    def start(self, store="redis"):
        self.up = self.start_upstream(respond(200, b"ok"))
        routes = [
            limited_route("net", [token_bucket("per_net", 2, "1h", 2, key=["client_ip/24/64"])]),
            limited_route("q", [token_bucket("per_key", 1, "1h", 1, key=["query:api_key"])]),
            limited_route("c", [token_bucket("per_session", 1, "1h", 1, key=["cookie:sid"])]),
            limited_route("t", [token_bucket("per_tenant", 1, "1h", 1, key=["path_segment:2"])]),
            limited_route("h", [token_bucket("per_api_key", 1, "1h", 2, key=["header:x-api-key"])]),
            limited_route("w", [dict(token_bucket("weighed", 1, "1h", 10), cost="header:x-cost")]),
        ]
        extra = {}
        if store == "redis":
            extra["store"] = redis_store(self.start_redis())
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}, routes,
                                                     client_ip={"trusted_proxies": ["127.0.0.1/32"]}, extra=extra))
        if store == "redis":
            self.sluice.wait_store_connected(2)

    def status(self, target, client="192.0.2.1", headers=()):
        with RawClient(self.port) as c:
            return c.request("GET", target, [("X-Forwarded-For", client)] + list(headers)).status

    def check_networks(self):
        # Two hosts of one IPv6 /64 share the bucket of 2; another /64 has its own.
        self.assertEqual(self.status("/net", "2001:db8:1:2::1"), 200)
        self.assertEqual(self.status("/net", "2001:db8:1:2:ffff:ffff:ffff:ffff"), 200)
        self.assertEqual(self.status("/net", "2001:db8:1:2::77"), 429)
        self.assertEqual(self.status("/net", "2001:db8:1:3::1"), 200)
        # IPv4 by /24, the mapped form counting as the address it maps.
        self.assertEqual(self.status("/net", "198.51.100.1"), 200)
        self.assertEqual(self.status("/net", "::ffff:198.51.100.200"), 200)
        self.assertEqual(self.status("/net", "198.51.100.9"), 429)
        self.assertEqual(self.status("/net", "198.51.101.9"), 200)

    def test_client_networks_on_redis(self):
        self.start()
        self.check_networks()

    def test_client_networks_on_the_memory_store(self):
        self.start(store="memory")
        self.check_networks()

    def test_query_parameter_cookie_and_path_segment(self):
        self.start()
        # Query: %61 is "a", so both spell one key; another value is another key.
        self.assertEqual(self.status("/q?api_key=a&x=1"), 200)
        self.assertEqual(self.status("/q?x=2&api_key=%61"), 429)
        self.assertEqual(self.status("/q?api_key=b"), 200)
        # Without the parameter the limit does not apply, and the line says so.
        for _ in range(3):
            self.assertEqual(self.status("/q?other=1"), 200)
        self.sluice.wait_access(target="/q?other=1", skipped="per_key")
        # Given twice with different values: refused, nothing forwarded.
        before = len(self.up.requests)
        self.assertEqual(self.status("/q?api_key=c&api_key=d"), 400)
        self.assertEqual(len(self.up.requests), before)
        # Cookie: found among others, with or without quotes; two Cookie fields are read as one.
        self.assertEqual(self.status("/c", headers=[("Cookie", "a=1; sid=s1")]), 200)
        self.assertEqual(self.status("/c", headers=[("Cookie", 'sid="s1"; b=2')]), 429)
        self.assertEqual(self.status("/c", headers=[("Cookie", "b=2"), ("Cookie", "sid=s2")]), 200)
        self.assertEqual(self.status("/c", headers=[("Cookie", "sid=s3"), ("Cookie", "sid=s4")]), 400)
        self.assertEqual(self.status("/c", headers=[("Cookie", "sidx=s1")]), 200)
        # Path segment 2 of the normalised path: /t//acme/./x is /t/acme/x.
        self.assertEqual(self.status("/t/acme/x"), 200)
        self.assertEqual(self.status("/t//acme/./y"), 429)
        self.assertEqual(self.status("/t/globex/x"), 200)
        self.assertEqual(self.status("/t"), 200)
        self.assertEqual(self.status("/t"), 200)

    def test_the_memory_store_stays_within_max_keys(self):
        # 6,000 distinct clients (a /64 each would do the same) through a bound of 4,096 keys:
        # the store holds at most 4,096, the rest are evicted (counted and logged); a client
        # that keeps being refused is never the one evicted.
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port, admin = free_port(), free_port()
        routes = [limited_route("api", [token_bucket("hourly", 1, "1h", 1)])]
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, routes, client_ip={"trusted_proxies": ["127.0.0.1/32"]},
            logging={"access_log": "off"},
            extra={"store": {"type": "memory", "memory": {"max_keys": 4096}},
                   "admin": {"listen": f"{LOOPBACK}:{admin}"}}))
        wait_admin(admin)
        with RawClient(self.port) as c:
            busy = [("X-Forwarded-For", "198.51.100.1")]
            self.assertEqual(c.request("GET", "/api", busy).status, 200)
            for i in range(6000):
                client = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
                self.assertEqual(c.request("GET", "/api", [("X-Forwarded-For", client)]).status, 200)
                if i % 100 == 0:
                    self.assertEqual(c.request("GET", "/api", busy).status, 429)
        m = Metrics.fetch(admin)
        keys, evicted = m.get("sluice_memory_store_keys"), m.get("sluice_memory_store_evictions_total")
        self.assertLessEqual(keys, 4096)
        self.assertEqual(evicted, 6001 - keys)
        self.sluice.wait_log(r"memory store full \(store.memory.max_keys 4096, or 1 MB of keys and state\): evicting "
                             r"the least recently used")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_token(claims, alg="HS256", secret=None, key_file=None, header=None):
    """A compact JWS: HS256 with hmac, RS256 with the openssl command line."""
    head = b64url(json.dumps(header or {"alg": alg, "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    signing_input = f"{head}.{body}".encode()
    if alg == "HS256":
        sig = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    else:
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key_file], input=signing_input,
                             capture_output=True, check=True).stdout
    return f"{head}.{body}.{b64url(sig)}"


    def test_a_header_given_twice_with_different_values_is_refused(self):
        # Counting the first would charge whoever it names (`X-Api-Key: victim`, then one's
        # own key, which the upstream may read), or a cost the upstream does not see.
        self.start(store="memory")
        before = len(self.up.requests)
        for target, fields in [("/h", [("X-Api-Key", "victim"), ("X-Api-Key", "attacker")]),
                               ("/w", [("X-Cost", "1"), ("X-Cost", "10")])]:
            with RawClient(self.port) as c:
                r = c.request("GET", target, [("X-Forwarded-For", "192.0.2.1")] + fields)
            self.assert_problem(r, 400)
            self.assertIn("is given more than once with different values", r.json()["detail"])
        self.assertEqual(len(self.up.requests), before)
        self.assertEqual(self.status("/h", headers=[("X-Api-Key", "victim")]), 200)
        self.assertEqual(self.status("/h", headers=[("X-Api-Key", "victim")]), 200)
        self.assertEqual(self.status("/h", headers=[("X-Api-Key", "victim")]), 429, "the victim's bucket was its own")
        # The same value twice is one value.
        self.assertEqual(self.status("/h", headers=[("X-Api-Key", "k2"), ("X-Api-Key", "k2")]), 200)
        self.assertEqual(self.status("/w", headers=[("X-Cost", "4"), ("X-Cost", "4")]), 200)


class JwtKeysTest(SluiceTestCase):
    """`jwt:sub` keyed limits: HS256 and RS256 tokens accepted and counted per subject,
    a tampered or expired token 401, a request without a token not counted by them."""

    SECRET = "a shared secret of at least 32 bytes!"

    def setUp(self):
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.rsa_key = os.path.join(self.dir, "rsa.pem")
        self.rsa_pub = os.path.join(self.dir, "rsa.pub.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                        "-out", self.rsa_key], check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", self.rsa_key, "-pubout", "-out", self.rsa_pub], check=True,
                       capture_output=True)
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        routes = [limited_route("api", [token_bucket("per_user", 2, "1h", 2, key=["jwt:sub"])])]
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, routes,
            extra={"store": redis_store(self.start_redis()),
                   "jwt": {"keys": [{"alg": "HS256", "secret": self.SECRET},
                                    {"alg": "RS256", "pem": self.rsa_pub}]}}))
        self.sluice.wait_store_connected(2)

    def get(self, token=None):
        headers = [("Authorization", f"Bearer {token}")] if token else []
        with RawClient(self.port) as c:
            return c.request("GET", "/api", headers)

    def test_verified_subjects_are_counted_and_bad_tokens_refused(self):
        exp = int(time.time()) + 600
        alice_hs = jwt_token({"sub": "alice", "exp": exp}, secret=self.SECRET)
        alice_rs = jwt_token({"sub": "alice", "exp": exp}, alg="RS256", key_file=self.rsa_key)
        bob = jwt_token({"sub": "bob"}, alg="RS256", key_file=self.rsa_key)
        # alice's two tokens (two algorithms) share her bucket of 2.
        self.assertEqual(self.get(alice_hs).status, 200)
        self.assertEqual(self.get(alice_rs).status, 200)
        self.assertEqual(self.get(alice_hs).status, 429)
        self.assertEqual(self.get(bob).status, 200)
        # Tampered: alice's signature on bob's claims.
        head, _, sig = alice_hs.split(".")
        forged = f"{head}.{b64url(json.dumps({'sub': 'mallory', 'exp': exp}).encode())}.{sig}"
        r = self.get(forged)
        self.assert_problem(r, 401)
        self.assertEqual(r.header("www-authenticate"), 'Bearer error="invalid_token"')
        self.assertIn("the signature does not verify", r.json()["detail"])
        # Expired (past the 30 s leeway), and signed with a secret that is not ours.
        self.assertIn("has expired", self.get(jwt_token({"sub": "carol", "exp": int(time.time()) - 120},
                                                        secret=self.SECRET)).json()["detail"])
        self.assertEqual(self.get(jwt_token({"sub": "carol"}, secret="x" * 40)).status, 401)
        # A tab after the scheme is read as a space (backends splitting on whitespace accept
        # the token, so it must count): alice's bucket is empty.
        with RawClient(self.port) as c:
            self.assertEqual(c.request("GET", "/api", [("Authorization", f"Bearer\t{alice_hs}")]).status, 429)
        # alg none is never accepted.
        none = f"{b64url(json.dumps({'alg': 'none'}).encode())}.{b64url(json.dumps({'sub': 'z'}).encode())}."
        self.assertEqual(self.get(none).status, 401)
        # Without a token the limit does not apply: counted by nothing, forwarded, logged skipped.
        for _ in range(3):
            self.assertEqual(self.get().status, 200)
        self.sluice.wait_access(skipped="per_user")
        # Nothing refused reached the upstream: alice 2, bob 1, three without a token.
        self.assertEqual(len(self.up.requests), 6)


if __name__ == "__main__":
    unittest.main()
