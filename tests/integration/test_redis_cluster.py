"""store.redis.mode cluster: a real Redis Cluster of 3 masters and 3 replicas
(`redis-server --cluster-enabled yes`, `redis-cli --cluster create`), sluice with 2 workers.

- Exact counts with many keys spread over every master, from two sluice instances.
- A slot migrated by hand (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while
  its key is being hammered: the bucket holds exactly the decisions Redis made, before,
  during (ASK) and after (MOVED) the move.
- A master killed: its replica takes over, keys on the other masters never stop being
  decided, keys of the dead master's slots follow on_error until then; lost counts printed.
- The accuracy test (test_accuracy: 2 instances, 50 connections, one key) against the cluster.
- A concurrency limit per user: slots on every master taken, refused when full, given back.
"""

import collections
import re
import threading
import time
import unittest

import test_accuracy
from admin_api import admin_request, wait_admin
from harness import (RawClient, SluiceTestCase, build_request, free_port, limited_route, proxy_config,
                     respond, token_bucket, wait_until)
from redis_setups import RedisClusterSetup
from test_concurrency import Gauge, concurrency

WORKERS = 2
BURST = 50000  # 1 token an hour: nothing measurable refills during a test


def cluster_store(cluster, timeout="2s", on_error="allow"):
    return {"type": "redis", "on_error": on_error,
            "redis": {"mode": "cluster", "nodes": list(cluster.seeds), "timeout": timeout}}


def decide_calls(server):
    stats = server.command("INFO", "commandstats")
    return sum(int(c) for c in re.findall(r"cmdstat_(?:fcall|evalsha):calls=(\d+)", stats))


def asking_calls(server):
    m = re.search(r"cmdstat_asking:calls=(\d+)", server.command("INFO", "commandstats"))
    return int(m.group(1)) if m else 0


class Load:
    """Keep-alive clients, one per entry of `users`, each sending GET PREFIX/USER/K/I with
    `X-User: USER` until the block ends. Counts (user, status) and (user, decided), decided
    meaning a RateLimit header came (Redis decided, not the on_error policy)."""

    def __init__(self, test, port, prefix, users):
        self.test, self.port, self.prefix, self.users = test, port, prefix, users
        self.statuses = collections.Counter()
        self.decided = collections.Counter()
        self.errors = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(k, u)) for k, u in enumerate(users)]

    def run(self, k, user):
        try:
            c = self.test.client(self.port, timeout=10)
            i = 0
            while not self.stop.is_set():
                r = c.request("GET", f"{self.prefix}/{user}/{k}/{i}", [("X-User", user)])
                i += 1
                with self.lock:
                    self.statuses[(user, r.status)] += 1
                    self.decided[(user, r.header("ratelimit") is not None)] += 1
        except Exception as e:  # reported when the block ends
            self.errors.append(f"client {k}: {e!r}")

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(20)
        self.test.assertEqual(self.errors, [])
        return False


class ClusterTestCase(SluiceTestCase):
    def start_cluster(self, extra_args=()):
        self.cluster = RedisClusterSetup(masters=3, replicas_per_master=1, extra_args=extra_args)
        self.addCleanup(self._finish_cluster)
        self.cluster.start()
        return self.cluster

    def _finish_cluster(self):
        if self._failed():
            import sys
            sys.stderr.write(self.cluster.log_text()[-6000:])
        self.cluster.cleanup()

    def start_proxy(self, routes, *, on_error="allow", admin=False):
        port = free_port()
        extra = {"store": cluster_store(self.cluster, on_error=on_error)}
        if admin:
            self.admin = free_port()
            extra["admin"] = {"listen": f"127.0.0.1:{self.admin}"}
        s = self.start_sluice(proxy_config(port, {"app": self.up.address}, routes,
                                           server={"workers": WORKERS}, extra=extra))
        s.wait_store_connected(WORKERS * len(self.cluster.seeds))
        if admin:
            wait_admin(self.admin)
        return s

    def decisions(self, instances, prefix=""):
        return collections.Counter(e["decision"] for s in instances for e in s.access_entries()
                                   if e["target"].startswith(prefix))


