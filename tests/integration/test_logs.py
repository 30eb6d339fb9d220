"""Per-route summary lines (text and json), the limited-share jump warning, access_log off /
file, SIGUSR1 reopen after a logrotate-style rename, and the final summary at SIGTERM."""

import json
import os
import re
import shutil
import signal
import tempfile
import unittest
from unittest import mock

from harness import SluiceTestCase, free_port, parse_access_line, proxy_config, respond, wait_until

HOUR = "1h"  # no refill during a test: limited counts are exact

_SUMMARY_RE = re.compile(
    r"summary route=(?P<route>\S+) interval=(?P<interval>\S+) requests=(?P<requests>\d+) "
    r"forwarded=(?P<forwarded>\d+) limited=(?P<limited>\d+) limited_pct=(?P<limited_pct>\d+\.\d) "
    r"shadow_limited=(?P<shadow_limited>\d+) store_errors=(?P<store_errors>\d+) delayed=(?P<delayed>\d+) "
    r"exempt=(?P<exempt>\d+) top_limited=(?P<top_limited>\S+) limited_by=(?P<limited_by>\S+)$")

_TIME_RE = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"  # RFC 3339, ms, UTC

_JUMP_RE = r"route {route}: limited share jumped from (\d+\.\d)% to (\d+\.\d)%"


def parse_summaries(text, route=None):
    """Every text summary line in text (optionally of one route) as dicts; counters as ints."""
    out = []
    for line in text.splitlines():
        m = _SUMMARY_RE.search(line)
        if not m:
            continue
        d = m.groupdict()
        for key in ("requests", "forwarded", "limited", "shadow_limited", "store_errors"):
            d[key] = int(d[key])
        d["line"] = line
        if route is None or d["route"] == route:
            out.append(d)
    return out


def limit_route(name, prefix, burst):
    return {"name": name, "match": {"path_prefix": prefix}, "upstream": "app",
            "limits": [{"name": "burst", "algorithm": "token_bucket", "rate": 1, "per": HOUR,
                        "burst": burst, "key": ["client_ip"]}]}


def tick_route():
    return {"name": "tick", "match": {"path_prefix": "/tick"}, "upstream": "app"}


class LogsTestCase(SluiceTestCase):
    def send(self, client, target, n, headers=()):
        return [client.request("GET", target, headers).status for _ in range(n)]

    def sync_to_summary_tick(self, s, text_of):
        """Sends one request to the unlimited route "tick" and waits for its summary line:
        a summary interval has just begun, so a short burst sent now lands in one interval."""
        count = lambda: len(re.findall(r'summary route=tick\b|"route":"tick"', text_of()))  # noqa: E731
        before = count()
        self.assertEqual(self.client(self.port).request("GET", "/tick").status, 200)
        wait_until(lambda: count() > before, 5.0, interval=0.01,
                   message="the summary line of route tick")

    def assert_consistent(self, line):
        """Inside one summary line: requests = forwarded + limited, limited_pct and
        top_limited agree with the counts."""
        self.assertEqual(line["requests"], line["forwarded"] + line["limited"], line["line"])
        pct = 100.0 * line["limited"] / line["requests"] if line["requests"] else 0.0
        self.assertEqual(line["limited_pct"], f"{pct:.1f}", line["line"])
        if line["limited"] == 0:
            self.assertEqual(line["top_limited"], "-", line["line"])
            self.assertEqual(line["limited_by"], "-", line["line"])
        else:
            total = sum(int(item.rsplit(":", 1)[1]) for item in line["top_limited"].split(","))
            self.assertEqual(total, line["limited"], line["line"])
            # Each refusal names the one limit that refused (these routes have one limit each).
            by = sum(int(item.rsplit(":", 1)[1]) for item in line["limited_by"].split(","))
            self.assertEqual(by, line["limited"], line["line"])


