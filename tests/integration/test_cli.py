"""Command line: --version, --help, --check, start-up errors, signals."""

import os
import re
import signal
import socket
import tempfile
import textwrap
import unittest

from harness import LOOPBACK, Sluice, SluiceTestCase, free_port, proxy_config, run_cli


def write_temp(test, text, name="sluice.yaml"):
    d = tempfile.TemporaryDirectory(prefix="sluice-cli-")
    test.addCleanup(d.cleanup)
    path = os.path.join(d.name, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def problem_lines(output, path):
    """The `FILE:LINE:COL: message` lines for path, as (line, col, message)."""
    rx = re.compile(r"^" + re.escape(path) + r":(\d+):(\d+): (.+)$")
    found = []
    for line in output.splitlines():
        m = rx.match(line.strip())
        if m:
            found.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return found


# A valid config in which the line numbers matter; an error is introduced per test.
VALID = textwrap.dedent("""\
    server:
      listen: ["127.0.0.1:18080"]
      workers: 2
      header_timeout: 2s
    admin:
      listen: ""
    store:
      type: memory
    upstreams:
      app:
        servers: ["127.0.0.1:18081"]
        timeout: 5s
    routes:
      - name: main
        match:
          path_prefix: /
        upstream: app
    """)

# The full example from the contract (INTERFACE.md): every documented key.
FULL_EXAMPLE = textwrap.dedent("""\
    server:
      listen: ["0.0.0.0:8080"]
      workers: 0
      max_connections: 10000
      header_timeout: 10s
      idle_timeout: 60s
      max_header_bytes: 16384
      max_body_bytes: 10485760
      shutdown_timeout: 30s
    admin:
      listen: "127.0.0.1:9901"
    client_ip:
      trusted_proxies: []
    store:
      type: redis
      redis:
        address: "127.0.0.1:6379"
        username: ""
        password: ""
        database: 0
        timeout: 25ms
        key_prefix: "sluice"
      on_error: allow
    upstreams:
      app:
        servers: ["127.0.0.1:8081"]
        connect_timeout: 2s
        timeout: 30s
        max_idle: 64
    routes:
      - name: login
        match:
          path_prefix: /login
        upstream: app
        on_error: deny
        limits:
          - name: burst
            algorithm: token_bucket
            rate: 5
            per: 1s
            burst: 10
            key: [client_ip]
            shadow: false
          - name: minute
            algorithm: sliding_window
            limit: 30
            window: 1m
            key: [client_ip]
    responses:
      limited_status: 429
      headers: ietf
    logging:
      level: info
      access_log: stdout
      format: text
      summary_interval: 10s
    """)


class VersionHelpTest(unittest.TestCase):
    def test_version_exits_0_and_prints_a_version(self):
        r = run_cli(["--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout + r.stderr, r"\d+\.\d+")

    def test_help_exits_0_and_names_the_options(self):
        r = run_cli(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout + r.stderr
        self.assertIn("--check", out)
        self.assertIn("-c", out)

    def test_unknown_option_fails(self):
        r = run_cli(["--no-such-option"])
        self.assertNotEqual(r.returncode, 0)


class CheckTest(unittest.TestCase):
    def check(self, text):
        path = write_temp(self, text)
        r = run_cli(["--check", "-c", path])
        return path, r, r.stdout + r.stderr

    def test_valid_config_is_ok(self):
        path, r, out = self.check(VALID)
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("configuration OK", out)

    def test_full_contract_example_is_ok(self):
        # Validating must not need Redis or the ports: only the file is checked.
        path, r, out = self.check(FULL_EXAMPLE)
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("configuration OK", out)

    def test_check_does_not_bind_the_listen_port(self):
        with socket.socket() as held:
            held.bind((LOOPBACK, 0))
            held.listen(1)
            port = held.getsockname()[1]
            path, r, out = self.check(VALID.replace("127.0.0.1:18080", f"127.0.0.1:{port}"))
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("configuration OK", out)

    def test_unknown_key_is_reported_with_file_line_col(self):
        text = VALID.replace("  workers: 2\n", "  wokers: 2\n")  # line 3, column 3
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        problems = problem_lines(out, path)
        self.assertTrue(problems, f"no FILE:LINE:COL: line in:\n{out}")
        hits = [p for p in problems if "wokers" in p[2]]
        self.assertTrue(hits, f"unknown key not named:\n{out}")
        self.assertEqual((hits[0][0], hits[0][1]), (3, 3), out)
        self.assertNotIn("configuration OK", out)

    def test_unknown_key_inside_a_route(self):
        text = VALID.replace("      path_prefix: /\n", "      path_prefx: /\n")  # line 16, col 7
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        hits = [p for p in problem_lines(out, path) if "path_prefx" in p[2]]
        self.assertTrue(hits, out)
        self.assertEqual((hits[0][0], hits[0][1]), (16, 7), out)

    def test_bad_duration_is_reported_on_its_line(self):
        text = VALID.replace("header_timeout: 2s", "header_timeout: ten seconds")  # line 4
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        problems = problem_lines(out, path)
        self.assertIn(4, [p[0] for p in problems], out)

    def test_route_with_unknown_upstream_is_an_error(self):
        text = VALID.replace("    upstream: app\n", "    upstream: nope\n")  # line 17
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        problems = problem_lines(out, path)
        self.assertIn(17, [p[0] for p in problems], out)

    def test_every_problem_is_reported(self):
        text = (VALID.replace("  workers: 2\n", "  wokers: 2\n")                 # line 3
                .replace("header_timeout: 2s", "header_timeout: ten seconds")     # line 4
                .replace("    timeout: 5s\n", "    timeout: soon\n"))             # line 12
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        lines = sorted({p[0] for p in problem_lines(out, path)})
        for expected in (3, 4, 12):
            self.assertIn(expected, lines, out)

    def test_yaml_syntax_error(self):
        text = VALID.replace('listen: ["127.0.0.1:18080"]', 'listen: ["127.0.0.1:18080"')
        path, r, out = self.check(text)
        self.assertEqual(r.returncode, 1, out)
        problems = problem_lines(out, path)
        self.assertTrue(problems, f"no FILE:LINE:COL: line in:\n{out}")
        self.assertGreaterEqual(problems[0][0], 1)


class StartupTest(SluiceTestCase):
    def test_unreadable_config_file_exits_2(self):
        d = tempfile.TemporaryDirectory(prefix="sluice-cli-")
        self.addCleanup(d.cleanup)
        r = run_cli(["-c", os.path.join(d.name, "does-not-exist.yaml")])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertTrue((r.stdout + r.stderr).strip(), "no message printed")

    def test_listen_port_in_use_exits_2(self):
        with socket.socket() as held:
            held.bind((LOOPBACK, 0))
            held.listen(1)
            port = held.getsockname()[1]
            s = Sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"}))
            self.addCleanup(self._finish_sluice, s)
            s.start(wait=False)
            rc = s.wait(10)
        self.assertEqual(rc, 2, s.log_text())

    def test_invalid_config_at_start_exits_1(self):
        port = free_port()
        cfg = proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"})
        cfg["server"]["wokers"] = 2
        s = Sluice(cfg)
        self.addCleanup(self._finish_sluice, s)
        s.start(wait=False)
        self.assertEqual(s.wait(10), 1, s.log_text())

    def test_starts_logs_listen_address_and_stops_on_sigterm(self):
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"}))
        s.wait_log(re.escape(f"127.0.0.1:{port}"))
        self.assertEqual(s.stop(signal.SIGTERM), 0, s.log_text())

    def test_stops_on_sigint(self):
        port = free_port()
        s = self.start_sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"}))
        self.assertEqual(s.stop(signal.SIGINT), 0, s.log_text())


if __name__ == "__main__":
    unittest.main()
