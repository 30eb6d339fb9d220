"""Command line: --version, --help, --check, start-up errors, signals."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import unittest

from harness import (LOOPBACK, Sluice, SluiceTestCase, free_port, proxy_config, redis_store, run_cli, to_yaml,
                     wait_until)


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


class CheckResolveTest(unittest.TestCase):
    """--check resolves upstream names as the start does (nginx -t too); --no-resolve skips it."""

    def test_an_upstream_name_that_does_not_resolve_is_an_error_at_its_place(self):
        path = write_temp(self, VALID.replace('"127.0.0.1:18081"', '"no-such-host.invalid:18081"'))
        r = run_cli(["--check", "-c", path])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        found = problem_lines(r.stderr, path)
        self.assertEqual(len(found), 1, r.stderr)
        line, col, message = found[0]
        self.assertEqual((line, col), (11, 15), r.stderr)
        self.assertIn("upstream 'app' server 'no-such-host.invalid:18081' does not resolve", message)
        self.assertNotIn("configuration OK", r.stdout)
        # Where the name resolves only where sluice runs: --no-resolve.
        r = run_cli(["--check", "--no-resolve", "-c", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("configuration OK", r.stdout)

    def test_a_name_that_resolves_passes(self):
        path = write_temp(self, VALID.replace('"127.0.0.1:18081"', '"localhost:18081"'))
        r = run_cli(["--check", "-c", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class RedisMemoryPolicyTest(SluiceTestCase):
    """--check and the start-up log say when Redis may evict sluice's keys (a maxmemory-policy
    other than noeviction) or has no maxmemory; neither is an error."""

    def config(self, redis, port=None):
        port = port or free_port()
        cfg = proxy_config(port, {"app": "127.0.0.1:9"}, extra={"store": redis_store(redis)})
        path = write_temp(self, to_yaml(cfg))
        return path, cfg, port

    def test_an_evicting_policy_and_no_maxmemory_are_warned_about(self):
        redis = self.start_redis(["--maxmemory-policy", "allkeys-lru"])
        path, cfg, port = self.config(redis)
        r = run_cli(["--check", "-c", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("configuration OK", r.stdout)
        self.assertIn(f"sluice: warning: Redis at {redis.address} has maxmemory-policy allkeys-lru: when it reaches "
                      "maxmemory it may evict sluice's keys", r.stderr)
        self.assertIn(f"sluice: warning: Redis at {redis.address} has no maxmemory", r.stderr)
        # The same in the start-up log.
        s = self.start_sluice(cfg, port=port)
        s.wait_log(r"warning Redis at \S+ has maxmemory-policy allkeys-lru")
        # noeviction with a maxmemory: nothing to say.
        redis.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
        redis.command("CONFIG", "SET", "maxmemory", "100mb")
        r = run_cli(["--check", "-c", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("warning", r.stderr)

    def test_a_redis_that_is_down_is_a_note_not_an_error(self):
        path, _, _ = self.config(f"127.0.0.1:{free_port()}")
        r = run_cli(["--check", "-c", path])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("sluice: note: Redis's maxmemory-policy was not checked", r.stderr)
        r = run_cli(["--check", "--no-resolve", "-c", path])
        self.assertEqual((r.returncode, r.stderr), (0, ""))


class ReloadCommandTest(SluiceTestCase):
    """server.pid_file and `sluice --reload` (`-s reload`)."""

    def start_with_pid_file(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-pid-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.pid_file = os.path.join(self.dir, "sluice.pid")
        self.up_port = free_port()
        self.port = free_port()
        cfg = proxy_config(self.port, {"app": f"{LOOPBACK}:{self.up_port}"},
                           server={"pid_file": self.pid_file})
        s = self.start_sluice(cfg)
        return s, cfg

    def test_pid_file_is_written_at_start_and_removed_at_stop(self):
        s, _ = self.start_with_pid_file()
        with open(self.pid_file) as f:
            self.assertEqual(f.read(), f"{s.proc.pid}\n")
        self.assertEqual(s.stop(signal.SIGTERM), 0, s.log_text())
        self.assertFalse(os.path.exists(self.pid_file), "the pid file outlived sluice")

    def test_reload_signals_the_instance_in_the_pid_file(self):
        s, cfg = self.start_with_pid_file()
        cfg["routes"].append({"name": "added", "match": {"path_prefix": "/added"}, "upstream": "app"})
        s.write_config(cfg)
        for args in (["--reload"], ["-s", "reload"]):
            with self.subTest(args):
                before = s.stderr_text().count("reloaded ")
                r = run_cli([*args, "-c", s.config_path])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn(f"pid {s.proc.pid}", r.stdout)
                wait_until(lambda: s.stderr_text().count("reloaded ") > before, 5.0,
                           message="the reload in sluice's log")
        # A configuration with an error is not signalled at all.
        with open(s.config_path, "a") as f:
            f.write("nonsense_key: 1\n")
        before = s.stderr_text().count("reload")
        r = run_cli(["--reload", "-c", s.config_path])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("not reloaded", r.stderr)
        self.assertEqual(s.stderr_text().count("reload"), before, "sluice was signalled anyway")
        self.assertIsNone(s.proc.poll())

    def test_reload_refuses_a_file_other_than_the_one_the_instance_runs_with(self):
        # SIGHUP re-reads the file sluice was started with: asked to reload another (with the
        # same pid_file), it would have said so and applied nothing of it.
        s, cfg = self.start_with_pid_file()
        other = dict(cfg, routes=cfg["routes"] + [{"name": "added", "match": {"path_prefix": "/added"},
                                                   "upstream": "app"}])
        other_path = os.path.join(self.dir, "other.yaml")
        with open(other_path, "w") as f:
            f.write(to_yaml(other))
        before = s.stderr_text().count("reload")
        r = run_cli(["--reload", "-c", other_path])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"runs with {os.path.realpath(s.config_path)}", r.stderr)
        self.assertIn("nothing was signalled", r.stderr)
        self.assertEqual(s.stderr_text().count("reload"), before, "sluice was signalled anyway")
        # The same file by another spelling of its path is the same file.
        relative = os.path.relpath(s.config_path)
        r = run_cli(["--reload", "-c", relative])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_reload_refuses_a_stale_pid_file_and_a_config_without_one(self):
        other = subprocess.Popen(["sleep", "30"])
        self.addCleanup(lambda: (other.kill(), other.wait()))
        d = tempfile.mkdtemp(prefix="sluice-pid-")
        self.addCleanup(shutil.rmtree, d, True)
        pid_file = os.path.join(d, "sluice.pid")
        with open(pid_file, "w") as f:
            f.write(f"{other.pid}\n")
        path = write_temp(self, VALID.replace("  header_timeout: 2s\n",
                                              f"  header_timeout: 2s\n  pid_file: {pid_file}\n"))
        r = run_cli(["--reload", "-c", path])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("not sluice", r.stderr)
        self.assertIsNone(other.poll(), "a process that is not sluice got SIGHUP")
        os.remove(pid_file)
        r = run_cli(["--reload", "-c", path])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("cannot read a pid", r.stderr)
        r = run_cli(["--reload", "-c", write_temp(self, VALID)])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("needs server.pid_file", r.stderr)


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

    def test_every_port_in_use_is_named_without_library_internals(self):
        with socket.socket() as a, socket.socket() as b:
            for held in (a, b):
                held.bind((LOOPBACK, 0))
                held.listen(1)
            port, admin_port = a.getsockname()[1], b.getsockname()[1]
            s = Sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"},
                                    extra={"admin": {"listen": f"{LOOPBACK}:{admin_port}"}}))
            self.addCleanup(self._finish_sluice, s)
            s.start(wait=False)
            rc = s.wait(10)
        self.assertEqual(rc, 2, s.log_text())
        log = s.stderr_text()
        self.assertIn(f"cannot listen on 127.0.0.1:{port}: Address already in use", log)
        self.assertIn(f"cannot listen on 127.0.0.1:{admin_port} (admin): Address already in use", log)
        self.assertNotIn(".hpp", log)
        self.assertNotIn("boost", log.lower())

    def test_a_second_sluice_on_the_same_port_exits_2(self):
        # Workers bind with SO_REUSEPORT, which the kernel grants a second process of the
        # same user: without the check, two instances would split the connections.
        port = free_port()
        first = self.start_sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"}))
        s = Sluice(proxy_config(port, {"app": f"{LOOPBACK}:{free_port()}"}))
        self.addCleanup(self._finish_sluice, s)
        s.start(wait=False)
        self.assertEqual(s.wait(10), 2, s.log_text())
        self.assertIn(f"cannot listen on 127.0.0.1:{port}: Address already in use", s.stderr_text())
        self.assertIsNone(first.proc.poll())

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
