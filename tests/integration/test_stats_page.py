"""The live /stats page in a real browser: headless Chromium driven over the DevTools
protocol (cdp.py) reads the rendered DOM while traffic flows to two routes, one limited.

Chromium is required: without it the test fails (scripts/deps.sh installs it)."""

import os
import re
import shutil
import tempfile
import threading
import time
import unittest
import urllib.parse

from admin_api import stats_json, wait_admin
from cdp import Chromium
from harness import RawClient, SluiceTestCase, free_port, proxy_config, respond, wait_until
from harness import RedisServer

# Everything the test reads from the page, in one evaluation.
READ_PAGE = r"""(() => {
  const text = sel => { const e = document.querySelector(sel); return e ? e.textContent.trim() : null; };
  const rows = {};
  for (const tr of document.querySelectorAll('tr[data-route]')) {
    const cell = cls => { const td = tr.querySelector('td.' + cls); return td ? td.textContent.trim() : null; };
    rows[tr.dataset.route] = {};
    for (const cls of ['rps', 'fps', 'lps', 'pct', 'dps', 'sps', 'eps', 'total', 'top', 'limits', 'route']) rows[tr.dataset.route][cls] = cell(cls);
    rows[tr.dataset.route].links = [...tr.querySelectorAll('td.top a')].map(a => a.getAttribute('href'));
    rows[tr.dataset.route].refusing = [...tr.querySelectorAll('td.limits .refusing b')].map(b => b.textContent);
  }
  return {rows, store: text('#store'), uptime: text('#uptime'), connections: text('#connections'),
          waiting: text('#waiting'),
          updated: text('#updated'), title: document.title,
          width: document.documentElement.scrollWidth, viewport: window.innerWidth};
})()"""

RESOURCES = r"""[location.href,
  ...performance.getEntriesByType('navigation').map(e => e.name),
  ...performance.getEntriesByType('resource').map(e => e.name)]"""


