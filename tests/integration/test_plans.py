"""Plans and per-client overrides (issue 27): a route with `identity` decides each request by
its client's plan's limits, from a plan map file or a trusted hop's plan header, with a
default plan or 401. Two sluice instances on one real Redis: each client gets exactly its
plan's (or its own override's) limit across both; a map edit moves a client within a second,
without a reload signal and without resetting what it consumed; the plan header counts only
from a trusted peer; the access line and the summary name the plan; the admin look-up finds
the client's plan by its identity; the memory store decides alike, from a CSV map; a
verified token's subject can be the identity; HTTP/2 requests are decided alike; a token
bucket keeps the tokens a client used when the client's plan changes, in both stores.
"""

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from admin_api import admin_request, wait_admin
from harness import (READY_TIMEOUT, RawClient, SluiceTestCase, decide_calls, free_port, proxy_config, redis_store,
                     respond, wait_until)
from test_keys import jwt_token

SECRET = "a shared secret of at least 32 bytes!"


def catches_sighup(pid):
    """Whether process `pid` has a handler for SIGHUP (SigCgt in /proc: bit 0 is signal 1)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16) & 1 == 1
    return False

MAP = """key-pro: pro
key-vip: {plan: pro, overrides: {quota: {limit: 9}}}
key-free: free
key-int: internal
"""

# Sliding windows of an hour: a count kept exactly across a plan change (a window, unlike a
# bucket, stores what was consumed), and no window boundary a test could run across.
PLANS = {
    "free": [{"name": "quota", "algorithm": "sliding_window", "limit": 3, "window": "1h"}],
    "pro": [{"name": "quota", "algorithm": "sliding_window", "limit": 6, "window": "1h"}],
    "internal": [],
    # Buckets of one name: a token an hour (4 at most), and a token a minute (5 at most).
    "small": [{"name": "bucket", "algorithm": "token_bucket", "rate": 1, "per": "1h", "burst": 4}],
    "big": [{"name": "bucket", "algorithm": "token_bucket", "rate": 1, "per": "1m", "burst": 5}],
}



class PlansTest(SluiceTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-plans-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.map_path = os.path.join(self.dir, "plans.yaml")
        self.write_map(MAP)
        self.up = self.start_upstream(respond(200, b"ok"))

    def write_map(self, text):
        """Replaces the map as an editor does: a new file renamed over the old one."""
        scratch = self.map_path + ".new"
        with open(scratch, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(scratch, self.map_path)

    def config(self, port, store, admin=None, map_path=None):
        routes = [
            {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "app",
             "identity": "header:x-api-key", "plan_map": map_path or self.map_path, "default_plan": "free"},
            {"name": "hop", "match": {"path_prefix": "/hop"}, "upstream": "app",
             "identity": "header:x-api-key", "plan_header": "X-Plan"},
        ]
        extra = {"store": store, "plans": PLANS}
        if admin:
            extra["admin"] = {"listen": f"127.0.0.1:{admin}"}
        return proxy_config(port, {"app": self.up.address}, routes,
                            client_ip={"trusted_proxies": ["127.0.0.2/32"]}, logging={"summary_interval": "1s"},
                            extra=extra)

    def start_two(self):
        """Two instances on one Redis; the first with an admin port."""
        self.redis = self.start_redis()
        self.admin = free_port()
        self.ports = [free_port(), free_port()]
        self.instances = [self.start_sluice(self.config(self.ports[0], redis_store(self.redis), self.admin)),
                          self.start_sluice(self.config(self.ports[1], redis_store(self.redis)))]
        for s in self.instances:
            s.wait_store_connected(2)
        wait_admin(self.admin)

    def memory_config(self, map_path=None):
        """The config of one instance on the memory store; every request goes to its port."""
        port = free_port()
        self.ports = [port, port]
        return self.config(port, {"type": "memory"}, map_path=map_path)

    def test_a_reload_asked_for_while_a_large_configuration_loads_is_done_once_started(self):
        # SIGHUP's default action ends the process: one sent while a 200,000-entry plan map
        # loads (a reload right after a restart) must not, and the reload is done once the
        # server runs (the file may have changed meanwhile).
        self.write_map("".join(f"key-{i}: big\n" for i in range(200_000)))
        port = free_port()
        s = self.start_sluice(self.config(port, {"type": "memory"}), wait=False, port=port)
        # Once sluice catches SIGHUP (the first thing it does), into the load (1.6 s here); a
        # machine done sooner reloads the usual way.
        wait_until(lambda: catches_sighup(s.proc.pid), 5, message="sluice catching SIGHUP")
        s.send_signal(signal.SIGHUP)
        s.send_signal(signal.SIGUSR1)
        s.wait_ready()
        # The reload reads the same 200,000-entry map again: the start's deadline.
        s.wait_log("reloaded", timeout=READY_TIMEOUT)
        with RawClient(port) as c:
            self.assertEqual(c.request("GET", "/api/x", [("X-Api-Key", "key-7")]).status, 200)
        self.assertTrue(s.running())

    def request(self, n, target, key=None, headers=(), source=None):
        """One request on a connection of its own, to instance n % 2."""
        fields = ([("X-Api-Key", key)] if key else []) + list(headers)
        with RawClient(self.ports[n % 2], source=source) as c:
            return c.request("GET", target, fields)

    def admin_json(self, target, method="GET"):
        status, _, body = admin_request(self.admin, target, method)
        return status, json.loads(body)

    def statuses(self, count, target, key, **kw):
        return [self.request(i, target, key, **kw).status for i in range(count)]

    def test_each_client_gets_its_plans_limit_across_two_instances(self):
        self.start_two()
        forwarded = 0
        for key, allowed in [("key-free", 3), ("key-pro", 6), ("key-vip", 9), ("someone-else", 3)]:
            self.assertEqual(self.statuses(allowed + 2, "/api/x", key), [200] * allowed + [429] * 2, key)
            forwarded += allowed
        # A plan without limits: never limited, and no store call is made for it.
        before = decide_calls(self.redis)
        self.assertEqual(self.statuses(12, "/api/x", "key-int"), [200] * 12)
        self.assertEqual(decide_calls(self.redis), before)
        forwarded += 12
        # Without its identity a request has no plan: 401, never forwarded.
        refused = self.request(0, "/api/x")
        self.assertEqual(refused.status, 401, refused.body)
        self.assertIn(b"does not name its client", refused.body)
        self.assertEqual(self.request(1, "/api/x", headers=[("X-Api-Key", "")]).status, 401)  # names nobody
        self.assertEqual(len(self.up.requests), forwarded)
        # The access line names the plan.
        self.instances[0].wait_access(route="api", plan="pro", status="200")
        self.instances[1].wait_access(route="api", plan="free", status="429")
        entry = self.instances[0].wait_access(route="api", status="401")
        self.assertNotIn("plan", entry)
        # The summary names the plans' limits that refused (each instance refused some).
        for s in self.instances:
            s.wait_log(r"summary route=api .* limited_by=\S*\bpro/quota:\d+", timeout=5)
            s.wait_log(r"summary route=api .* limited_by=\S*\bfree/quota:\d+", timeout=5)

    def test_a_map_edit_moves_a_client_without_a_reset(self):
        self.start_two()
        self.assertEqual(self.statuses(4, "/api/x", "key-free"), [200] * 3 + [429])
        # key-free moves to pro (6): it keeps the 3 it used, so 3 more, on either instance.
        self.write_map(MAP.replace("key-free: free", "key-free: pro"))
        for s in self.instances:
            s.wait_log(r"plan map \S+plans\.yaml changed: reloading", timeout=5)
            s.wait_log(r"reloaded .*: 2 routes", timeout=5)
        self.assertEqual(self.statuses(4, "/api/x", "key-free"), [200] * 3 + [429])
        self.instances[1].wait_access(route="api", plan="pro", status="429")
        # A map with an error is refused, named FILE:LINE:COL; the running map stays.
        self.write_map(MAP.replace("key-free: free", "key-free: pro") + "key-new: gold\n")
        for s in self.instances:
            s.wait_log(re.escape(self.map_path) + r":5:10: identity 'key-new' names plan 'gold', which is not defined",
                       timeout=5)
            s.wait_log(r"reload of \S+ refused; the running configuration stays", timeout=5)
        self.assertEqual(self.statuses(2, "/api/x", "key-free"), [429, 429])
        self.assertEqual(self.statuses(4, "/api/x", "key-new"), [200] * 3 + [429])  # the default plan

    def test_a_map_edit_applies_the_map_and_nothing_else(self):
        # The configuration file may hold an edit nobody signalled yet, or be half written
        # when the map changes: a map edit reads the map again, not the file.
        port = free_port()
        self.ports = [port, port]
        config = self.config(port, {"type": "memory"})
        s = self.start_sluice(config)
        self.assertEqual(self.statuses(4, "/api/x", "key-free"), [200] * 3 + [429])
        edited = copy.deepcopy(config)
        edited["routes"].insert(0, {"name": "more", "match": {"path_prefix": "/more"}, "upstream": "app"})
        s.write_config(edited)  # not signalled
        self.write_map(MAP.replace("key-free: free", "key-free: pro"))
        s.wait_log(r"reloaded the plan maps \(the configuration file as it was\): 2 routes", timeout=5)
        self.assertEqual(self.statuses(4, "/api/x", "key-free"), [200] * 3 + [429])  # now on pro
        self.assertEqual(self.request(0, "/more").status, 404)  # the unsignalled edit waits
        # A half-written file does not stop the map either.
        s.write_config("routes:\n  - {name: api, match: {path_prefix: /a")
        self.write_map(MAP.replace("key-free: free", "key-free: pro") + "key-new: pro\n")
        wait_until(lambda: len(re.findall(r"reloaded the plan maps", s.stderr_text())) == 2, 5,
                   message="the second map edit read")
        self.assertEqual(self.statuses(7, "/api/x", "key-new"), [200] * 6 + [429])  # pro, not the default free
        self.assertNotIn("refused", s.stderr_text())
        # A map caught empty (truncated while it is being written) is refused: its clients
        # would all fall to the default plan. `{}` is a map with no clients.
        with open(self.map_path, "w", encoding="utf-8"):
            pass
        s.wait_log(re.escape(self.map_path) + r":1:1: the plan map is empty", timeout=5)
        s.wait_log(r"reload of \S+ refused; the running configuration stays", timeout=5)
        self.assertEqual(self.statuses(4, "/api/x", "key-pro"), [200] * 4)  # still pro (6), not free (3)
        self.write_map("{}\n")
        wait_until(lambda: len(re.findall(r"reloaded the plan maps", s.stderr_text())) == 3, 5,
                   message="the map with no clients read")
        self.assertEqual(self.statuses(1, "/api/x", "key-pro"), [429])  # free now, 4 used of 3

    def test_the_plan_header_counts_only_from_a_trusted_hop(self):
        self.start_two()
        hop = [("X-Plan", "pro")]
        self.assertEqual(self.statuses(7, "/hop/x", "key-h1", headers=hop, source="127.0.0.2"), [200] * 6 + [429])
        # From an untrusted peer the header is ignored: no map, no default plan: 401.
        self.assertEqual(self.statuses(2, "/hop/x", "key-h2", headers=hop), [401, 401])
        # A plan the configuration does not have is no plan; logged.
        self.assertEqual(self.request(0, "/hop/x", "key-h3", [("X-Plan", "gold")], source="127.0.0.2").status, 401)
        self.instances[0].wait_log(r"header x-plan names plan 'gold', which is not defined")
        # Two different plans in two fields: which one counts would be a guess.
        response = self.request(0, "/hop/x", "key-h4", [("X-Plan", "pro"), ("X-Plan", "free")], source="127.0.0.2")
        self.assertEqual(response.status, 400, response.body)
        self.assertEqual(len(self.up.requests), 6)
        # A client the hop moves from free to pro: a refusal an instance remembered under free
        # (the same key) does not refuse it under pro, whose limit has room.
        free, pro = [("X-Plan", "free")], [("X-Plan", "pro")]
        self.assertEqual(self.statuses(4, "/hop/x", "key-h5", headers=free, source="127.0.0.2"), [200] * 3 + [429])
        self.assertEqual(self.statuses(4, "/hop/x", "key-h5", headers=pro, source="127.0.0.2"), [200] * 3 + [429])
        self.assertEqual(len(self.up.requests), 12)

    def bucket_moves(self):
        """A client the hop moves between plans whose bucket has one name: it keeps the tokens it used."""
        small, big = [("X-Plan", "small")], [("X-Plan", "big")]
        # 3 of small's 4 used: moved to big, 2 of its 5 are left (read as the time until
        # small's bucket is full again, 3 hours, big's would be empty).
        self.assertEqual(self.statuses(3, "/hop/x", "key-b", headers=small, source="127.0.0.2"), [200] * 3)
        moved = [self.request(i, "/hop/x", "key-b", big, source="127.0.0.2") for i in range(3)]
        self.assertEqual([r.status for r in moved], [200, 200, 429])
        self.assertEqual(moved[1].header("ratelimit"), '"bucket";r=0;t=300')
        # Back to small with 5 used of 4: an empty bucket (never more than empty), a token in
        # an hour, not in five.
        back = self.request(0, "/hop/x", "key-b", small, source="127.0.0.2")
        self.assertEqual(back.status, 429)
        self.assertEqual(back.header("retry-after"), "3600")

    def test_a_bucket_keeps_what_a_client_used_when_its_plan_changes(self):
        self.start_two()
        self.bucket_moves()
        self.assertEqual(len(self.up.requests), 5)
        # The memory store alike.
        self.start_sluice(self.memory_config())
        self.bucket_moves()
        self.assertEqual(len(self.up.requests), 10)

    def test_the_admin_look_up_finds_the_plan_by_identity(self):
        self.start_two()
        self.assertEqual(self.statuses(2, "/api/x", "key-vip"), [200, 200])
        status, body = self.admin_json("/limits?route=api&header.x-api-key=key-vip")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["plan"], "pro")
        quota = body["limits"][0]
        self.assertEqual((quota["name"], quota["capacity"], quota["remaining"]), ("quota", 9, 7))
        status, body = self.admin_json("/limits?route=api&header.x-api-key=key-vip", method="DELETE")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["reset"], ["quota"])
        self.assertEqual(self.statuses(10, "/api/x", "key-vip"), [200] * 9 + [429])
        status, body = self.admin_json("/limits?route=api")
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"], "route 'api' limits by plan: give the client's identity (header:x-api-key)")

    def test_the_memory_store_decides_alike_with_a_csv_map(self):
        csv_path = os.path.join(self.dir, "plans.csv")
        with open(csv_path, "w", encoding="utf-8") as f:
            f.write("identity,plan,quota.limit\nkey-pro,pro,\nkey-vip,pro,9\nkey-free,free,\n")
        self.start_sluice(self.memory_config(map_path=csv_path))
        for key, allowed in [("key-free", 3), ("key-vip", 9), ("nobody", 3)]:
            self.assertEqual(self.statuses(allowed + 1, "/api/x", key), [200] * allowed + [429], key)
        self.assertEqual(self.request(0, "/api/x").status, 401)

    def test_an_identity_given_twice_with_different_values_is_refused(self):
        # Otherwise the first would pick the plan (a paying client's key, then one's own) and
        # be charged, while the upstream may read the second.
        self.start_sluice(self.memory_config())
        before = len(self.up.requests)
        r = self.request(0, "/api/x", headers=[("X-Api-Key", "key-pro"), ("X-Api-Key", "nobody")])
        self.assert_problem(r, 400)
        self.assertIn("header x-api-key is given more than once with different values", r.json()["detail"])
        self.assertEqual(len(self.up.requests), before)
        self.assertEqual(self.statuses(4, "/api/x", "key-free"), [200] * 3 + [429])
        # The same value twice names one client.
        self.assertEqual(self.request(0, "/api/x", headers=[("X-Api-Key", "nobody"), ("X-Api-Key", "nobody")]).status,
                         200)

    def test_a_verified_token_names_the_client(self):
        jwt_map = os.path.join(self.dir, "subjects.yaml")
        with open(jwt_map, "w", encoding="utf-8") as f:
            f.write("alice: pro\n")
        config = self.memory_config()
        config["jwt"] = {"keys": [{"alg": "HS256", "secret": SECRET}]}
        config["routes"].append({"name": "jwt", "match": {"path_prefix": "/jwt"}, "upstream": "app",
                                 "identity": "jwt:sub", "plan_map": jwt_map, "default_plan": "free"})
        self.start_sluice(config)
        exp = int(time.time()) + 600

        def bearer(sub):
            return [("Authorization", "Bearer " + jwt_token({"sub": sub, "exp": exp}, secret=SECRET))]

        self.assertEqual(self.statuses(7, "/jwt/x", None, headers=bearer("alice")), [200] * 6 + [429])
        self.assertEqual(self.statuses(4, "/jwt/x", None, headers=bearer("bob")), [200] * 3 + [429])
        # No token: no identity, 401; a token that does not verify: 401 invalid_token.
        self.assertEqual(self.request(0, "/jwt/x").status, 401)
        forged = [("Authorization", "Bearer " + jwt_token({"sub": "alice", "exp": exp}, secret="x" * 40))]
        refused = self.request(0, "/jwt/x", headers=forged)
        self.assertEqual(refused.status, 401)
        self.assertEqual(refused.header("www-authenticate"), 'Bearer error="invalid_token"')
        self.assertEqual(len(self.up.requests), 9)

    def test_http2_requests_are_decided_by_plan_alike(self):
        config = self.memory_config()
        port = self.ports[0]
        config["server"]["listen"] = [{"address": f"127.0.0.1:{port}", "http2": "prior_knowledge"}]
        self.start_sluice(config, port=port)

        def curl(key=None):
            args = ["-H", f"X-Api-Key: {key}"] if key else []
            out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}",
                                  *args, f"http://127.0.0.1:{port}/api/x"], capture_output=True, text=True, timeout=20)
            self.assertEqual(out.returncode, 0, out.stderr)
            return int(out.stdout)

        self.assertEqual([curl("key-vip") for _ in range(10)], [200] * 9 + [429])
        self.assertEqual(curl(), 401)
        # HTTP/1.1 on the same port counts against the same plan's limit.
        self.assertEqual(self.request(0, "/api/x", "key-vip").status, 429)


if __name__ == "__main__":
    unittest.main()