class TextSummaryTest(LogsTestCase):
    def setUp(self):
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address},
            [limit_route("hot", "/hot", 5), limit_route("mild", "/mild", 16),
             limit_route("small", "/small", 5), tick_route()],
            client_ip={"trusted_proxies": ["127.0.0.1/32"]},
            logging={"summary_interval": "1s", "format": "text", "access_log": "stdout"}))

    def test_summary_counts_top_clients_and_jump_warning(self):
        s = self.sluice
        self.sync_to_summary_tick(s, s.stdout_text)
        c = self.client(self.port)
        # hot: two clients (X-Forwarded-For from a trusted peer), five tokens each.
        a, b = [("X-Forwarded-For", "203.0.113.7")], [("X-Forwarded-For", "198.51.100.2")]
        self.assertEqual(self.send(c, "/hot", 25, a), [200] * 5 + [429] * 20)
        self.assertEqual(self.send(c, "/hot", 9, b), [200] * 5 + [429] * 4)
        # mild: 20 requests, 20 % limited: below the 25 % the warning needs.
        self.assertEqual(self.send(c, "/mild", 20), [200] * 16 + [429] * 4)
        # small: 50 % limited but only 10 requests: below the 20 requests the warning needs.
        self.assertEqual(self.send(c, "/small", 10), [200] * 5 + [429] * 5)

        wait_until(lambda: all(parse_summaries(s.stdout_text(), r) for r in ("hot", "mild", "small")),
                   5.0, message="summary lines of hot, mild and small")
        lines = {r: parse_summaries(s.stdout_text(), r) for r in ("hot", "mild", "small")}
        for route, found in lines.items():
            self.assertEqual(len(found), 1, f"the burst was sent right after a summary tick, so "
                                            f"{route} has one summary line: {found}")
            self.assert_consistent(found[0])
            self.assertEqual(found[0]["interval"], "1s")
        hot, mild, small = lines["hot"][0], lines["mild"][0], lines["small"][0]
        self.assertIn("summary route=hot interval=1s requests=34 forwarded=10 limited=24 "
                      "limited_pct=70.6 shadow_limited=0 store_errors=0 delayed=0 exempt=0 "
                      "top_limited=203.0.113.7:20,198.51.100.2:4 limited_by=burst:24", hot["line"])
        self.assertEqual((mild["requests"], mild["forwarded"], mild["limited"], mild["limited_pct"],
                          mild["top_limited"]), (20, 16, 4, "20.0", "127.0.0.1:4"))
        self.assertEqual((small["requests"], small["forwarded"], small["limited"],
                          small["limited_pct"], small["top_limited"]), (10, 5, 5, "50.0", "127.0.0.1:5"))
        self.assertEqual(parse_summaries(s.stderr_text()), [],
                         "with access_log: stdout the summaries go to stdout only")

        # The jump warning: on stderr, for hot only.
        m = s.wait_log(_JUMP_RE.format(route="hot"))
        self.assertEqual((m.group(1), m.group(2)), ("0.0", "70.6"))
        warn_line = next(l for l in s.stderr_text().splitlines() if "route hot: limited share" in l)
        self.assertRegex(warn_line, r"\bwarn", "the jump line is a warning")
        self.assertNotIn("limited share jumped", s.stdout_text())
        for quiet in ("mild", "small", "tick"):
            self.assertIsNone(re.search(_JUMP_RE.format(route=quiet), s.stderr_text()),
                              f"{quiet} must not trigger the jump warning")

        # Routes without traffic in an interval get no line: tick saw one request, once.
        self.assertEqual(len(parse_summaries(s.stdout_text(), "tick")), 1)
        # And every access line is on stdout: 1 + 34 + 20 + 10 requests.
        self.assertEqual(len([e for e in s.access_entries() if e["route"] != "-"]), 65)

    def test_jump_warning_needs_a_rise_of_20_points(self):
        """Four consecutive intervals on one route: 0 % -> 25 % warns (exactly at the
        thresholds of 20 requests, 25 % and +20 points), 25 % -> 40 % does not (+15 points),
        40 % -> 100 % warns again. Each burst is sent as soon as the previous interval's
        summary line appears, so no interval without traffic comes between them."""
        s = self.sluice
        c = self.client(self.port)
        ip = lambda n: [("X-Forwarded-For", f"192.0.2.{n}")]  # noqa: E731  (burst 5 each)

        def interval(number, sends):
            if number == 1:
                self.sync_to_summary_tick(s, s.stdout_text)
            for n, headers, statuses in sends:
                self.assertEqual(self.send(c, "/hot", n, headers), statuses)
            wait_until(lambda: len(parse_summaries(s.stdout_text(), "hot")) >= number, 5.0,
                       message=f"summary line {number} of hot")
            lines = parse_summaries(s.stdout_text(), "hot")
            self.assertEqual(len(lines), number, lines)
            self.assert_consistent(lines[-1])
            return lines[-1]

        def jumps():
            return re.findall(_JUMP_RE.format(route="hot") + r" \((\d+) of (\d+) requests\)",
                              s.stderr_text())

        # 1: 0 % (client 1 spends its five tokens).
        line = interval(1, [(5, ip(1), [200] * 5)])
        self.assertEqual((line["requests"], line["limited_pct"]), (5, "0.0"))
        # 2: 25 %: 15 forwarded (clients 2-4) + 5 limited (client 1).
        line = interval(2, [(5, ip(2), [200] * 5), (5, ip(3), [200] * 5), (5, ip(4), [200] * 5),
                            (5, ip(1), [429] * 5)])
        self.assertEqual((line["requests"], line["limited"], line["limited_pct"]), (20, 5, "25.0"))
        wait_until(jumps, 5.0, message="the first jump warning")
        self.assertEqual(jumps(), [("0.0", "25.0", "5", "20")])
        # 3: 40 %: 12 forwarded (clients 5, 6 and two of 7) + 8 limited (client 1).
        line = interval(3, [(5, ip(5), [200] * 5), (5, ip(6), [200] * 5), (2, ip(7), [200] * 2),
                            (8, ip(1), [429] * 8)])
        self.assertEqual((line["requests"], line["limited"], line["limited_pct"]), (20, 8, "40.0"))
        # 4: 100 %.
        line = interval(4, [(20, ip(1), [429] * 20)])
        self.assertEqual((line["requests"], line["limited"], line["limited_pct"]), (20, 20, "100.0"))
        wait_until(lambda: len(jumps()) >= 2, 5.0, message="the second jump warning")
        self.assertEqual(jumps(), [("0.0", "25.0", "5", "20"), ("40.0", "100.0", "20", "20")],
                         "25 % -> 40 % is a rise of 15 points: no warning")


