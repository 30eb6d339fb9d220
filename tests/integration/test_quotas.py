"""Quotas through the real proxy: fixed and calendar windows, shared by two instances on one
Redis, and request costs taken from a header (issue 15).

Calendar windows are worked out here with Python's zoneinfo from the system's tzdata, the
same files sluice reads, and compared with what sluice answers: the reset (`t`) and
Retry-After of a daily quota are the seconds to the next local midnight in the zone.
"""

import datetime
import math
import os
import tempfile
import time
import unittest
import zoneinfo

from harness import (SluiceTestCase, free_port, limited_route, proxy_config, ratelimit_headers,
                     redis_store, respond, retry_after, run_cli, to_yaml, token_bucket)

WORKERS = 2


def fixed_window(name, limit, window, *, time_zone=None, key=None, cost=None, default_cost=None):
    out = {"name": name, "algorithm": "fixed_window", "limit": limit, "window": window}
    if time_zone is not None:
        out["time_zone"] = time_zone
    if key is not None:
        out["key"] = list(key)
    if cost is not None:
        out["cost"] = cost
    if default_cost is not None:
        out["default_cost"] = default_cost
    return out


def seconds_to_local_midnight(zone, at=None):
    """Seconds from `at` (a UTC timestamp, default now) to the next midnight in `zone`."""
    tz = zoneinfo.ZoneInfo(zone)
    now = datetime.datetime.fromtimestamp(at if at is not None else time.time(), tz)
    tomorrow = (now + datetime.timedelta(days=1)).date()
    midnight = datetime.datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=tz)
    return midnight.timestamp() - now.timestamp()


def away_from_window_end(seconds_left, margin=5.0):
    """Sleeps past a window's end when it is less than `margin` seconds away, so that a
    test's requests fall in one window."""
    left = seconds_left()
    if left < margin:
        time.sleep(left + 0.2)


class QuotaTestCase(SluiceTestCase):
    def start_stack(self, routes, instances=1):
        self.up = self.start_upstream(respond(200, b"upstream ok"))
        self.redis = self.start_redis()
        self.ports, self.sluices = [], []
        for _ in range(instances):
            port = free_port()
            sluice = self.start_sluice(proxy_config(port, {"app": self.up.address}, routes,
                                                    extra={"store": redis_store(self.redis)}))
            sluice.wait_store_connected(WORKERS)
            self.ports.append(port)
            self.sluices.append(sluice)
        return self.ports[0]


