"""Real Redis topologies on free loopback ports, for the Sentinel and Cluster tests.

    s = SentinelSetup().start()      1 master, 1 replica, 3 sentinels (redis-server --sentinel)
    s.sentinel_addresses, s.master_name, s.master(), s.replica()
    s.failover()                     SENTINEL FAILOVER, waits until everyone agrees
    s.kill_master()                  SIGKILL the master, waits for the replica's promotion
    s.restart_old_master()           the killed one back on its port, waits until it is a replica

    c = RedisClusterSetup(masters=3, replicas_per_master=1).start()
    c.seeds, c.masters(), c.node_for_slot(slot), c.key_slot(key)
    h = c.begin_migration(slot, target); c.move_keys(h); c.finish_migration(h)
    c.kill_master(master)            SIGKILL, waits for its replica's promotion

Every process is stopped by cleanup(), also after a failed wait.
"""

import os
import shutil
import subprocess
import tempfile
import time

from harness import (LOOPBACK, RedisClient, RedisError, RedisServer, WaitTimeout, free_port, wait_until)

POLL = 0.03


def _try(server, *args):
    try:
        return server.command(*args, timeout=2)
    except Exception:  # not up, loading, refused: "no answer" to a poll
        return None


def _role(server):
    reply = _try(server, "ROLE")
    return reply[0] if isinstance(reply, list) and reply else None


# ---------------------------------------------------------------------------------------
# Sentinel

class _Sentinel:
    """One `redis-server CONF --sentinel`; it rewrites its config file, so it has its own."""

    def __init__(self, master_name, master_port, quorum, down_after_ms, failover_timeout_ms, password=None):
        self.port = free_port()
        self.password = password
        self.workdir = tempfile.mkdtemp(prefix="sluice-sentinel-")
        self.conf = os.path.join(self.workdir, "sentinel.conf")
        self.log_path = os.path.join(self.workdir, "sentinel.log")
        with open(self.conf, "w") as f:
            f.write(f"port {self.port}\nbind {LOOPBACK}\ndir {self.workdir}\n"
                    f"sentinel monitor {master_name} {LOOPBACK} {master_port} {quorum}\n"
                    f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
                    f"sentinel failover-timeout {master_name} {failover_timeout_ms}\n"
                    f"sentinel parallel-syncs {master_name} 1\n")
            if password:
                # Clients (sluice) and the other sentinels must AUTH.
                f.write(f"requirepass {password}\nsentinel sentinel-pass {password}\n")
        self.proc = None
        self._log = None

    @property
    def address(self):
        return f"{LOOPBACK}:{self.port}"

    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["redis-server", self.conf, "--sentinel"], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        return self

    def command(self, *args, timeout=2):
        with RedisClient(self.port, timeout=timeout) as client:
            if self.password:
                client.command("AUTH", self.password)
            return client.command(*args)

    # Stopping, the log and the clean-up are a redis-server's (same attributes: proc, _log,
    # log_path, workdir).
    stop = RedisServer.stop
    kill = RedisServer.kill
    _close_log = RedisServer._close_log
    log_text = RedisServer.log_text
    cleanup = RedisServer.cleanup