def number(text):
    """The leading number of a cell ("19.4 %" -> 19.4); AssertionError when there is none."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", text or "")
    if not m:
        raise AssertionError(f"no number in cell text {text!r}")
    return float(m.group(1))


class StatsPageTest(SluiceTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-stats-page-")
        if not os.environ.get("SLUICE_KEEP_TMP"):
            self.addCleanup(shutil.rmtree, self.tmp, True)
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.cleanup)
        up = self.start_upstream(respond(200, b"ok"))
        self.port, self.admin = free_port(), free_port()
        routes = [
            {"name": "login", "match": {"path_prefix": "/login"}, "upstream": "app",
             "limits": [{"name": "burst", "algorithm": "token_bucket", "rate": 5, "per": "1s",
                         "burst": 5, "key": ["client_ip"]}]},
            {"name": "browse", "match": {"path_prefix": "/browse"}, "upstream": "app"},
            # Shaped to 10/s: the shaping client below sends faster, so its requests wait.
            {"name": "shaped", "match": {"path_prefix": "/shaped"}, "upstream": "app",
             "limits": [{"name": "shape", "algorithm": "leaky_bucket", "rate": 10, "per": "1s",
                         "burst": 40, "key": []}]},
        ]
        self.sluice = self.start_sluice(proxy_config(
            self.port, {"app": up.address}, routes,
            logging={"level": "info", "summary_interval": "0s"},
            extra={"admin": {"listen": f"127.0.0.1:{self.admin}"},
                   # A decision that misses its deadline counts as a store error, and the
                   # page must show none while Redis is up: the deadline leaves room for a
                   # loaded machine (Chromium starting while other tests run). Stopping Redis
                   # below fails decisions at once, without waiting for it.
                   "store": {"type": "redis", "on_error": "allow",
                             "redis": {"address": self.redis.address, "timeout": "1s"}}}))
        wait_admin(self.admin)
        wait_until(lambda: stats_json(self.admin)["store_up"], 5.0, message="store up")

        # Steady traffic to both routes until the test ends (~25 requests/s each).
        self.stop_traffic = threading.Event()
        self.traffic_errors = []
        self.traffic = threading.Thread(target=self.generate_traffic, daemon=True)
        self.traffic.start()
        self.addCleanup(self.traffic.join, 10)
        self.shaping = threading.Thread(target=self.generate_shaped_traffic, daemon=True)
        self.shaping.start()
        self.addCleanup(self.shaping.join, 10)
        self.addCleanup(self.stop_traffic.set)

    def generate_traffic(self):
        client = None
        while not self.stop_traffic.is_set():
            for target in ("/login", "/browse"):
                try:
                    if client is None:
                        client = RawClient(self.port, timeout=5.0)
                    r = client.request("GET", target)
                    if r.status not in (200, 429):
                        self.traffic_errors.append(f"{target}: {r.status}")
                except Exception as e:
                    self.traffic_errors.append(f"{target}: {type(e).__name__}: {e}")
                    if client is not None:
                        client.close()
                    client = None
            self.stop_traffic.wait(0.04)
        if client is not None:
            client.close()

    def generate_shaped_traffic(self):
        # Three connections, each sending its next request as soon as the last is answered:
        # about 10/s get through, each after waiting its turn.
        def one_connection():
            client = None
            while not self.stop_traffic.is_set():
                try:
                    if client is None:
                        client = RawClient(self.port, timeout=10.0)
                    r = client.request("GET", "/shaped")
                    if r.status != 200:
                        self.traffic_errors.append(f"/shaped: {r.status}")
                except Exception as e:
                    self.traffic_errors.append(f"/shaped: {type(e).__name__}: {e}")
                    if client is not None:
                        client.close()
                    client = None
            if client is not None:
                client.close()
        threads = [threading.Thread(target=one_connection, daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)

    def read_page(self, page):
        return page.evaluate(READ_PAGE)

    def wait_page(self, page, predicate, timeout, message):
        box = {}

        def check():
            box["state"] = self.read_page(page)
            return predicate(box["state"])
        try:
            wait_until(check, timeout, interval=0.25, message=message)
        except AssertionError as e:
            raise AssertionError(f"{e}; the page shows {box.get('state')}") from None
        return box["state"]

    def test_live_page_in_headless_chromium(self):
        browser = Chromium(self.tmp)
        self.addCleanup(browser.stop)
        browser.start()
        page = browser.cdp().new_page()
        # A 1280 px wide window: the page must fit it without scrolling sideways.
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        page_url = f"http://127.0.0.1:{self.admin}/stats"
        page.navigate(page_url)
        # One request no route matches: its row is named and explained, not "-".
        self.assertEqual(RawClient(self.port).request("GET", "/nowhere").status, 404)

        # Rates need two polls of stats.json (one second apart) to be non-zero.
        def both_rows_live(state):
            rows = state["rows"]
            return all(r in rows and number(rows[r]["rps"]) > 0 for r in ("login", "browse"))
        first = self.wait_page(page, both_rows_live, 15.0,
                               "rows for login and browse with requests/s > 0")
        login, browse = first["rows"]["login"], first["rows"]["browse"]
        self.assertRegex(login["pct"], r"^\d+(\.\d+)? ?%$")
        self.assertGreater(number(login["pct"]), 0, f"the limited route shows 0 % limited: {login}")
        self.assertGreater(number(login["lps"]), 0, login)
        self.assertGreater(number(login["fps"]), 0, login)
        self.assertEqual(number(browse["pct"]), 0, browse)
        self.assertEqual(number(browse["lps"]), 0, browse)
        self.assertGreater(number(browse["fps"]), 0, browse)
        for cell in ("sps", "eps", "dps"):
            self.assertEqual(number(login[cell]), 0, f"{cell}: {login}")
        # The shaped route: requests held back and then forwarded, none limited.
        shaped = self.wait_page(page, lambda s: "shaped" in s["rows"] and number(s["rows"]["shaped"]["dps"]) > 0,
                                10.0, "the shaped row with delayed/s > 0")
        row = shaped["rows"]["shaped"]
        self.assertEqual(number(row["lps"]), 0, row)
        self.assertGreater(number(row["fps"]), 0, row)
        self.assertRegex(shaped["waiting"], r"^\d+$")
        self.assertRegex(first["store"], r"\bup\b")
        self.assertNotIn("down", first["store"])
        self.assertNotIn(first["uptime"], (None, "", "-"))
        self.assertRegex(first["connections"], r"^\d+$")
        self.assertGreaterEqual(int(first["connections"]), 1, "the traffic connection is open")
        self.assertNotIn(first["updated"], (None, "", "never"))

        # The clients limited most in the last minute (collected every 5 s): this test's
        # traffic comes from 127.0.0.1, limited on login only.
        tops = self.wait_page(page, lambda s: (s["rows"]["login"]["top"] or "").startswith("127.0.0.1 ("), 12.0,
                              "the login row naming 127.0.0.1 as the most limited client")
        self.assertRegex(tops["rows"]["login"]["top"], r"^127\.0\.0\.1 \(\d+\)( left: burst \d+)?$")
        self.assertEqual(tops["rows"]["login"]["links"], ["limits?route=login&client=127.0.0.1"])
        self.assertEqual(tops["rows"]["browse"]["top"], "-")
        # What the client has left, from its /limits look-up (refreshed every 5 s).
        left = self.wait_page(page, lambda s: " left: burst " in (s["rows"]["login"]["top"] or ""), 12.0,
                              "the quota 127.0.0.1 has left on login")
        self.assertRegex(left["rows"]["login"]["top"], r"^127\.0\.0\.1 \(\d+\) left: burst [0-5]$")
        # Which limit refuses, with its settings; the route without limits says so.
        refusing = self.wait_page(page, lambda s: s["rows"]["login"]["refusing"] == ["burst"], 5.0,
                                  "the burst limit of login shown as refusing")
        self.assertRegex(refusing["rows"]["login"]["limits"],
                         r"^burst 5 per 1s, burst 5, per client_ip: \d+(\.\d+)?/s$")
        self.assertEqual(refusing["rows"]["browse"]["limits"], "none")
        self.assertEqual(refusing["rows"]["shaped"]["refusing"], [], "the shaped route refuses nothing")
        self.assertRegex(refusing["rows"]["shaped"]["limits"],
                         r"^shape 10 per 1s, burst 40, one counter for all: 0\.00/s$")
        # The request no route matched, named for what it is; the page fits 1280 px.
        self.assertEqual(refusing["rows"]["-"]["route"], "(no route)")
        self.assertLessEqual(refusing["width"], refusing["viewport"],
                             f"the page is {refusing['width']} px wide in a {refusing['viewport']} px window")
        self.assertEqual(refusing["viewport"], 1280)
        limits = {r["route"]: r["limits"] for r in stats_json(self.admin)["routes"]}
        self.assertEqual([(l["name"], l["algorithm"], l["setting"]) for l in limits["login"]],
                         [("burst", "token_bucket", "5 per 1s, burst 5, per client_ip")])
        self.assertGreater(limits["login"][0]["limited"], 0)
        self.assertEqual(limits["browse"], [])
        top = {r["route"]: r["top_limited"] for r in stats_json(self.admin)["routes"]}
        self.assertEqual([client for client, n in top["login"]], ["127.0.0.1"])
        self.assertGreater(top["login"][0][1], 0)
        self.assertEqual(top["browse"], [])

        # Totals are the cumulative request counts; they move while the page is open.
        time.sleep(2.5)
        second = self.read_page(page)
        for route in ("login", "browse"):
            with self.subTest(route=route):
                t1, t2 = int(first["rows"][route]["total"]), int(second["rows"][route]["total"])
                self.assertGreater(t2, t1, f"{route}: total did not increase in 2.5 s")
                served = {r["route"]: r["requests"] for r in stats_json(self.admin)["routes"]}
                self.assertLessEqual(t2, served[route], "the page shows more than was served")
        self.assertNotEqual(second["updated"], first["updated"], "#updated did not change")

        # Self-contained: the page and everything it loaded came from the admin port.
        origin = f"127.0.0.1:{self.admin}"
        loaded = page.evaluate(RESOURCES)
        requested = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
        self.assertIn(page_url, requested)
        self.assertTrue(any(u.split("?")[0].endswith("/stats.json") for u in loaded), loaded)
        for url in set(loaded + requested):
            parts = urllib.parse.urlsplit(url)
            self.assertEqual((parts.scheme, parts.netloc), ("http", origin),
                             f"the page loaded {url}: not from the admin port")
        self.assertEqual(page.events("Runtime.exceptionThrown"), [], "JavaScript errors")

        shot = os.path.join(self.tmp, "stats.png")
        data = page.screenshot(shot)
        self.assertTrue(data.startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertGreater(len(data), 5000)
        print(f"\nscreenshot of /stats: {shot}"
              + ("" if os.environ.get("SLUICE_KEEP_TMP") else " (removed after the test; "
                 "set SLUICE_KEEP_TMP=1 to keep it)"), flush=True)

        # The store goes away: the page says so, and store errors show up in the rates.
        self.redis.stop()
        down = self.wait_page(page, lambda s: re.search(r"\bdown\b", s["store"] or ""), 6.0,
                              "#store showing down")
        self.assertNotRegex(down["store"], r"\bup\b")
        self.wait_page(page, lambda s: number(s["rows"]["login"]["eps"]) > 0, 5.0,
                       "store errors/s > 0 on login")
        page.screenshot(os.path.join(self.tmp, "stats-store-down.png"))

        self.stop_traffic.set()
        self.traffic.join(10)
        self.shaping.join(15)
        self.assertEqual(self.traffic_errors, [])


if __name__ == "__main__":
    unittest.main()