class ClusterExactTest(ClusterTestCase):
    def setUp(self):
        self.start_cluster()
        self.up = self.start_upstream(respond(200, b"ok"))

    def test_many_keys_over_every_master_are_counted_exactly_from_two_instances(self):
        routes = [limited_route("u", [token_bucket("b", 1, "1h", 5, key=["header:X-User"])])]
        instances = [self.start_proxy(routes, admin=(i == 0)) for i in range(2)]
        users = [f"user{n}" for n in range(60)]
        # Every master owns some of the users' slots.
        owners = {self.cluster.node_for_slot(self.cluster.key_slot(f"u:{u}")).port for u in users}
        self.assertEqual(len(owners), 3, "the users' keys should spread over all 3 masters")

        results = collections.defaultdict(collections.Counter)
        errors = []
        lock = threading.Lock()

        def run(k):
            try:
                c = self.client(instances[k % 2].port, timeout=10)
                for i in range(8):
                    for u in users[k % 6::6]:
                        r = c.request("GET", f"/u/{k}/{i}", [("X-User", u)])
                        with lock:
                            results[u][r.status] += 1
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        # Each user sent 16 requests (two clients of 8) and got exactly its burst of 5.
        for u in users:
            self.assertEqual(results[u], {200: 5, 429: 11}, f"{u}: {results[u]}")
        total = sum(sum(c.values()) for c in results.values())
        decisions = wait_until(lambda: (lambda d: d if sum(d.values()) >= total else None)(
            self.decisions(instances, "/u/")), 10.0, message=f"{total} access lines")
        self.assertEqual(decisions, {"allowed": 5 * len(users), "limited": 11 * len(users)})
        for master in self.cluster.masters():
            self.assertGreater(decide_calls(master), 0, f"master {master.port} decided nothing")
        status, _, body = admin_request(self.admin, "/metrics")
        metrics = body.decode()
        self.assertIn('sluice_store_nodes{state="down"} 0', metrics)
        self.assertEqual(len(re.findall(r'sluice_store_node_up\{address="[^"]+",role="master"\} 1', metrics)), 3,
                         metrics)
        status, _, body = admin_request(self.admin, "/readyz")
        self.assertEqual(status, 200, body)
        print(f"\n    cluster exact: users={len(users)} requests={total} over 3 masters: exact")

    def test_a_slot_migrated_under_load_keeps_the_count_exact(self):
        routes = [limited_route("m", [token_bucket("b", 1, "1h", BURST, key=["header:X-User"])])]
        s = self.start_proxy(routes)
        user = "mover"
        slot = self.cluster.key_slot(f"m:{user}")
        source = self.cluster.node_for_slot(slot)
        target = next(m for m in self.cluster.masters() if m.port != source.port)
        with Load(self, s.port, "/m", [user] * 4) as load:
            time.sleep(0.7)
            handle = self.cluster.begin_migration(slot, target)
            time.sleep(0.7)   # IMPORTING/MIGRATING, the key still on the source
            self.cluster.move_keys(handle)
            time.sleep(0.7)   # the key on the target: ASK
            self.cluster.finish_migration(handle)
            time.sleep(0.7)   # MOVED, then the new map
        statuses = collections.Counter({st: n for (_, st), n in load.statuses.items()})
        self.assertEqual(set(statuses), {200}, statuses)
        self.assertEqual(self.cluster.node_for_slot(slot).port, target.port)
        c = self.client(s.port)
        r = c.request("GET", "/m/final", [("X-User", user)])
        remaining = int(re.search(r";r=(\d+)", r.header("ratelimit")).group(1))
        total = sum(statuses.values()) + 1
        decisions = wait_until(lambda: (lambda d: d if sum(d.values()) >= total else None)(
            self.decisions([s], "/m/")), 10.0, message=f"{total} access lines")
        allowed = decisions["allowed"]
        print(f"\n    cluster slot {slot} migrated {source.port} -> {target.port} under load: "
              f"requests={total} decided_by_redis={allowed} "
              f"store_errors={decisions['store_error_allowed']} remaining={remaining} "
              f"asking_calls_on_target={asking_calls(target)}")
        self.assertEqual(remaining, BURST - allowed, "the bucket must hold exactly the decisions Redis made")
        # The half-migrated state was really met: requests went to the target after ASKING.
        self.assertGreater(asking_calls(target), 0, "no request followed an ASK redirection")
        self.assertEqual(set(decisions) - {"allowed", "store_error_allowed"}, set(), decisions)
        self.assertGreater(allowed, total * 0.9, f"too many store errors: {decisions}")
        moved = rf"redis cluster: slot {slot} moved from 127\.0\.0\.1:{source.port} to 127\.0\.0\.1:{target.port}"
        self.assertTrue(re.search(moved, s.log_text()), f"no log line like {moved!r}")