class SentinelSetup:
    def __init__(self, master_name="sluice-master", down_after_ms=1000, failover_timeout_ms=5000,
                 sentinel_password=None):
        self.sentinel_password = sentinel_password
        self.master_name = master_name
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.servers = []
        self.sentinels = []
        self.killed = None

    @property
    def sentinel_addresses(self):
        return [s.address for s in self.sentinels]

    def start(self, timeout=30.0):
        try:
            # A replica syncs at once (Redis 7 waits 5 s for more replicas by default).
            master = RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]).start()
            self.servers.append(master)
            replica = RedisServer(extra_args=["--replicaof", LOOPBACK, str(master.port),
                                              "--repl-diskless-sync-delay", "0"]).start()
            self.servers.append(replica)
            wait_until(lambda: "master_link_status:up" in (_try(replica, "INFO", "replication") or ""),
                       timeout, POLL, "the replica in sync")
            for _ in range(3):
                self.sentinels.append(_Sentinel(self.master_name, master.port, 2, self.down_after_ms,
                                                self.failover_timeout_ms, self.sentinel_password).start())

            def settled():
                for s in self.sentinels:
                    addr = _try(s, "SENTINEL", "get-master-addr-by-name", self.master_name)
                    if not addr or int(addr[1]) != master.port:
                        return False
                    if not _try(s, "SENTINEL", "replicas", self.master_name):
                        return False
                    others = _try(s, "SENTINEL", "sentinels", self.master_name)
                    if not others or len(others) != 2:
                        return False
                return True
            wait_until(settled, timeout, POLL, "3 sentinels that know the master, the replica and each other")
            return self
        except BaseException:
            self.cleanup()
            raise

    def _master_port(self):
        for s in self.sentinels:
            addr = _try(s, "SENTINEL", "get-master-addr-by-name", self.master_name)
            if addr:
                return int(addr[1])
        raise AssertionError("no sentinel answers")

    def master(self):
        port = self._master_port()
        return next(s for s in self.servers if s.port == port)

    def replica(self):
        port = self._master_port()
        return next(s for s in self.servers if s.port != port)

    def _wait_new_master(self, old_port, timeout):
        def promoted():
            ports = set()
            for s in self.sentinels:
                addr = _try(s, "SENTINEL", "get-master-addr-by-name", self.master_name)
                if not addr:
                    return None
                ports.add(int(addr[1]))
            if len(ports) != 1 or old_port in ports:
                return None
            new = next(s for s in self.servers if s.port in ports)
            return new if _role(new) == "master" else None
        return wait_until(promoted, timeout, POLL, "every sentinel naming the new master")

    def failover(self, timeout=20.0):
        old = self.master()
        self.sentinels[0].command("SENTINEL", "FAILOVER", self.master_name)
        return self._wait_new_master(old.port, timeout)

    def kill_master(self, timeout=30.0):
        old = self.master()
        old.kill()
        self.killed = old
        return self._wait_new_master(old.port, timeout)

    def restart_old_master(self, timeout=30.0):
        old = self.killed
        old.start()
        wait_until(lambda: _role(old) == "slave", timeout, POLL, "the old master back as a replica")
        return old

    def log_text(self):
        parts = []
        for s in self.servers:
            parts.append(f"--- redis-server {s.port} ---\n{s.log_text()[-1500:]}")
        for s in self.sentinels:
            parts.append(f"--- sentinel {s.port} ---\n{s.log_text()[-1500:]}")
        return "\n".join(parts)

    def cleanup(self):
        for s in self.sentinels:
            s.cleanup()
        for s in self.servers:
            s.cleanup()


# ---------------------------------------------------------------------------------------
# Cluster

