// Finds a master through Redis Sentinel and follows it: asks one sentinel at a time
// (`SENTINEL get-master-addr-by-name`), stays subscribed to its `+switch-master` channel, and
// asks again (the next sentinel in turn) when told to, when the sentinel goes away, and every
// `requery_interval` as a safety net against a sentinel that went silent.
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

// Not thread-safe: everything happens on the io_context's thread.
class SentinelWatcher {
public:
    // Called with the master's address each time a sentinel names it (the same address
    // again too: the receiver ignores what it already has), from the io_context.
    using MasterHandler = std::function<void(const std::string& host, std::uint16_t port, const std::string& source)>;

    SentinelWatcher(boost::asio::io_context& io_context, SentinelOptions options, MasterHandler on_master);
    ~SentinelWatcher();
    SentinelWatcher(const SentinelWatcher&) = delete;
    SentinelWatcher& operator=(const SentinelWatcher&) = delete;

    void start();
    void stop();
    // Asks again, now, through the next sentinel (the data node answered READONLY or
    // LOADING, or its connection dropped). At most one re-ask is under way at a time.
    void reask(const std::string& why);

    struct SentinelState {
        std::string address;  // host:port as configured
        bool up = false;      // the last attempt to use it worked
    };
    // The sentinels asked so far (each is asked in turn, one every requery_interval).
    std::vector<SentinelState> sentinels() const;

private:
    class Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::redis
