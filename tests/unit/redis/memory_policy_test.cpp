// What the start-up log and --check say about the Redis that holds the keys.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "config/config.hpp"
#include "redis/memory_policy.hpp"

using sluice::redis::memory_warnings;
using sluice::redis::MemorySettings;

TEST_CASE("redis memory policy: evicting policies and no maxmemory are warned about", "[redis]") {
    CHECK(memory_warnings(MemorySettings{"r:6379", "noeviction", 100 << 20}).empty());
    for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"}) {
        CAPTURE(policy);
        const auto warnings = memory_warnings(MemorySettings{"r:6379", policy, 100 << 20});
        REQUIRE(warnings.size() == 1);
        CHECK(warnings[0].find(std::string("Redis at r:6379 has maxmemory-policy ") + policy +
                               ": when it reaches maxmemory it may evict sluice's keys") == 0);
    }
    const auto none = memory_warnings(MemorySettings{"r:6379", "noeviction", 0});
    REQUIRE(none.size() == 1);
    CHECK(none[0].find("Redis at r:6379 has no maxmemory") == 0);
    CHECK(memory_warnings(MemorySettings{"r:6379", "allkeys-lru", 0}).size() == 2);
}

TEST_CASE("redis memory settings: a reply that trickles in is given up within the timeout, not waited for", "[redis]") {
    // A server that answers the first command a byte every 50 ms, for 5 s.
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener, 1) == 0);
    socklen_t size = sizeof address;
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) == 0);
    std::thread server([listener] {
        const int peer = ::accept(listener, nullptr, nullptr);
        if (peer < 0) return;
        char request[256];
        (void)::recv(peer, request, sizeof request, 0);
        const std::string reply = "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n";
        for (int i = 0; i < 100; ++i) {
            if (::send(peer, reply.data() + i % reply.size(), 1, MSG_NOSIGNAL) != 1) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ::close(peer);
    });
    sluice::config::StoreConfig store;
    store.redis.tcp = sluice::config::Endpoint{"127.0.0.1", ntohs(address.sin_port)};
    std::string error;
    // (Whole, the reply would come after 2.4 s, every byte within the per-read timeout.)
    const auto settings = sluice::redis::read_memory_settings(store, std::chrono::milliseconds(300), error);
    ::shutdown(listener, SHUT_RDWR);
    server.join();
    ::close(listener);
    CHECK_FALSE(settings);
    CHECK(error.find("no whole reply within 300 ms") != std::string::npos);
}
