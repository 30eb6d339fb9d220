"""store.redis.mode sentinel: one master, one replica and three sentinels (real redis-server
processes, the sentinels as `redis-server --sentinel`), two sluice workers.

sluice finds the master through the sentinels (the first one listed is a dead port), follows
`SENTINEL FAILOVER` and a killed master, never sends a decision to a replica, and with
on_error: allow no request fails while the master changes. Limiting resumes within a few
seconds. Counts written to the old master that the new one never saw are reported as "lost"
(Redis replicates asynchronously, and the old master takes writes until the sentinels tell
sluice about the new one); the README quotes these figures.
"""

import collections
import re
import threading
import time
import unittest

from admin_api import admin_request, wait_admin
from harness import (SluiceTestCase, free_port, limited_route, proxy_config, respond,
                     token_bucket, wait_until)
from redis_setups import SentinelSetup

WORKERS = 2
BURST = 50000        # 1 token an hour: nothing measurable refills during a test
LOAD_THREADS = 4
RESUME_WITHIN = 8.0  # seconds from the new master being in place to decisions by Redis again


def decide_calls(server):
    """How many decide calls (FCALL, EVALSHA: the decide function or script) `server` ran
    (0 when none)."""
    try:
        stats = server.command("INFO", "commandstats")
    except Exception:
        return None
    return sum(int(c) for c in re.findall(r"cmdstat_(?:fcall|evalsha):calls=(\d+)", stats))