class ClusterConcurrencyTest(ClusterTestCase):
    """A concurrency limit per user on the cluster: slots taken on every master, refused when
    full, every one given back when its response is sent (each master's sets empty after)."""

    def setUp(self):
        self.start_cluster()
        self.gauge = Gauge(1.0)
        self.up = self.start_upstream(self.gauge)

    def test_slots_on_every_master_are_taken_and_given_back(self):
        routes = [limited_route("c", [concurrency("two", 2, key=["header:X-User"])])]
        proxy = self.start_proxy(routes)
        users = [f"user{n}" for n in range(30)]
        owners = {self.cluster.node_for_slot(self.cluster.key_slot(f"c:{u}")).port for u in users}
        self.assertEqual(len(owners), 3, "the users' keys should spread over all 3 masters")
        held = [RawClient(proxy.port, timeout=15) for _ in range(2 * len(users))]
        for k, c in enumerate(held):
            c.send(build_request("GET", f"/c/{k}", [("X-User", users[k // 2])]))
        wait_until(lambda: self.gauge.now == 2 * len(users), 10, message="every user's two requests upstream")
        slots = sum(m.command("DBSIZE") for m in self.cluster.masters())
        self.assertEqual(slots, len(users), "one set of slots per user")
        for u in users:
            c = RawClient(proxy.port)
            self.assertEqual(c.request("GET", "/c/third", [("X-User", u)]).status, 429, u)
            c.close()
        for c in held:
            self.assertEqual(c.read_response().status, 200)
            c.close()
        # Every slot given back: the sets are gone from every master.
        wait_until(lambda: sum(m.command("DBSIZE") for m in self.cluster.masters()) == 0, 5,
                   message="every slot given back")
        for u in users[:6]:
            c = RawClient(proxy.port, timeout=15)
            self.assertEqual(c.request("GET", "/c/again", [("X-User", u)]).status, 200, u)
            c.close()
        self.assertEqual(self.gauge.most, 2 * len(users))
        # The releases went as calls of a master's keys (of several slots): none refused.
        calls = 0
        for master in self.cluster.masters():
            stats = master.command("INFO", "commandstats")
            m = re.search(r"cmdstat_evalsha:calls=(\d+)", stats)
            calls += int(m.group(1)) if m else 0
            self.assertIsNone(re.search(r"cmdstat_evalsha:[^\r\n]*failed_calls=[1-9]", stats), stats)
            self.assertIsNone(re.search(r"cmdstat_evalsha:[^\r\n]*rejected_calls=[1-9]", stats), stats)
        print(f"\n    cluster concurrency: {2 * len(users) + 6} requests' slots given back in {calls} release calls")


class ClusterTryAgainTest(ClusterTestCase):
    def setUp(self):
        self.start_cluster()
        self.up = self.start_upstream(respond(200, b"ok"))

    def test_a_request_whose_keys_are_split_by_a_migration_waits_for_them_to_meet(self):
        # Two limits, so two keys in one slot. With one of them migrated and the other not,
        # the source answers TRYAGAIN (nothing ran); sluice asks again every 10 ms within
        # the deadline, and once the second key has moved the request goes to the target
        # (ASK). Counted exactly throughout.
        routes = [limited_route("t", [token_bucket("a", 1, "1h", BURST, key=["header:X-User"]),
                                      token_bucket("b", 1, "1h", BURST, key=["header:X-User"])])]
        s = self.start_proxy(routes)
        user = "split"
        slot = self.cluster.key_slot(f"t:{user}")
        source = self.cluster.node_for_slot(slot)
        target = next(m for m in self.cluster.masters() if m.port != source.port)
        c = self.client(s.port)
        for i in range(10):
            self.assertEqual(c.request("GET", f"/t/warm/{i}", [("X-User", user)]).status, 200)
        keys = sorted(source.command("CLUSTER", "GETKEYSINSLOT", slot, 10))
        self.assertEqual(len(keys), 2, keys)
        handle = self.cluster.begin_migration(slot, target)
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", keys[0])
        before = tryagain_errors(source)
        with Load(self, s.port, "/t", [user] * 2) as load:
            time.sleep(0.3)  # requests meet TRYAGAIN; each waits up to the 2 s deadline
            source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", keys[1])
            time.sleep(0.5)  # both keys on the target: ASK
            self.cluster.finish_migration(handle)
            time.sleep(0.3)
        tried_again = tryagain_errors(source) - before
        self.assertGreater(tried_again, 0, "no request met TRYAGAIN")
        r = c.request("GET", "/t/final", [("X-User", user)])
        state = ratelimit_states(r)
        total = sum(load.statuses.values()) + 11
        decisions = wait_until(lambda: (lambda d: d if sum(d.values()) >= total else None)(
            self.decisions([s], "/t/")), 10.0, message=f"{total} access lines")
        allowed = decisions["allowed"]
        print(f"\n    cluster TRYAGAIN: requests={total} decided_by_redis={allowed} "
              f"store_errors={decisions['store_error_allowed']} tryagain_replies={tried_again} remaining={state}")
        self.assertEqual(set(decisions) - {"allowed", "store_error_allowed"}, set(), decisions)
        # The limit the header reports counts every decision Redis made, and nothing else;
        # the other one, with the same parameters, holds the same state on the target.
        self.assertEqual(state[0], BURST - allowed)
        self.assertEqual(target.command("GET", keys[0]), target.command("GET", keys[1]))


def tryagain_errors(server):
    m = re.search(r"errorstat_TRYAGAIN:count=(\d+)", server.command("INFO", "errorstats"))
    return int(m.group(1)) if m else 0


def ratelimit_states(resp):
    """The remaining count of every limit in the response's RateLimit header(s)."""
    return [int(x) for x in re.findall(r";r=(\d+)", ",".join(resp.header_values("ratelimit")))]


class ClusterFailoverTest(ClusterTestCase):
    """With cluster-require-full-coverage no, as an operator who wants the other masters to
    keep serving while one fails over sets it (the default, yes, makes every node answer
    CLUSTERDOWN until the replica takes over: then every decision follows on_error)."""

    def setUp(self):
        self.start_cluster(["--cluster-require-full-coverage", "no"])
        self.up = self.start_upstream(respond(200, b"ok"))

    def test_a_killed_master_is_replaced_by_its_replica(self):
        routes = [limited_route("f", [token_bucket("b", 1, "1h", BURST, key=["header:X-User"])])]
        s = self.start_proxy(routes, admin=True)
        masters = self.cluster.masters()
        victim = masters[0]
        # One user on the victim's slots, one elsewhere.
        users = [f"f{n}" for n in range(200)]
        on_victim = next(u for u in users
                         if self.cluster.node_for_slot(self.cluster.key_slot(f"f:{u}")).port == victim.port)
        elsewhere = next(u for u in users
                         if self.cluster.node_for_slot(self.cluster.key_slot(f"f:{u}")).port != victim.port)
        c = self.client(s.port)
        for u in (on_victim, elsewhere):
            for _ in range(20):
                self.assertEqual(c.request("GET", "/f/warm", [("X-User", u)]).status, 200)

        load_users = [on_victim, elsewhere] * 2
        with Load(self, s.port, "/f", load_users) as load:
            time.sleep(0.5)
            killed_at = time.monotonic()
            new_master = self.cluster.kill_master(victim)
            promoted = time.monotonic() - killed_at

            # Decided by Redis again within a few seconds of the promotion, by every worker:
            # each learns the new master on its own (a new connection lands on any worker),
            # so one decided request does not mean the next one on another worker is.
            def decided_once():
                c = RawClient(s.port)
                try:
                    return c.request("GET", "/f/resume", [("X-User", on_victim)]).header("ratelimit") is not None
                finally:
                    c.close()

            def decided():
                return all(decided_once() for _ in range(4 * WORKERS))
            wait_until(decided, 10.0, interval=0.05, message="decisions on the promoted replica")
            resumed = time.monotonic() - killed_at
            time.sleep(0.5)
        self.assertEqual({st for (_, st) in load.statuses}, {200}, load.statuses)
        self.assertEqual(load.decided[(elsewhere, False)], 0,
                         "keys on the live masters must be decided by Redis throughout")
        # Lost counts: what the victim's bucket says against the decisions Redis made for it.
        r = self.client(s.port).request("GET", "/f/final", [("X-User", on_victim)])
        remaining = int(re.search(r";r=(\d+)", r.header("ratelimit")).group(1))
        allowed = sum(1 for e in s.access_entries()
                      if e["decision"] == "allowed" and (e["target"].startswith(f"/f/{on_victim}/")
                                                         or e["target"] in ("/f/resume", "/f/final")))
        allowed += 20  # the warm-up
        lost = remaining - (BURST - allowed)
        print(f"\n    cluster master {victim.port} killed: replica {new_master.port} promoted after "
              f"{promoted:.2f}s, decisions resumed after {resumed:.2f}s, lost_counts={lost}, "
              f"responses without a decision on the victim's key={load.decided[(on_victim, False)]}")
        # Redis may hold a count the access log calls a store error: a call the victim ran and
        # passed to its replica, whose reply the SIGKILL cut off (sluice never resends, and
        # says a decision whose reply was lost may have counted). At most one per client that
        # had a request in flight on the victim's key when it died; nothing else over-counts.
        in_flight_at_kill = load_users.count(on_victim)
        self.assertGreaterEqual(lost, -in_flight_at_kill)
        moved = rf"moved from 127\.0\.0\.1:{victim.port} to 127\.0\.0\.1:{new_master.port}"
        self.assertTrue(re.search(moved, s.log_text()), f"no log line like {moved!r}")


class ClusterAccuracyTest(test_accuracy.AccuracyTest):
    """test_accuracy's exactness test (2 instances, 50 connections, one key) on the cluster."""

    def store(self):
        self.cluster = RedisClusterSetup(masters=3, replicas_per_master=1)
        self.addCleanup(self.cluster.cleanup)
        self.cluster.start()
        return cluster_store(self.cluster)

    def connections_per_instance(self):
        return WORKERS * len(self.cluster.seeds)

    def where(self):
        return ", Redis Cluster of 3 masters"


del test_accuracy  # its own tests run from test_accuracy.py, not again from here

if __name__ == "__main__":
    unittest.main()