class JsonSummaryTest(LogsTestCase):
    def test_json_summary_parses_and_has_the_same_numbers(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        s = self.start_sluice(proxy_config(
            self.port, {"app": up.address}, [limit_route("hot", "/hot", 20), tick_route()],
            logging={"summary_interval": "1s", "format": "json", "access_log": "stdout"}))
        self.sync_to_summary_tick(s, s.stdout_text)
        c = self.client(self.port)
        self.assertEqual(self.send(c, "/hot", 30), [200] * 20 + [429] * 10)

        def objects():
            out = []
            for line in s.stdout_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))  # every stdout line is one JSON object
            return out

        def hot_summaries():
            return [o for o in objects() if o.get("summary") is True and o.get("route") == "hot"]
        wait_until(hot_summaries, 5.0, message="a json summary of route hot")
        found = hot_summaries()
        self.assertEqual(len(found), 1, found)
        self.assertRegex(found[0].pop("time"), _TIME_RE)
        self.assertEqual(found[0], {
            "summary": True, "route": "hot", "interval": "1s", "requests": 30, "forwarded": 20,
            "limited": 10, "limited_pct": 33.3, "shadow_limited": 0, "store_errors": 0, "delayed": 0, "exempt": 0,
            "top_limited": [{"client": "127.0.0.1", "limited": 10}], "limited_by": {"burst": 10}})
        def tick_summaries():
            return [o for o in objects() if o.get("summary") is True and o.get("route") == "tick"]
        # Written in the same pass as hot's, a moment later: a slow build (make asan) can be read between the two.
        wait_until(tick_summaries, 5.0, message="a json summary of route tick")
        tick = tick_summaries()
        self.assertEqual(len(tick), 1)
        self.assertEqual(tick[0]["top_limited"], [])
        self.assertEqual(tick[0]["limited_by"], {})
        self.assertEqual(tick[0]["limited_pct"], 0)

        access = [o for o in objects() if "summary" not in o]
        hot = [o for o in access if o.get("route") == "hot"]
        self.assertEqual([o["status"] for o in hot], [200] * 20 + [429] * 10)
        self.assertEqual([o["decision"] for o in hot], ["allowed"] * 20 + ["limited"] * 10)

        m = s.wait_log(_JUMP_RE.format(route="hot"))
        self.assertEqual((m.group(1), m.group(2)), ("0.0", "33.3"))


