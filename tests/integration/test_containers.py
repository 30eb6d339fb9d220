"""Container and systemd files: Dockerfile, .dockerignore, docker-compose.yml,
conf/sluice.docker.yaml, conf/sluice.service, scripts/container_healthcheck.sh.

No Docker engine is needed: `docker-compose config` only reads and validates the compose
file, and `systemd-analyze verify` checks the unit offline. Both tools are installed by
scripts/deps.sh (packages docker-compose and systemd), so a missing one fails the test
rather than skipping it. The tests that run the sluice binary (`--check` of the container
config, the health check script against a live admin port, the runtime libraries of the
image) need SLUICE_BIN and are skipped without it, as every other integration test.
"""

import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import unittest

from harness import (LOOPBACK, SluiceTestCase, free_port, proxy_config, run_cli, sluice_binary,
                     wait_until)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPOSE_FILE = "docker-compose.yml"
DOCKER_CONFIG = "conf/sluice.docker.yaml"
CLUSTER_COMPOSE_FILE = "docker-compose.cluster.yml"
CLUSTER_DOCKER_CONFIG = "conf/sluice.cluster.docker.yaml"
CLUSTER_NODES = [f"redis-{n}" for n in range(1, 7)]
EXAMPLE_CONFIG = "conf/sluice.yaml"
UNIT_FILE = "conf/sluice.service"
HEALTHCHECK_SCRIPT = "scripts/container_healthcheck.sh"
SERVICES = {"redis", "backend", "sluice"}
# Shared libraries debian:bookworm-slim already has (apt itself depends on them).
SLIM_BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# Sanitizer runtimes (a SLUICE_BIN from an ASan/UBSan build): never part of the image.
SANITIZER_PACKAGE = re.compile(r"^lib(a|ub|t|l|hwa)san\d+$")


def read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


def required_tool(test, name, package):
    path = shutil.which(name)
    if not path:
        test.fail(f"{name} is not installed: scripts/deps.sh installs it (Debian package "
                  f"{package}); run `make test` or `bash scripts/deps.sh`")
    return path


# ---------------------------------------------------------------------------------------
# Small parsers: durations, indented YAML blocks, Dockerfile instructions, unit files

_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
                   "h": 3600.0, "d": 86400.0}


def seconds(text):
    """'40s', '1m30s', '250ms', '2min', '40' (bare number: seconds, as systemd reads it)."""
    text = text.strip().strip("'\"").replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([a-z]+)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _depth(line):
    return len(line) - len(line.lstrip(" "))


def _top_depth(lines):
    depths = [_depth(line) for line in lines if line.strip()]
    return min(depths) if depths else 0


def yaml_block(text, *keys):
    """The lines under a nested mapping key of block-style YAML (as docker-compose config
    prints it), e.g. yaml_block(text, "services", "sluice", "depends_on"); [] if absent.
    Keys are looked up at the top level of the block found so far only."""
    lines = text.splitlines()
    for key in keys:
        top = _top_depth(lines)
        start = next((i for i, line in enumerate(lines)
                      if _depth(line) == top and line.strip() == f"{key}:"), None)
        if start is None:
            return []
        block = []
        for line in lines[start + 1:]:
            # A block list may sit at its key's own indentation ("ports:" / "- 8080:8080").
            if line.strip() and (_depth(line) < top or
                                 (_depth(line) == top and not line.lstrip().startswith("- "))):
                break
            block.append(line)
        lines = block
    return lines


def yaml_scalar(block_lines, key):
    """The value of `key: value` at the top level of the block lines, or None."""
    top = _top_depth(block_lines)
    for line in block_lines:
        m = re.match(r"(\s*)" + re.escape(key) + r":\s+(.*?)\s*$", line)
        if m and len(m.group(1)) == top:
            return m.group(2).strip("'\"")
    return None


def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, args = current.strip().partition(" ")
        out.append((word.upper(), args.strip()))
        current = ""
    return out


