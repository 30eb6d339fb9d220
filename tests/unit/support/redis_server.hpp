// Test support: a real redis-server on a free loopback port, and a blocking client to
// inspect it. The server runs as a child process and is stopped by the destructor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "redis/redis_reply.hpp"

struct redisContext;

namespace sluice::test {

class RedisServer {
public:
    // Extra redis-server arguments, e.g. {"--requirepass", "pw"}. With `unix_socket`, also
    // listens on a socket in a fresh temporary directory.
    explicit RedisServer(std::vector<std::string> extra_args = {}, bool unix_socket = false);
    ~RedisServer();
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    std::uint16_t port() const { return port_; }
    const std::string& unix_path() const { return unix_path_; }

    void kill();     // SIGKILL, no goodbye to clients
    void restart();  // kill() if running, then start again on the same port (empty data)
    void suspend();  // SIGSTOP: connections stay open, nothing is answered
    void resume();   // SIGCONT

private:
    void start();
    void wait_until_answering();

    std::vector<std::string> extra_args_;
    std::uint16_t port_ = 0;
    std::string dir_;
    std::string unix_path_;
    pid_t pid_ = -1;
};

// Blocking hiredis client for assertions (not the code under test).
class SyncRedis {
public:
    explicit SyncRedis(std::uint16_t port);
    ~SyncRedis();
    SyncRedis(const SyncRedis&) = delete;
    SyncRedis& operator=(const SyncRedis&) = delete;

    redis::RedisResult run(const std::vector<std::string>& args);
    // Runs it and requires success; returns the reply.
    redis::RedisReply must(const std::vector<std::string>& args);
    std::int64_t integer(const std::vector<std::string>& args);  // an integer reply
    std::string text(const std::vector<std::string>& args);      // a string/status reply

private:
    ::redisContext* context_ = nullptr;
};

// A Redis Cluster of `masters` masters without replicas, the slots split evenly (CLUSTER
// ADDSLOTSRANGE, then MEET): ready, every node saying cluster_state:ok and knowing every
// master, when the constructor returns.
class RedisCluster {
public:
    explicit RedisCluster(int masters);
    std::vector<std::uint16_t> ports() const;

private:
    std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace sluice::test