class SentinelTest(SluiceTestCase):
    def setUp(self):
        self.setup = SentinelSetup()
        self.addCleanup(self._finish_setup)
        self.setup.start()
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        self.admin = free_port()
        dead = f"127.0.0.1:{free_port()}"
        store = {"type": "redis", "on_error": "allow",
                 "redis": {"mode": "sentinel", "sentinels": [dead] + list(self.setup.sentinel_addresses),
                           "master_name": self.setup.master_name, "timeout": "500ms"}}
        routes = [limited_route("tb", [token_bucket("bucket", 1, "1h", BURST, key=[])], path_prefix="/")]
        self.sluice = self.start_sluice(proxy_config(self.port, {"app": self.up.address}, routes,
                                                     server={"workers": WORKERS},
                                                     extra={"store": store,
                                                            "admin": {"listen": f"127.0.0.1:{self.admin}"}}))
        wait_admin(self.admin)
        self.sluice.wait_store_connected(WORKERS)
        self.sent = 0

    def _finish_setup(self):
        if self._failed():
            import sys
            sys.stderr.write(self.setup.log_text()[-6000:])
        self.setup.cleanup()

    # ---- traffic --------------------------------------------------------------------------

    def get(self, tag):
        c = self.client(self.port, timeout=5)
        r = c.request("GET", f"/{tag}/{self.sent}")
        self.sent += 1
        c.close()
        return r

    def remaining(self):
        """Sends one request and returns the bucket's remaining tokens as Redis says."""
        r = self.get("probe")
        self.assertEqual(r.status, 200)
        state = r.header("ratelimit")
        self.assertIsNotNone(state, f"no RateLimit header: {r.headers}")
        return int(re.search(r";r=(\d+)", state).group(1))

    def decisions(self):
        return collections.Counter(e["decision"] for e in self.sluice.access_entries())

    def wait_logged(self, count):
        wait_until(lambda: sum(self.decisions().values()) >= count, 10.0,
                   message=f"{count} access lines")

    def load(self, seconds_after, during):
        """LOAD_THREADS keep-alive clients send requests until `during()` has returned and
        `seconds_after` more seconds passed. Returns Counter(status) and the slowest
        request's seconds."""
        statuses = collections.Counter()
        slowest = [0.0]
        undecided = []  # when responses came that Redis did not decide (no RateLimit header)
        errors = []
        stop = threading.Event()
        lock = threading.Lock()

        def run(k):
            try:
                c = self.client(self.port, timeout=10)
                i = 0
                while not stop.is_set():
                    started = time.monotonic()
                    r = c.request("GET", f"/load/{k}/{i}")
                    took = time.monotonic() - started
                    i += 1
                    with lock:
                        statuses[r.status] += 1
                        slowest[0] = max(slowest[0], took)
                        if r.header("ratelimit") is None:
                            undecided.append(time.monotonic())
            except Exception as e:  # reported below
                errors.append(f"client {k}: {e!r}")

        threads = [threading.Thread(target=run, args=(k,)) for k in range(LOAD_THREADS)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            result = during()
            time.sleep(seconds_after)
        finally:
            stop.set()
            for t in threads:
                t.join(20)
        self.assertEqual(errors, [])
        self.outage = (max(undecided) - min(undecided)) if undecided else 0.0
        return statuses, slowest[0], result

    def wait_redis_decides(self, since):
        """Sends a request every 50 ms until one is decided by Redis (it carries RateLimit
        headers; a store error does not), within RESUME_WITHIN seconds of `since` (when the
        sentinels had all switched)."""
        def decided():
            r = self.get("resume")
            self.assertEqual(r.status, 200)
            return r.header("ratelimit") is not None
        wait_until(decided, max(RESUME_WITHIN - (time.monotonic() - since), 0.1), interval=0.05,
                   message="a decision by the new master")

    def warm_up(self, n=50):
        for _ in range(n):
            self.assertEqual(self.get("warm").status, 200)
        self.assertEqual(self.remaining(), BURST - n - 1)

    def report(self, what, statuses, slowest):
        """Prints and returns the lost counts. Every decision Redis answered is an "allowed"
        access line, so the bucket should be down by at least that many; a store error may
        also have been counted (its reply lost with the connection, or late), so by at most
        that many more. Tokens above that range were counts the new master never saw."""
        final = self.remaining()
        self.wait_logged(self.sent + sum(statuses.values()))
        counts = self.decisions()
        allowed = counts["allowed"]
        errors = counts["store_error_allowed"]
        lost = final - (BURST - allowed)  # at least lost - errors, at most lost
        print(f"\n    sentinel {what}: requests={sum(counts.values())} decided_by_redis={allowed} "
              f"store_error_allowed={errors} slowest={slowest:.3f}s on_error_for={self.outage:.2f}s "
              f"lost_counts={max(lost - errors, 0)}..{max(lost, 0)}")
        self.assertEqual(set(counts) - {"allowed", "store_error_allowed"}, set(), counts)
        self.assertGreaterEqual(lost + errors, 0, "the bucket cannot have lost more tokens than decisions taken")
        return lost

    # ---- tests ----------------------------------------------------------------------------

    def test_finds_the_master_through_a_live_sentinel_and_shows_the_nodes(self):
        self.warm_up(10)
        master = self.setup.master()
        self.assertGreater(decide_calls(master), 0)
        self.assertEqual(decide_calls(self.setup.replica()), 0, "no decision may reach the replica")
        metrics = self.sluice_metrics()
        self.assertIn(f'sluice_store_node_up{{address="127.0.0.1:{master.port}",role="master"}} 1', metrics)
        self.assertIn("sluice_store_up 1", metrics)
        line = rf"redis sentinel: master {self.setup.master_name} is 127\.0\.0\.1:{master.port}"
        self.assertTrue(re.search(line, self.sluice.log_text()), f"no log line like {line!r}")

    def test_decisions_follow_sentinel_failover(self):
        self.warm_up()
        old = self.setup.master()
        replica = self.setup.replica()
        self.assertEqual(decide_calls(replica), 0, "no decision may reach the replica")
        box = {}

        def failover():
            box["new"] = self.setup.failover()
            box["at"] = time.monotonic()

        statuses, slowest, _ = self.load(2.0, failover)
        new = box["new"]
        self.assertEqual(new.port, replica.port)
        self.assertEqual(set(statuses), {200}, f"with on_error: allow every request is forwarded: {statuses}")
        self.wait_redis_decides(box["at"])
        self.sluice.wait_log(rf"redis sentinel: master {self.setup.master_name} is 127\.0\.0\.1:{new.port}")
        # From now on the old master gets nothing, whatever role it has yet.
        before = decide_calls(old)
        for _ in range(30):
            self.assertEqual(self.get("after").status, 200)
        self.assertEqual(decide_calls(old), before, "a decision went to the old master after the switch")
        self.report("SENTINEL FAILOVER", statuses, slowest)

    def test_decisions_follow_a_killed_master_and_never_reach_it_when_it_returns_as_a_replica(self):
        self.warm_up()
        box = {}

        def kill():
            box["new"] = self.setup.kill_master()
            box["at"] = time.monotonic()

        statuses, slowest, _ = self.load(1.0, kill)
        self.assertEqual(set(statuses), {200}, f"with on_error: allow every request is forwarded: {statuses}")
        self.assertLess(slowest, 2.0, "a decision may not wait much longer than store.redis.timeout")
        self.wait_redis_decides(box["at"])
        self.report("master killed (SIGKILL)", statuses, slowest)
        self.assertGreater(self.decisions()["store_error_allowed"], 0,
                           "requests while no master answered follow on_error")

        # The old master comes back empty and is made a replica of the new one: it must not
        # get a single decision.
        returned = self.setup.restart_old_master()
        for _ in range(50):
            self.assertEqual(self.get("back").status, 200)
        self.assertEqual(decide_calls(returned), 0, "a decision reached the returned old master (a replica)")
        self.assertEqual(self.get("back").header("ratelimit") is not None, True)

    def sluice_metrics(self):
        status, _, body = admin_request(self.admin, "/metrics")
        self.assertEqual(status, 200)
        return body.decode()


class SentinelAuthTest(SluiceTestCase):
    """sentinel_password: sentinels that require AUTH (requirepass) answer sluice only with it."""

    def start(self, password):
        setup = SentinelSetup(sentinel_password="s3cret")
        self.addCleanup(setup.cleanup)
        setup.start()
        up = self.start_upstream(respond(200, b"ok"))
        port = free_port()
        redis = {"mode": "sentinel", "sentinels": setup.sentinel_addresses, "master_name": setup.master_name,
                 "timeout": "2s"}
        if password is not None:
            redis["sentinel_password"] = password
        s = self.start_sluice(proxy_config(port, {"app": up.address},
                                           [limited_route("tb", [token_bucket("b", 1, "1h", 100, key=[])],
                                                          path_prefix="/")],
                                           extra={"store": {"type": "redis", "on_error": "deny", "redis": redis}}))
        return setup, s, port

    def test_with_the_password_the_master_is_found(self):
        setup, s, port = self.start("s3cret")
        s.wait_store_connected(2, timeout=10)
        r = self.client(port).request("GET", "/a")
        self.assertEqual(r.status, 200)
        self.assertIsNotNone(r.header("ratelimit"))

    def test_without_it_every_sentinel_refuses_and_decisions_follow_on_error(self):
        setup, s, port = self.start(None)
        s.wait_log(r"redis sentinel 127\.0\.0\.1:\d+: SENTINEL get-master-addr-by-name failed: NOAUTH", timeout=10)
        r = self.client(port).request("GET", "/a")
        self.assert_problem(r, 503)
        self.assertNotIn("redis: connected to", s.log_text())


class FakeSentinel:
    """A hostile or broken "sentinel" on a free port: answers get-master-addr-by-name with
    `answer` (raw RESP bytes) and, once subscribed, sends `messages` (raw RESP bytes each),
    then keeps the connection open. Counts the connections it got."""

    def __init__(self, answer, messages=()):
        import socket as socketlib
        self.answer = answer
        self.messages = list(messages)
        self.connections = 0
        self.sock = socketlib.socket()
        self.sock.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        data = b""
        try:
            conn.settimeout(30)
            while not self.stopped:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
                if b"get-master-addr-by-name" in data:
                    data = b""
                    conn.sendall(self.answer)
                if b"SUBSCRIBE" in data:
                    data = b""
                    conn.sendall(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
                    for m in self.messages:
                        conn.sendall(m)
                        time.sleep(0.05)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopped = True
        self.sock.close()


def message(channel, payload):
    c, p = channel.encode(), payload.encode()
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(c), c, len(p), p)


class HostileSentinelTest(SluiceTestCase):
    """Sentinels that answer nonsense: sluice ignores it, logs it, asks another, and keeps
    deciding on the real master. Whatever a sentinel sends, it must not crash or move
    sluice to an address that is not one."""

    def test_garbage_from_sentinels_is_refused_and_the_good_one_is_followed(self):
        master = self.start_redis()
        up = self.start_upstream(respond(200, b"ok"))
        real = f"*2\r\n$9\r\n127.0.0.1\r\n${len(str(master.port))}\r\n{master.port}\r\n".encode()
        fakes = [
            FakeSentinel(b"*2\r\n$8\r\nbad host\r\n$4\r\n6379\r\n"),                # not a host
            FakeSentinel(b"*2\r\n$9\r\n127.0.0.1\r\n$1\r\n0\r\n"),                   # port 0
            FakeSentinel(b"*20000000\r\n"),                                                 # a huge array
            FakeSentinel(b"$-1\r\n"),                                                       # unknown master
            FakeSentinel(b"-ERR no such command\r\n"),
            FakeSentinel(real, messages=[
                message("+switch-master", "other-master 127.0.0.1 1 127.0.0.1 2"),     # not ours
                message("+switch-master", "sluice-master 127.0.0.1 1 127.0.0.1 99999"),  # bad port
                message("+switch-master", "sluice-master 127.0.0.1 1 bad_host! 6380"),
                message("+failover-state-send-slaveof-noone", "slave x x x @ sluice-master"),
                message("-failover-abort-no-good-slave", "master"),
                b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n*99999999\r\n",  # nested junk
            ]),
        ]
        for f in fakes:
            self.addCleanup(f.stop)
        port = free_port()
        store = {"type": "redis", "on_error": "deny",
                 "redis": {"mode": "sentinel", "sentinels": [f.address for f in fakes],
                           "master_name": "sluice-master", "timeout": "2s"}}
        s = self.start_sluice(proxy_config(port, {"app": up.address},
                                           [limited_route("tb", [token_bucket("b", 1, "1h", 1000, key=[])],
                                                          path_prefix="/")],
                                           extra={"store": store}))
        s.wait_store_connected(2, timeout=15)
        c = self.client(port)
        for i in range(20):
            r = c.request("GET", f"/x/{i}")
            self.assertEqual(r.status, 200, r.body[:200])
            self.assertIsNotNone(r.header("ratelimit"), "decided by the master the good sentinel named")
        time.sleep(1.0)  # the junk messages arrive; nothing may change
        for i in range(10):
            r = c.request("GET", f"/y/{i}")
            self.assertEqual(r.status, 200)
            self.assertIsNotNone(r.header("ratelimit"))
        self.assertTrue(s.running(), "sluice must survive whatever sentinels send")
        log = s.log_text()
        self.assertIn("is not a host and a port", log)
        self.assertIn("does not know a master named sluice-master", log)
        self.assertNotRegex(log, r"master sluice-master is (?!127\.0\.0\.1:%d)" % master.port)


if __name__ == "__main__":
    unittest.main()