def unit_directives(text):
    """{section: [(key, value), ...]} of a systemd unit file."""
    sections, section = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            sections.setdefault(section, [])
            continue
        key, _, value = line.partition("=")
        sections.setdefault(section, []).append((key.strip(), value.strip()))
    return sections


def shutdown_timeout_of(rel):
    m = re.search(r"^\s+shutdown_timeout:\s*(\S+)", read(rel), re.M)
    return seconds(m.group(1)) if m else 30.0  # the documented default


def without_comments(text):
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\s+#.*$", "", line).rstrip()
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    return lines


# ---------------------------------------------------------------------------------------
# docker-compose.yml

class ComposeTest(unittest.TestCase):
    FILE = COMPOSE_FILE

    def compose(self, *args):
        exe = required_tool(self, "docker-compose", "docker-compose")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("COMPOSE_", "DOCKER_"))}
        return subprocess.run([exe, "-f", self.FILE, *args], cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=120)

    def config_text(self):
        r = self.compose("config")
        self.assertEqual(r.returncode, 0, f"docker-compose config failed:\n{r.stderr}")
        return r.stdout

    def test_config_is_valid(self):
        r = self.compose("config", "-q")
        self.assertEqual(r.returncode, 0,
                         f"docker-compose -f {COMPOSE_FILE} config -q failed:\n{r.stderr}")

    def test_three_services(self):
        r = self.compose("config", "--services")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(set(r.stdout.split()), SERVICES)

    def test_sluice_waits_for_healthy_redis_and_backend(self):
        depends = yaml_block(self.config_text(), "services", "sluice", "depends_on")
        for service in ("redis", "backend"):
            entry = yaml_block("\n".join(depends), service)
            self.assertTrue(entry, f"sluice does not depend on {service}: {depends}")
            self.assertEqual(yaml_scalar(entry, "condition"), "service_healthy",
                             f"sluice must wait until {service} is healthy")

    def test_every_service_has_a_healthcheck(self):
        text = self.config_text()
        for service in SERVICES:
            check = yaml_block(text, "services", service, "healthcheck")
            self.assertTrue(yaml_block("\n".join(check), "test"),
                            f"{service} has no healthcheck test: {check}")
        sluice_check = "\n".join(yaml_block(text, "services", "sluice", "healthcheck", "test"))
        self.assertIn("sluice-healthcheck", sluice_check)
        self.assertIn("127.0.0.1:9901", sluice_check)
        self.assertIn("redis-cli", "\n".join(yaml_block(text, "services", "redis", "healthcheck")))

    def test_sluice_build_ports_config_and_stop(self):
        text = self.config_text()
        sluice = yaml_block(text, "services", "sluice")
        build = yaml_block("\n".join(sluice), "build")
        self.assertEqual(os.path.realpath(yaml_scalar(build, "context")), os.path.realpath(REPO))

        ports = "\n".join(yaml_block("\n".join(sluice), "ports"))
        self.assertRegex(ports, r"published: 8080\s+target: 8080|- ['\"]?8080:8080",
                         "the proxy port 8080 is published")
        self.assertRegex(ports, r"127\.0\.0\.1:9901:9901",
                         "the admin port is published on the host's loopback only")
        self.assertNotRegex(ports, r"(^|\s|-)(0\.0\.0\.0:)?9901:9901", "admin published widely")

        volumes = "\n".join(yaml_block("\n".join(sluice), "volumes"))
        self.assertRegex(volumes, re.escape(os.path.join(REPO, DOCKER_CONFIG))
                         + r":/etc/sluice/sluice\.yaml:ro")

        grace = yaml_scalar(sluice, "stop_grace_period")
        self.assertIsNotNone(grace, "sluice needs a stop_grace_period")
        self.assertGreater(seconds(grace), shutdown_timeout_of(DOCKER_CONFIG),
                           "stop_grace_period must be longer than server.shutdown_timeout")
        signal_name = yaml_scalar(sluice, "stop_signal")
        self.assertIn(signal_name, (None, "SIGTERM"))

    def test_backend_runs_the_demo_backend(self):
        text = self.config_text()
        backend = "\n".join(yaml_block(text, "services", "backend"))
        self.assertIn("python:3.11-slim", backend)
        self.assertIn("/app/demo_backend.py", backend)
        self.assertIn("0.0.0.0:8081", backend)
        self.assertRegex(backend, re.escape(os.path.join(REPO, "scripts/demo_backend.py"))
                         + r":/app/demo_backend\.py:ro")
        self.assertIn("image: redis:7", "\n".join(yaml_block(text, "services", "redis")))

    def test_bind_mount_sources_are_files_in_the_repository(self):
        # Docker creates a missing bind source as an empty directory: catch typos here.
        text = self.config_text()
        for service in SERVICES:
            for line in yaml_block(text, "services", service, "volumes"):
                m = re.match(r"\s*- (/[^:]+):", line)
                if m:
                    self.assertTrue(os.path.isfile(m.group(1)),
                                    f"{service}: bind mount source {m.group(1)} is not a file")