def _crc16(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def key_slot(key):
    """Redis Cluster's hash slot of `key` (str or bytes), hash tags included."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    return _crc16(data) & 16383


class RedisClusterSetup:
    def __init__(self, masters=3, replicas_per_master=1, node_timeout_ms=2000, extra_args=()):
        self.extra_args = list(extra_args)
        self.master_count = masters
        self.replicas_per_master = replicas_per_master
        self.node_timeout_ms = node_timeout_ms
        self.nodes = []

    key_slot = staticmethod(key_slot)

    @property
    def seeds(self):
        return [n.address for n in self.nodes]

    def start(self, timeout=60.0):
        try:
            for _ in range(self.master_count * (1 + self.replicas_per_master)):
                bus = free_port()
                node = RedisServer(extra_args=[
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    # The bus port is port + 10000 unless told: free ports can be above 55535.
                    "--cluster-port", str(bus),
                    "--repl-diskless-sync-delay", "0", *self.extra_args])
                node.cluster_port = bus
                self.nodes.append(node.start())
            if self.replicas_per_master == 0 and self.master_count < 3:
                # redis-cli --cluster create wants 3 masters at least: assign the slots by hand.
                per = 16384 // self.master_count
                for i, n in enumerate(self.nodes):
                    last = 16383 if i == len(self.nodes) - 1 else (i + 1) * per - 1
                    n.command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
                    n.command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                    if i:
                        n.command("CLUSTER", "MEET", LOOPBACK, self.nodes[0].port,
                                  self.nodes[0].cluster_port)
            else:
                subprocess.run(["redis-cli", "--cluster", "create", *self.seeds, "--cluster-replicas",
                                str(self.replicas_per_master), "--cluster-yes"],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
            self.wait_healthy(timeout)
            return self
        except BaseException:
            self.cleanup()
            raise

    def live(self):
        return [n for n in self.nodes if n.running()]

    def _slots(self, node):
        reply = _try(node, "CLUSTER", "SLOTS")
        if not isinstance(reply, list):
            return None
        owner = {}
        for entry in reply:
            for slot in range(entry[0], entry[1] + 1):
                owner[slot] = entry[2][1]
        return owner

    def wait_healthy(self, timeout=60.0):
        """Every live node: cluster_state:ok, all 16384 slots assigned, the same masters,
        and every replica in sync with its master (else it cannot take over)."""
        def healthy():
            maps = []
            for n in self.live():
                replication = _try(n, "INFO", "replication") or ""
                if "role:slave" in replication and "master_link_status:up" not in replication:
                    return False
                info = _try(n, "CLUSTER", "INFO") or ""
                if "cluster_state:ok" not in info:
                    return False
                owner = self._slots(n)
                if owner is None or len(owner) != 16384:
                    return False
                maps.append(owner)
            return all(m == maps[0] for m in maps)
        wait_until(healthy, timeout, POLL, "a healthy cluster that every node agrees on")

    def _port_map(self):
        for n in self.live():
            owner = self._slots(n)
            if owner:
                return owner
        raise AssertionError("no node answers CLUSTER SLOTS")

    def _by_port(self, port):
        return next(n for n in self.nodes if n.port == port)

    def masters(self):
        return [self._by_port(p) for p in sorted(set(self._port_map().values()))]

    def node_for_slot(self, slot):
        return self._by_port(self._port_map()[slot])

    def node_id(self, node):
        return node.command("CLUSTER", "MYID")

    def begin_migration(self, slot, target):
        source = self.node_for_slot(slot)
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        return {"slot": slot, "source": source, "target": target}

    def move_keys(self, handle):
        slot, source, target = handle["slot"], handle["source"], handle["target"]
        while True:
            keys = source.command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                return
            source.command("MIGRATE", LOOPBACK, target.port, "", 0, 5000, "KEYS", *keys)

    def finish_migration(self, handle, timeout=20.0):
        slot, source, target = handle["slot"], handle["source"], handle["target"]
        self.move_keys(handle)
        target_id = self.node_id(target)
        # As redis-cli does: the target first, then the source, then the other masters.
        target.command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        source.command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for m in self.masters():
            if m.port not in (source.port, target.port):
                _try(m, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_until(lambda: all((self._slots(n) or {}).get(slot) == target.port for n in self.live()),
                   timeout, POLL, f"every node placing slot {slot} on {target.port}")

    def kill_master(self, master, timeout=30.0):
        slots = [s for s, p in self._port_map().items() if p == master.port]
        master.kill()

        def promoted():
            owner = None
            for n in self.live():
                info = _try(n, "CLUSTER", "INFO") or ""
                if "cluster_state:ok" not in info:
                    return None
                m = self._slots(n)
                if not m or m.get(slots[0]) in (None, master.port):
                    return None
                owner = m[slots[0]]
            return self._by_port(owner)
        return wait_until(promoted, timeout, POLL, f"a replica promoted in place of {master.port}")

    def log_text(self):
        return "\n".join(f"--- node {n.port} ---\n{n.log_text()[-1500:]}" for n in self.nodes)

    def cleanup(self):
        for n in self.nodes:
            n.cleanup()


if __name__ == "__main__":
    started = time.monotonic()
    s = SentinelSetup().start()
    try:
        print(f"sentinel setup up in {time.monotonic() - started:.2f}s, master {s.master().port}")
        t = time.monotonic()
        new = s.failover()
        print(f"failover to {new.port} in {time.monotonic() - t:.2f}s")
        t = time.monotonic()
        new = s.kill_master()
        print(f"kill: {new.port} promoted in {time.monotonic() - t:.2f}s")
        t = time.monotonic()
        s.restart_old_master()
        print(f"old master back as a replica in {time.monotonic() - t:.2f}s")
    finally:
        s.cleanup()
    started = time.monotonic()
    c = RedisClusterSetup().start()
    try:
        print(f"cluster up in {time.monotonic() - started:.2f}s, masters {[m.port for m in c.masters()]}")
        for key in ("a", "foo", "{user1000}.following", "sluice:{all:a}:b"):
            assert c.key_slot(key) == c.nodes[0].command("CLUSTER", "KEYSLOT", key), key
        slot = c.key_slot("x")
        target = next(m for m in c.masters() if m.port != c.node_for_slot(slot).port)
        c.node_for_slot(slot).command("SET", "x", "1")
        t = time.monotonic()
        h = c.begin_migration(slot, target)
        c.move_keys(h)
        c.finish_migration(h)
        print(f"slot {slot} migrated in {time.monotonic() - t:.2f}s")
        t = time.monotonic()
        new = c.kill_master(c.masters()[0])
        print(f"cluster master killed, {new.port} promoted in {time.monotonic() - t:.2f}s")
    finally:
        c.cleanup()