class AccessLineTest(LogsTestCase):
    """What an access line says: its time, the resolved client and the peer, the request id
    (kept from a trusted proxy, else made, and sent upstream), Host, upstream, user agent; and
    the operator's own format."""

    def start(self, logging=None, trusted=("127.0.0.1/32",)):
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": self.up.address}, [limit_route("main", "/", 100)],
            client_ip={"trusted_proxies": list(trusted)},
            logging={"summary_interval": "0s", "access_log": "stdout", **(logging or {})}))
        return self.sluice

    def test_standard_line_names_client_peer_request_id_host_upstream_user_agent(self):
        s = self.start()
        c = self.client(self.port)
        r = c.request("GET", "/a?b=1", [("X-Forwarded-For", "203.0.113.7"), ("User-Agent", 'probe/1.0 (x "y")')])
        self.assertEqual(r.status, 200)
        e = s.wait_access(target="/a?b=1")
        self.assertRegex(e["time"], _TIME_RE)
        self.assertEqual((e["client"], e["peer"], e["host"], e["upstream"]),
                         ("203.0.113.7", "127.0.0.1", "test.local", self.up.address), e["line"])
        self.assertEqual(e["user_agent"], r"probe/1.0 (x \x22y\x22)", e["line"])
        # A new id, and the upstream got the same one.
        self.assertRegex(e["request_id"], r"^[0-9a-f]{32}$")
        self.assertEqual(self.up.last().header_values("X-Request-Id"), [e["request_id"]])
        # Two requests, two ids.
        c.request("GET", "/second")
        self.assertNotEqual(s.wait_access(target="/second")["request_id"], e["request_id"])
        # From a trusted peer, its id is kept (one plain token); anything else gets a new one.
        c.request("GET", "/kept", [("X-Request-Id", "lb-7f3a.42")])
        self.assertEqual(s.wait_access(target="/kept")["request_id"], "lb-7f3a.42")
        self.assertEqual(self.up.last().header_values("X-Request-Id"), ["lb-7f3a.42"])
        for name, headers in (("two ids", [("X-Request-Id", "a"), ("X-Request-Id", "b")]),
                              ("a quote", [("X-Request-Id", 'a"b')]),
                              ("too long", [("X-Request-Id", "x" * 129)])):
            with self.subTest(name):
                target = "/refused-id/" + name.replace(" ", "-")
                c.request("GET", target, headers)
                got = s.wait_access(target=target)["request_id"]
                self.assertRegex(got, r"^[0-9a-f]{32}$")
                self.assertEqual(self.up.last().header_values("X-Request-Id"), [got])

    def test_limits_keyed_on_a_missing_header_are_named_skipped(self):
        self.up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        route = {"name": "api", "match": {"path_prefix": "/"}, "upstream": "app",
                 "limits": [{"name": "per_client", "algorithm": "token_bucket", "rate": 1, "per": HOUR,
                             "burst": 100, "key": ["client_ip"]},
                            {"name": "per_key", "algorithm": "token_bucket", "rate": 1, "per": HOUR,
                             "burst": 100, "key": ["header:x-api-key"]},
                            {"name": "per_tenant", "algorithm": "token_bucket", "rate": 1, "per": HOUR,
                             "burst": 100, "key": ["client_ip", "header:x-tenant"]}]}
        s = self.start_sluice(proxy_config(self.port, {"app": self.up.address}, [route],
                                           logging={"summary_interval": "0s", "access_log": "stdout"}))
        c = self.client(self.port)
        c.request("GET", "/none")
        c.request("GET", "/key", [("X-Api-Key", "k1")])
        c.request("GET", "/both", [("X-Api-Key", "k1"), ("X-Tenant", "t")])
        self.assertEqual(s.wait_access(target="/none")["skipped"], "per_key,per_tenant")
        self.assertEqual(s.wait_access(target="/key")["skipped"], "per_tenant")
        self.assertNotIn("skipped", s.wait_access(target="/both"))

    def test_an_untrusted_peer_names_neither_client_nor_request_id(self):
        s = self.start(trusted=("10.9.9.9/32",))
        c = self.client(self.port)
        c.request("GET", "/u", [("X-Forwarded-For", "203.0.113.7"), ("X-Request-Id", "forged")])
        e = s.wait_access(target="/u")
        self.assertEqual((e["client"], e["peer"]), ("127.0.0.1", "127.0.0.1"), e["line"])
        self.assertRegex(e["request_id"], r"^[0-9a-f]{32}$")
        self.assertEqual(self.up.last().header_values("X-Request-Id"), [e["request_id"]])

    def test_json_line_has_client_peer_and_time_first(self):
        s = self.start({"format": "json"})
        self.client(self.port).request("GET", "/j", [("X-Forwarded-For", "203.0.113.7")])

        def line():
            for text in s.stdout_text().splitlines():
                if text.strip():
                    o = json.loads(text)
                    if o.get("request", "").startswith("GET /j "):
                        return text, o
            return None
        text, o = wait_until(line, 5.0, message="the json access line of /j")
        self.assertTrue(text.startswith('{"time":'), text)
        self.assertRegex(o["time"], _TIME_RE)
        self.assertEqual((o["client"], o["peer"], o["status"], o["route"], o["host"], o["upstream"]),
                         ("203.0.113.7", "127.0.0.1", 200, "main", "test.local", self.up.address))
        self.assertNotIn("client_ip", o)

    def test_operator_pattern_and_local_time(self):
        with mock.patch.dict(os.environ, {"TZ": "Asia/Kolkata"}):
            s = self.start({"time_zone": "local",
                            "access_format": '$client "$method $uri" $status ${total_ms}ms id=$request_id'})
        self.client(self.port).request("GET", "/p?q=1", [("X-Forwarded-For", "203.0.113.7")])
        m = s.wait_log(r"(\S+) 203\.0\.113\.7 \"GET /p\?q=1\" 200 \d+\.\dms id=([0-9a-f]{32})\n")
        self.assertRegex(m.group(1), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30$")
        self.assertEqual(self.up.last().header_values("X-Request-Id"), [m.group(2)])
        # The process log's lines too.
        self.assertRegex(s.stderr_text(), r"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30 info sluice .* listening on ")

    def test_process_log_lines_start_with_their_time_in_utc(self):
        s = self.start({})
        lines = s.stderr_text().splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (trace|debug|info|warning|error|critical) ")

    def test_operator_field_list(self):
        s = self.start({"access_format": ["status", "request", "user_agent", "wait_ms"]})
        self.client(self.port).request("GET", "/f", [("User-Agent", "two words")])
        s.wait_log(r"\.\d{3}Z status=200 request=\"GET /f HTTP/1\.1\" user_agent=\"two words\" wait_ms=-\n")


class AccessLogOffTest(LogsTestCase):
    def test_no_access_lines_but_summaries_on_stderr(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        s = self.start_sluice(proxy_config(
            self.port, {"app": up.address}, [limit_route("main", "/", 3)],
            logging={"summary_interval": "1s", "access_log": "off"}))
        c = self.client(self.port)
        self.assertEqual(self.send(c, "/x", 5), [200] * 3 + [429] * 2)

        def totals():
            lines = parse_summaries(s.stderr_text(), "main")
            return sum(l["requests"] for l in lines) >= 5 and lines
        lines = wait_until(totals, 5.0, message="summary lines of route main on stderr")
        for line in lines:
            self.assert_consistent(line)
        self.assertEqual((sum(l["requests"] for l in lines), sum(l["forwarded"] for l in lines),
                          sum(l["limited"] for l in lines)), (5, 3, 2))
        self.assertEqual(s.access_entries(), [], "access_log: off writes no access line")
        self.assertEqual(s.stdout_text(), "", "access_log: off writes nothing to stdout")


class AccessLogFileTest(LogsTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-accesslog-")
        if not os.environ.get("SLUICE_KEEP_TMP"):
            self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "access.log")
        self.rotated = self.path + ".1"

    @staticmethod
    def read(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def targets(self, path):
        return [e["target"] for e in map(parse_access_line, self.read(path).splitlines()) if e]

    def wait_targets(self, path, wanted):
        wait_until(lambda: all(t in self.targets(path) for t in wanted), 5.0,
                   message=f"access lines for {wanted} in {path}")

    def test_sigusr1_reopens_after_rename(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        s = self.start_sluice(proxy_config(
            self.port, {"app": up.address},
            logging={"summary_interval": "1s", "access_log": self.path}))
        c = self.client(self.port)
        before = [f"/before/{i}" for i in range(3)]
        for t in before:
            self.assertEqual(c.request("GET", t).status, 200)
        self.wait_targets(self.path, before)

        os.rename(self.path, self.rotated)           # logrotate: move ...
        self.assertEqual(c.request("GET", "/between").status, 200)
        self.wait_targets(self.rotated, ["/between"])  # still the open (renamed) file
        s.send_signal(signal.SIGUSR1)                 # ... then signal
        wait_until(lambda: os.path.exists(self.path), 5.0, message=f"{self.path} re-created")

        after = [f"/after/{i}" for i in range(3)]
        for t in after:
            self.assertEqual(c.request("GET", t).status, 200)
        self.wait_targets(self.path, after)

        self.assertEqual(self.targets(self.rotated), before + ["/between"])
        self.assertEqual(self.targets(self.path), after)
        # Summaries go where the access log goes: the new file.
        wait_until(lambda: parse_summaries(self.read(self.path), "main"), 5.0,
                   message="a summary line in the re-opened access log")
        self.assertEqual(s.access_entries(), [], "no access line on stdout / stderr")
        self.assertEqual(parse_summaries(s.stdout_text() + s.stderr_text()), [])
        self.assertTrue(s.running())


class FinalSummaryTest(LogsTestCase):
    def test_sigterm_writes_the_partial_interval(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        s = self.start_sluice(proxy_config(
            self.port, {"app": up.address}, [limit_route("login", "/login", 4)],
            logging={"summary_interval": HOUR}))
        c = self.client(self.port)
        self.assertEqual(self.send(c, "/login", 6), [200] * 4 + [429] * 2)
        c.close()
        s.wait_access(target="/login", status="429")
        self.assertEqual(parse_summaries(s.stdout_text()), [], "no summary before the hour is up")
        self.assertEqual(s.stop(signal.SIGTERM), 0)
        lines = parse_summaries(s.stdout_text(), "login")
        self.assertEqual(len(lines), 1, s.log_text())
        self.assertIn("summary route=login interval=1h requests=6 forwarded=4 limited=2 "
                      "limited_pct=33.3 shadow_limited=0 store_errors=0 delayed=0 exempt=0 top_limited=127.0.0.1:2",
                      lines[0]["line"])

    def test_a_reload_that_changes_the_interval_starts_a_fresh_one(self):
        up = self.start_upstream(respond(200, b"ok"))
        self.port = free_port()
        config = lambda interval: proxy_config(  # noqa: E731
            self.port, {"app": up.address}, [limit_route("login", "/login", 4)],
            logging={"summary_interval": interval})
        s = self.start_sluice(config("0s"))
        c = self.client(self.port)

        def reload(interval, n):
            s.write_config(config(interval))
            s.send_signal(signal.SIGHUP)
            wait_until(lambda: s.stderr_text().count("reloaded ") == n, 5.0, message=f"reload {n}")

        # Without summaries: nothing is kept for the first one to come.
        self.assertEqual(self.send(c, "/login", 6), [200] * 4 + [429] * 2)
        s.wait_access(target="/login", status="429")
        reload(HOUR, 1)
        self.assertEqual(self.send(c, "/login", 1), [429])
        s.wait_access(target="/login", status="429", timeout=5.0)
        # Another interval: the old one's last line, partial, then the new one from there.
        reload("2h", 2)
        self.assertEqual(self.send(c, "/login", 2), [429] * 2)
        c.close()
        self.assertEqual(s.stop(signal.SIGTERM), 0)
        lines = [(line["interval"], line["requests"], line["limited"], line["top_limited"])
                 for line in parse_summaries(s.stdout_text(), "login")]
        self.assertEqual(lines, [("1h", 1, 1, "127.0.0.1:1"), ("2h", 2, 2, "127.0.0.1:2")], s.log_text())


if __name__ == "__main__":
    unittest.main()