# ---------------------------------------------------------------------------------------
# docker-compose.cluster.yml: sluice against a Redis Cluster of 3 masters and 3 replicas

class ClusterComposeTest(ComposeTest):
    FILE = CLUSTER_COMPOSE_FILE

    def test_config_is_valid(self):
        r = self.compose("config", "-q")
        self.assertEqual(r.returncode, 0,
                         f"docker-compose -f {CLUSTER_COMPOSE_FILE} config -q failed:\n{r.stderr}")

    def test_three_services(self):  # the inherited name; here: six nodes, the init, backend, sluice
        r = self.compose("config", "--services")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(set(r.stdout.split()),
                         set(CLUSTER_NODES) | {"redis-cluster-init", "backend", "sluice"})

    def test_sluice_waits_for_healthy_redis_and_backend(self):
        text = self.config_text()
        depends = "\n".join(yaml_block(text, "services", "sluice", "depends_on"))
        self.assertEqual(yaml_scalar(yaml_block(depends, "redis-cluster-init"), "condition"),
                         "service_completed_successfully", "sluice starts once the cluster is made")
        self.assertEqual(yaml_scalar(yaml_block(depends, "backend"), "condition"), "service_healthy")
        init = "\n".join(yaml_block(text, "services", "redis-cluster-init", "depends_on"))
        for node in CLUSTER_NODES:
            self.assertEqual(yaml_scalar(yaml_block(init, node), "condition"), "service_healthy",
                             f"the init must wait for {node}")

    def test_every_service_has_a_healthcheck(self):
        text = self.config_text()
        for service in CLUSTER_NODES + ["backend", "sluice"]:
            check = yaml_block(text, "services", service, "healthcheck")
            self.assertTrue(yaml_block("\n".join(check), "test"), f"{service} has no healthcheck: {check}")

    def test_nodes_run_in_cluster_mode_and_the_init_makes_three_masters_with_replicas(self):
        text = self.config_text()
        for node in CLUSTER_NODES:
            words = [line.strip().removeprefix("- ").strip("'\"") for line in
                     yaml_block(text, "services", node, "command")]
            self.assertIn("--cluster-enabled", words, node)
            self.assertEqual(words[words.index("--cluster-enabled") + 1], "yes", node)
            self.assertIn("image: redis:7", "\n".join(yaml_block(text, "services", node)))
        init = read(CLUSTER_COMPOSE_FILE)
        self.assertIn("--cluster create", init)
        self.assertIn("--cluster-replicas 1", init)
        self.assertIn("cluster_state:ok", init, "the init must be idempotent and wait for a healthy cluster")

    def test_sluice_build_ports_config_and_stop(self):
        sluice = yaml_block(self.config_text(), "services", "sluice")
        volumes = "\n".join(yaml_block("\n".join(sluice), "volumes"))
        self.assertRegex(volumes, re.escape(os.path.join(REPO, CLUSTER_DOCKER_CONFIG))
                         + r":/etc/sluice/sluice\.yaml:ro")
        ports = "\n".join(yaml_block("\n".join(sluice), "ports"))
        self.assertRegex(ports, r"127\.0\.0\.1:9901:9901")
        self.assertGreater(seconds(yaml_scalar(sluice, "stop_grace_period")),
                           shutdown_timeout_of(CLUSTER_DOCKER_CONFIG))

    def test_backend_runs_the_demo_backend(self):
        backend = "\n".join(yaml_block(self.config_text(), "services", "backend"))
        self.assertIn("/app/demo_backend.py", backend)

    def test_bind_mount_sources_are_files_in_the_repository(self):
        text = self.config_text()
        for service in ["backend", "sluice"]:
            for line in yaml_block(text, "services", service, "volumes"):
                m = re.match(r"\s*- (/[^:]+):", line)
                if m:
                    self.assertTrue(os.path.isfile(m.group(1)), f"{service}: {m.group(1)} is not a file")

    def test_its_config_is_checked_and_names_every_node(self):
        # The upstream is the compose service "backend": a name only the compose network resolves.
        r = run_cli(["--check", "--no-resolve", "-c", os.path.join(REPO, CLUSTER_DOCKER_CONFIG)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = read(CLUSTER_DOCKER_CONFIG)
        self.assertRegex(text, r"(?m)^    mode: cluster")
        for node in CLUSTER_NODES:
            self.assertIn(f'"{node}:6379"', text)

        def routes(rel):
            t = read(rel)
            return without_comments(t[t.index("\nroutes:"):t.index("\nresponses:")])
        self.assertEqual(routes(CLUSTER_DOCKER_CONFIG), routes(EXAMPLE_CONFIG))


# ---------------------------------------------------------------------------------------
# Dockerfile and .dockerignore

class DockerfileTest(unittest.TestCase):

    def setUp(self):
        self.instructions = dockerfile_instructions(read("Dockerfile"))

    def args_of(self, word):
        return [args for w, args in self.instructions if w == word]

    def runtime_stage(self):
        last_from = max(i for i, (w, _) in enumerate(self.instructions) if w == "FROM")
        return self.instructions[last_from:]

    def test_two_stages(self):
        froms = self.args_of("FROM")
        self.assertEqual(len(froms), 2, froms)
        self.assertRegex(froms[0], r"^debian:bookworm\s+AS\s+build$")
        self.assertEqual(froms[1], "debian:bookworm-slim")
        self.assertIn("--from=build /src/build/sluice /usr/local/bin/sluice", self.args_of("COPY"))

    def test_release_build_without_tests(self):
        run = " ".join(self.args_of("RUN"))
        self.assertIn("-DCMAKE_BUILD_TYPE=Release", run)
        self.assertIn("-DBUILD_TESTING=OFF", run)
        for args in self.args_of("RUN"):
            if "apt-get install" in args:
                self.assertIn("--no-install-recommends", args)
                self.assertIn("rm -rf /var/lib/apt/lists/*", args)

    def test_runtime_settings(self):
        stage = self.runtime_stage()
        users = [args for w, args in stage if w == "USER"]
        self.assertTrue(users, "the runtime stage sets no USER (it would run as root)")
        user = users[-1].split(":")[0]
        self.assertNotIn(user, ("root", "0"), "the runtime USER must not be root")
        healthchecks = [args for w, args in stage if w == "HEALTHCHECK"]
        self.assertEqual(len(healthchecks), 1)
        self.assertIn("sluice-healthcheck", healthchecks[0])
        self.assertIn("127.0.0.1:9901", healthchecks[0])
        self.assertEqual(self.args_of("EXPOSE"), ["8080 9901"])
        self.assertEqual(self.args_of("STOPSIGNAL"), ["SIGTERM"])
        self.assertEqual(json.loads(self.args_of("ENTRYPOINT")[-1]), ["/usr/local/bin/sluice"])
        self.assertEqual(json.loads(self.args_of("CMD")[-1]), ["-c", "/etc/sluice/sluice.yaml"])

    def copy_sources(self):
        for args in self.args_of("COPY"):
            words = [w for w in args.split() if not w.startswith("--")]
            if args.startswith("--from="):
                continue
            yield from words[:-1]

    def test_copied_files_exist_and_are_not_ignored(self):
        patterns = [p.strip() for p in read(".dockerignore").splitlines()
                    if p.strip() and not p.strip().startswith("#")]
        self.assertFalse([p for p in patterns if p.startswith("!")],
                         "this check does not understand ! exceptions")
        sources = list(self.copy_sources())
        self.assertIn("src/", sources)
        for src in sources:
            path = os.path.join(REPO, src)
            self.assertTrue(os.path.exists(path), f"COPY source {src} does not exist")
            name = src.rstrip("/")
            for p in patterns:
                p = p.rstrip("/")
                hit = fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, p.replace("**/", "")) \
                    or name.startswith(p + "/")
                self.assertFalse(hit, f".dockerignore pattern {p!r} excludes COPY source {src}")
        # The build context leaves out build trees and Git.
        self.assertIn(".git", patterns)
        self.assertTrue(any(fnmatch.fnmatch("build", p.rstrip("/")) for p in patterns))

    def test_runtime_packages_cover_the_binary(self):
        """Every shared library the built binary links comes from a package the runtime
        stage installs (or that bookworm-slim has anyway)."""
        binary = sluice_binary()
        installed = set()
        for w, args in self.runtime_stage():
            if w == "RUN" and "apt-get install" in args:
                segment = args.split("apt-get install", 1)[1].split("&&")[0]
                installed |= {t for t in segment.split() if not t.startswith("-")}
        self.assertTrue(installed, "the runtime stage installs no packages")
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
        self.assertEqual(ldd.returncode, 0, ldd.stderr)
        needed = set()
        for line in ldd.stdout.splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if not m:
                continue
            package = self.owning_package(m.group(2))
            self.assertIsNotNone(package, f"no Debian package owns {m.group(2)} ({m.group(1)})")
            needed.add(package)
        needed = {p for p in needed if not SANITIZER_PACKAGE.match(p)}
        missing = needed - installed - SLIM_BASE_PACKAGES
        self.assertFalse(missing, f"the runtime stage lacks {sorted(missing)} "
                                  f"(the binary links {sorted(needed)})")
        self.assertFalse({p for p in installed if p.endswith("-dev")},
                         "the runtime stage installs -dev packages")

    @staticmethod
    def owning_package(path):
        real = os.path.realpath(path)
        candidates = [path, real]
        for p in (path, real):  # merged /usr: dpkg knows one of the two spellings
            candidates.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
        for candidate in candidates:
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True,
                               timeout=30)
            if r.returncode == 0 and ":" in r.stdout:
                return r.stdout.split(":", 1)[0].strip()
        return None


