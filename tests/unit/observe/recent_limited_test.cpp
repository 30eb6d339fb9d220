// The last minute of limited clients for /stats: buckets by time, bounded per route.
#include <catch2/catch.hpp>

#include "observe/recent_limited.hpp"

using sluice::observe::LimitedClients;
using sluice::observe::RecentLimited;
using namespace std::chrono_literals;

TEST_CASE("recent limited clients: the last minute, most first", "[observe]") {
    RecentLimited recent;
    const auto t0 = RecentLimited::Clock::time_point{} + 1000s;
    recent.push({{"login", {{"203.0.113.7", 5}, {"198.51.100.2", 9}}}}, t0);
    recent.push({{"login", {{"203.0.113.7", 7}}}, {"api", {{"192.0.2.1", 1}}}}, t0 + 5s);
    auto top = recent.top(5, t0 + 10s);
    REQUIRE(top["login"].size() == 2);
    CHECK(top["login"][0] == std::pair<std::string, std::uint64_t>{"203.0.113.7", 12});
    CHECK(top["login"][1] == std::pair<std::string, std::uint64_t>{"198.51.100.2", 9});
    CHECK(top["api"].size() == 1);
    CHECK(recent.top(1, t0 + 10s)["login"].size() == 1);
    // A minute after the first bucket, it no longer counts; after the second, nothing does.
    top = recent.top(5, t0 + 60s);
    CHECK(top["login"] == std::vector<std::pair<std::string, std::uint64_t>>{{"203.0.113.7", 7}});
    recent.push({}, t0 + 66s);
    CHECK(recent.top(5, t0 + 66s).empty());
}

TEST_CASE("recent limited clients: a bucket keeps the 100 most limited per route", "[observe]") {
    RecentLimited recent;
    LimitedClients::Counts flood;
    for (int i = 0; i < 5000; ++i) flood["login"]["10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256)] = 1 + i % 7;
    flood["login"]["203.0.113.7"] = 1000;
    const auto t0 = RecentLimited::Clock::time_point{} + 1000s;
    recent.push(flood, t0);
    const auto top = recent.top(1000, t0);
    CHECK(top.at("login").size() == RecentLimited::kept_per_route);
    CHECK(top.at("login").front().first == "203.0.113.7");
}

TEST_CASE("limited clients: what is merged keeps the bound of one interval per route", "[observe]") {
    // A summary interval sums a collection every 5 s: new clients in each must not grow it
    // past the bound (summary_interval: 1h, with clients that change), and the most limited
    // stay, whenever they came.
    LimitedClients::Counts sum;
    const auto address = [](int round, std::size_t i) {
        return "10." + std::to_string(round) + "." + std::to_string(i / 256) + "." + std::to_string(i % 256);
    };
    for (int round = 0; round < 3; ++round) {
        LimitedClients::Counts part;
        for (std::size_t i = 0; i < LimitedClients::max_clients_per_route; ++i)
            part["login"][address(round, i)] = round == 2 && i < 100 ? 50 : 2;
        part["api"]["192.0.2.1"] = 1;
        sluice::observe::merge(sum, part);
    }
    const auto& login = sum.at("login");
    CHECK(login.size() == LimitedClients::max_clients_per_route + 1);
    std::uint64_t total = 0;
    for (const auto& [client, n] : login) total += n;
    CHECK(total == 3 * 2 * LimitedClients::max_clients_per_route + 100 * 48);
    for (std::size_t i = 0; i < 100; ++i) CHECK(login.at(address(2, i)) == 50);
    CHECK(login.at("other") == total - 100 * 50 - 2 * (LimitedClients::max_clients_per_route - 100));
    const auto top = sluice::observe::top_clients(login, 1);
    CHECK(top.front().first == "other");
    CHECK(sum.at("api").at("192.0.2.1") == 3);
}