class CalendarQuotaTest(QuotaTestCase):
    def test_a_daily_quota_in_a_time_zone_resets_at_local_midnight(self):
        zone = "Asia/Kathmandu"  # +05:45: its midnight is no whole UTC hour
        away_from_window_end(lambda: seconds_to_local_midnight(zone))
        port = self.start_stack([limited_route("daily", [
            fixed_window("per_day", 3, "day", time_zone=zone, key=[])])])
        c = self.client(port)
        responses, lefts = [], []
        for i in range(4):
            before = seconds_to_local_midnight(zone)
            responses.append(c.request("GET", f"/daily/{i}"))
            lefts.append((seconds_to_local_midnight(zone), before))
        self.assertEqual([r.status for r in responses], [200, 200, 200, 429],
                         [r.body[:200] for r in responses])
        self.assertEqual(len(self.up.requests), 3)
        for i, r in enumerate(responses):
            h = ratelimit_headers(r)
            self.assertEqual(h["policy"], ("per_day", 3, 86400), f"response {i}")
            name, remaining, reset = h["state"]
            self.assertEqual(remaining, max(0, 2 - i), f"response {i}")
            # t: the seconds to the zone's next midnight, as the clock stood during the request.
            after, before = lefts[i]
            self.assertTrue(math.ceil(after) - 1 <= reset <= math.ceil(before) + 1,
                            f"response {i}: t={reset}, midnight in {after:.1f}..{before:.1f} s")
        after, before = lefts[3]
        self.assertTrue(math.ceil(after) - 1 <= retry_after(responses[3]) <= math.ceil(before) + 1)
        # In Redis: the window's start (local midnight, as POSIX microseconds) and the count.
        start_us = round((time.time() + seconds_to_local_midnight(zone) - 86400) * 1e6)
        value = self.redis.command("GET", "sluice:{daily}:per_day")
        value = value.decode() if isinstance(value, bytes) else value
        start, count = value.split(":")
        self.assertEqual(count, "3")
        self.assertLess(abs(int(start) - start_us), 2_000_000, value)  # (86400 s days here: no DST)
        self.assertEqual(int(start) // 1_000_000 % 3600, 15 * 60)  # 18:15 UTC

    def test_two_instances_share_one_window_exactly(self):
        # A 1-hour window aligned to the epoch, shared through Redis by two proxies.
        away_from_window_end(lambda: 3600 - time.time() % 3600)
        self.start_stack([limited_route("shared", [fixed_window("hourly", 7, "1h", key=[])])],
                         instances=2)
        clients = [self.client(p) for p in self.ports]
        statuses = [clients[i % 2].request("GET", f"/shared/{i}").status for i in range(12)]
        self.assertEqual(statuses.count(200), 7, statuses)
        self.assertEqual(statuses, [200] * 7 + [429] * 5)
        self.assertEqual(len(self.up.requests), 7)
        r = clients[1].request("GET", "/shared/again")
        self.assertEqual(r.status, 429)
        # Retry-After: the seconds to the next whole UTC hour.
        left = 3600 - time.time() % 3600
        self.assertTrue(math.ceil(left) - 1 <= retry_after(r) <= math.ceil(left) + 1, retry_after(r))


class CostTest(QuotaTestCase):
    def test_cost_from_a_header(self):
        port = self.start_stack([limited_route("api", [
            token_bucket("units", 1, "1h", 10, key=[]) | {"cost": "header:X-Cost"}])])
        c = self.client(port)
        r = c.request("GET", "/api/a", [("X-Cost", "7")])
        self.assertEqual(r.status, 200)
        self.assertEqual(ratelimit_headers(r)["state"][1], 3)
        r = c.request("GET", "/api/b", [("X-Cost", "4")])  # 3 left: limited, takes nothing
        self.assertEqual(r.status, 429)
        self.assertEqual(ratelimit_headers(r)["state"][1], 3)
        # More than the bucket holds can never pass: 400, nothing upstream, connection kept.
        r = c.request("GET", "/api/c", [("X-Cost", "11")])
        doc = self.assert_problem(r, 400)
        self.assertIn("x-cost", doc.get("detail", ""), doc)
        self.assertIn("'units'", doc.get("detail", ""), doc)
        r = c.request("GET", "/api/d", [("X-Cost", "99999999999999999999999999")])
        self.assert_problem(r, 400)
        # Not a whole number, or missing: the default cost (1) each: 3 left, then none.
        for i, value in enumerate(["junk", "-2", "+1"]):
            r = c.request("GET", f"/api/e{i}", [("X-Cost", value)])
            self.assertEqual(r.status, 200, value)
            self.assertEqual(ratelimit_headers(r)["state"][1], 2 - i)
        self.assertEqual(c.request("GET", "/api/e3", [("X-Cost", "1.0")]).status, 429)
        self.assertEqual(c.request("GET", "/api/none").status, 429)
        r = c.request("GET", "/api/zero", [("X-Cost", "0")])  # free: passes even when empty
        self.assertEqual(r.status, 200)
        self.assertEqual([q.target for q in self.up.requests],
                         ["/api/a", "/api/e0", "/api/e1", "/api/e2", "/api/zero"])
        entries = self.sluices[0].wait_access(target="/api/d")
        self.assertEqual(entries["status"], "400")
        self.sluices[0].wait_log("header x-cost asks for more than limit 'units' of route 'api' can grant")


class CheckTest(unittest.TestCase):
    def test_check_warns_about_large_sliding_windows(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(to_yaml(proxy_config(free_port(), {"app": "127.0.0.1:1"}, [limited_route("big", [
                    {"name": "huge", "algorithm": "sliding_window", "limit": 50000, "window": "1d"}])])))
            result = run_cli(["--check", "-c", path])
        out = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, out)
        self.assertIn("warning", out)
        self.assertIn("fixed_window or token_bucket", out)


if __name__ == "__main__":
    unittest.main()