# ---------------------------------------------------------------------------------------
# conf/sluice.docker.yaml

class DockerConfigTest(unittest.TestCase):

    def test_addresses_for_the_compose_network(self):
        text = read(DOCKER_CONFIG)
        self.assertRegex(text, r'(?m)^    address: "redis:6379"')
        self.assertRegex(text, r'(?m)^    servers: \["backend:8081"\]')
        self.assertRegex(text, r'(?m)^  listen: "0\.0\.0\.0:9901"')
        self.assertRegex(text, r'(?m)^  listen: \["0\.0\.0\.0:8080"\]')

    def test_same_routes_as_the_example(self):
        def routes(rel):
            text = read(rel)
            return without_comments(text[text.index("\nroutes:"):text.index("\nresponses:")])
        self.assertEqual(routes(DOCKER_CONFIG), routes(EXAMPLE_CONFIG))

    def test_check_accepts_it(self):
        # As the image's build runs it: --no-resolve, since the upstream "backend" is a name
        # only the compose network resolves (--check alone resolves upstream names).
        r = run_cli(["--check", "--no-resolve", "-c", os.path.join(REPO, DOCKER_CONFIG)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("configuration OK", r.stdout)


# ---------------------------------------------------------------------------------------
# scripts/container_healthcheck.sh (the image's HEALTHCHECK), against a live admin port

class HealthcheckScriptTest(SluiceTestCase):

    def run_check(self, address):
        return subprocess.run(["bash", os.path.join(REPO, HEALTHCHECK_SCRIPT), address],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=20)

    @staticmethod
    def accepts(port):
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return True
        except OSError:
            return False

    def test_healthy_only_on_admin_healthz(self):
        port, admin, unused = free_port(), free_port(), free_port()
        self.start_sluice(proxy_config(port, {"app": f"{LOOPBACK}:{unused}"},
                                       extra={"admin": {"listen": f"{LOOPBACK}:{admin}"}}))
        # The proxy port accepts first (start_sluice waits for it); then the admin port.
        wait_until(lambda: self.accepts(admin), 10.0, message=f"admin port {admin} accepts")
        r = self.run_check(f"{LOOPBACK}:{admin}")
        self.assertEqual(r.returncode, 0, r.stderr)
        # The proxy port answers /healthz with the upstream's failure (502): unhealthy.
        r = self.run_check(f"{LOOPBACK}:{port}")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("502", r.stderr)
        # Nothing listens: unhealthy.
        r = self.run_check(f"{LOOPBACK}:{unused}")
        self.assertEqual(r.returncode, 1, r.stderr)


# ---------------------------------------------------------------------------------------
# conf/sluice.service

class SystemdUnitTest(unittest.TestCase):

    def setUp(self):
        self.unit = unit_directives(read(UNIT_FILE))

    def values(self, section, key):
        return [v for k, v in self.unit.get(section, []) if k == key]

    def one(self, section, key):
        vals = self.values(section, key)
        self.assertEqual(len(vals), 1, f"[{section}] {key}: {vals}")
        return vals[0]

    def test_start_reload_stop(self):
        self.assertEqual(self.one("Service", "Type"), "simple")
        start = self.one("Service", "ExecStart").split()
        self.assertEqual(start[0], "/usr/local/bin/sluice")
        self.assertIn("-c", start)
        self.assertEqual(start[start.index("-c") + 1], "/etc/sluice/sluice.yaml")
        reload = self.one("Service", "ExecReload")
        self.assertIn("-HUP", reload)
        self.assertIn("$MAINPID", reload)
        self.assertEqual(self.one("Service", "KillSignal"), "SIGTERM")
        self.assertGreater(seconds(self.one("Service", "TimeoutStopSec")),
                           shutdown_timeout_of(EXAMPLE_CONFIG),
                           "TimeoutStopSec must be longer than server.shutdown_timeout")
        self.assertEqual(self.one("Service", "Restart"), "on-failure")

    def test_ordering(self):
        after = " ".join(self.values("Unit", "After")).split()
        self.assertIn("network-online.target", after)
        self.assertIn("redis-server.service", after)
        self.assertIn("network-online.target", " ".join(self.values("Unit", "Wants")).split())
        self.assertIn("multi-user.target", self.values("Install", "WantedBy"))

    def test_unprivileged_and_hardened(self):
        dynamic = self.values("Service", "DynamicUser") == ["yes"]
        user = self.values("Service", "User")
        self.assertTrue(dynamic or (user and user[-1] not in ("root", "0")),
                        "the unit needs DynamicUser=yes or a dedicated User=")
        for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                           ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                           ("LimitNOFILE", "65536")):
            self.assertEqual(self.one("Service", key), value)
        self.assertEqual(self.values("Service", "AmbientCapabilities"), [],
                         "no capabilities are needed for the default ports (8080, 9901)")

    def test_systemd_analyze_verify(self):
        exe = required_tool(self, "systemd-analyze", "systemd")
        # verify insists that ExecStart's program exists: point it at one that does.
        program = os.environ.get("SLUICE_BIN") or shutil.which("true")
        with tempfile.TemporaryDirectory(prefix="unit-") as d:
            path = os.path.join(d, "sluice.service")
            with open(path, "w", encoding="utf-8") as f:
                f.write(read(UNIT_FILE).replace("/usr/local/bin/sluice",
                                                os.path.abspath(program)))
            r = subprocess.run([exe, "verify", "--man=no", path], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=60)
        output = (r.stdout + r.stderr).strip()
        # Lines about the system's own units are not ours to judge.
        ours = [line for line in output.splitlines()
                if path in line or line.startswith("sluice.service")]
        self.assertEqual(r.returncode, 0, output)
        self.assertEqual(ours, [], f"systemd-analyze verify complains:\n{output}")


# ---------------------------------------------------------------------------------------
# The README's systemd steps, done under a scratch root

class InstallStepsTest(unittest.TestCase):
    """The `install` lines of the README's systemd steps put a configuration in
    /etc/sluice/sluice.yaml that `sluice --check` accepts from that place, that is not the
    demo, and whose pid file the unit gives a directory for."""

    def steps(self):
        text = read("README.md")
        block = text[text.index("### systemd"):]
        block = block[block.index("```sh") + 5:]
        block = block[:block.index("```")]
        return [line.split("#")[0].split() for line in block.splitlines()
                if line.strip().startswith("sudo install")]

    def test_the_installed_configuration_checks_in_place(self):
        steps = self.steps()
        config_steps = [s for s in steps if s[-1] == "/etc/sluice/sluice.yaml"]
        self.assertEqual(len(config_steps), 1, steps)
        source = config_steps[0][-2]
        self.assertNotEqual(source, EXAMPLE_CONFIG, "the demo configuration is not for installing")
        with tempfile.TemporaryDirectory(prefix="install-") as root:
            # What a Debian system has already (the steps create the rest with install -D).
            for d in ("usr/local/bin", "etc/systemd/system"):
                os.makedirs(os.path.join(root, d))
            for step in steps:
                args = step[1:]  # without sudo
                self.assertEqual(args[0], "install", step)
                args = [os.path.join(REPO, a) if a.startswith(("build/", "conf/")) else
                        root + a if a.startswith("/") else a for a in args]
                if step[-2] == "build/sluice":
                    args[-2] = sluice_binary()
                r = subprocess.run(args, capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, f"{step}: {r.stderr}")
            installed = root + "/etc/sluice/sluice.yaml"
            r = run_cli(["--check", "-c", installed])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("configuration OK", r.stdout)
            self.assertNotIn("warning", r.stderr)
            with open(installed, encoding="utf-8") as f:
                text = f.read()
        # Nothing it names lies next to it (the demo's certificates do): no TLS, no relative path.
        self.assertNotIn("tls:", without_comments(text))
        # The pid file lives in the directory the unit makes for it.
        pid_file = re.search(r"^\s+pid_file:\s*(\S+)", text, re.M).group(1)
        runtime = [v for k, v in unit_directives(read(UNIT_FILE))["Service"] if k == "RuntimeDirectory"]
        self.assertEqual(runtime, ["sluice"])
        self.assertEqual(os.path.dirname(pid_file), "/run/sluice")


if __name__ == "__main__":
    unittest.main()
