// Finds a master through Redis Sentinel and follows it.
//
// - Asking: one sentinel at a time answers `SENTINEL get-master-addr-by-name` (the next one
//   in turn when it does not), at start, when told to (the data node answered READONLY or
//   LOADING, or dropped), and every `requery_interval` as a safety net.
// - Listening: a subscription to every sentinel, for the failover as it happens. The leader
//   of a failover announces the replica it promotes (`+failover-state-send-slaveof-noone`)
//   before the old master is told anything: from then on the old master still takes writes
//   but they are lost, so decisions stop going there at once; `+switch-master` (from any
//   sentinel) ends it; `-failover-abort-*` calls it off.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace sluice::redis {

struct SentinelOptions {
    struct Address {
        std::string host;  // an IP address, or a name resolved before each connect
        std::uint16_t port = 26379;
    };
    std::vector<Address> sentinels;
    std::string master_name;
    std::string username;  // AUTH of the sentinels (sentinel_username / sentinel_password)
    std::string password;
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds requery_interval{10000};
    std::chrono::milliseconds backoff_min{50};
    std::chrono::milliseconds backoff_max{2000};
};

// What the sentinels said.
struct SentinelNews {
    enum class Kind {
        master,     // a sentinel answered the question: the master is host:port
        switched,   // +switch-master: the failover is over, the master is host:port
        promoting,  // a failover is promoting the replica at host:port
        aborted,    // the failover was called off (host/port empty)
    };
    Kind kind = Kind::master;
    std::string host;
    std::uint16_t port = 0;
    std::string source;  // for the log: which sentinel, which message
};

// Not thread-safe: everything happens on the io_context's thread.
class SentinelWatcher {
public:
    // Called from the io_context (never inside hiredis), for every piece of news; the same
    // master again too: the receiver ignores what it already has.
    using NewsHandler = std::function<void(const SentinelNews&)>;

    SentinelWatcher(boost::asio::io_context& io_context, SentinelOptions options, NewsHandler on_news);
    ~SentinelWatcher();
    SentinelWatcher(const SentinelWatcher&) = delete;
    SentinelWatcher& operator=(const SentinelWatcher&) = delete;

    void start();
    void stop();
    // Asks again, now, through the next sentinel. At most one question is under way.
    void reask(const std::string& why);

    struct SentinelState {
        std::string address;  // host:port as configured
        bool up = false;      // its subscription is up
    };
    std::vector<SentinelState> sentinels() const;

private:
    class Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
