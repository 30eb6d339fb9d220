#include <catch2/catch.hpp>

#include "limit/rate_limit_headers.hpp"
#include "../support/limit_configs.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

config::LimitConfig bucket(std::string name, double rate, config::Duration per, std::uint64_t burst) {
    return test::token_bucket(std::move(name), rate, per, burst);
}

config::LimitConfig window(std::string name, std::uint64_t limit, config::Duration w, bool shadow = false) {
    return test::sliding_window(std::move(name), limit, w, {test::client_ip()}, shadow);
}

limit::LimitResult result(bool allowed, std::uint64_t remaining, std::chrono::milliseconds reset,
                          std::chrono::milliseconds retry = 0ms, bool shadow = false) {
    limit::LimitResult r;
    r.applies = true;
    r.allowed = allowed;
    r.remaining = remaining;
    r.reset = reset;
    r.retry_after = retry;
    r.shadow = shadow;
    return r;
}

std::string find(const limit::HeaderList& h, std::string_view name) {
    for (const auto& [n, v] : h)
        if (n == name) return std::string(v);
    return "<none>";
}

}  // namespace

TEST_CASE("quota and window of each algorithm") {
    CHECK(limit::quota_and_window(bucket("b", 5, 1s, 10)) == std::pair<std::uint64_t, std::uint64_t>{10, 2});
    CHECK(limit::quota_and_window(bucket("b", 1, 3s, 1)) == std::pair<std::uint64_t, std::uint64_t>{1, 3});
    CHECK(limit::quota_and_window(bucket("b", 100, 1s, 10)) == std::pair<std::uint64_t, std::uint64_t>{10, 1});
    CHECK(limit::quota_and_window(window("w", 30, 60s)) == std::pair<std::uint64_t, std::uint64_t>{30, 60});
    CHECK(limit::quota_and_window(window("w", 3, 250ms)) == std::pair<std::uint64_t, std::uint64_t>{3, 1});
}

TEST_CASE("headers speak of the limit closest to exhaustion") {
    config::RouteConfig route;
    route.name = "login";
    route.limits = {bucket("burst", 5, 1s, 10), window("minute", 30, 60s), window("audit", 1, 60s, true)};
    auto decision = limit::Decision::from_results(
        {result(true, 3, 1400ms), result(true, 20, 60000ms), result(false, 0, 60000ms, 60000ms, true)}, 0);

    SECTION("ietf") {
        auto h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::ietf);
        CHECK(find(h, "RateLimit-Policy") == "\"burst\";q=10;w=2");
        CHECK(find(h, "RateLimit") == "\"burst\";r=3;t=2");
        CHECK(find(h, "X-RateLimit-Limit") == "<none>");
    }
    SECTION("legacy") {
        auto h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::legacy);
        CHECK(find(h, "X-RateLimit-Limit") == "10");
        CHECK(find(h, "X-RateLimit-Remaining") == "3");
        CHECK(find(h, "X-RateLimit-Reset") == "2");
        CHECK(find(h, "RateLimit") == "<none>");
    }
    SECTION("both and none") {
        CHECK(limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::both).size() == 5);
        CHECK(limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::none).empty());
    }
    SECTION("a shadow limit is never advertised") {
        CHECK(limit::advertised_limit(decision) == std::optional<std::size_t>(0));
        CHECK(decision.outcome == limit::Decision::Outcome::allowed);
    }
}

TEST_CASE("a rejected request advertises the limit that rejected it") {
    config::RouteConfig route;
    route.name = "api";
    route.limits = {bucket("burst", 5, 1s, 10), window("minute", 30, 60s)};
    auto decision = limit::Decision::from_results({result(true, 0, 2000ms), result(false, 0, 59000ms, 1500ms)}, 0);
    REQUIRE(decision.outcome == limit::Decision::Outcome::limited);
    CHECK(limit::advertised_limit(decision) == std::optional<std::size_t>(1));
    auto h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::ietf);
    CHECK(find(h, "RateLimit-Policy") == "\"minute\";q=30;w=60");
    // One answer to "when may I send again": t is when the refusing limit admits this request
    // (what Retry-After says: 1.5 s, rounded up), not when its whole quota is back (59 s).
    CHECK(find(h, "RateLimit") == "\"minute\";r=0;t=2");
    CHECK(limit::retry_after_seconds(decision.limits[1].retry_after) == 2);
    // X-RateLimit-Reset is what INTERFACE.md says it is: the seconds until the full quota is back.
    h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::legacy);
    CHECK(find(h, "X-RateLimit-Reset") == "59");
    h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::both);
    CHECK(find(h, "RateLimit") == "\"minute\";r=0;t=2");
    CHECK(find(h, "X-RateLimit-Reset") == "59");
}

TEST_CASE("a refusal's X-RateLimit-Reset is never before its Retry-After") {
    config::RouteConfig route;
    route.name = "api";
    SECTION("a request costing more than the whole quota, refused by an empty window") {
        route.limits = {window("minute", 30, 60s)};
        const auto decision = limit::Decision::from_results({result(false, 30, 0ms, 60000ms)}, 0);
        const auto h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::both);
        CHECK(find(h, "RateLimit") == "\"minute\";r=30;t=60");
        CHECK(find(h, "X-RateLimit-Reset") == "60");
    }
    SECTION("a concurrency limit: when a slot is free, not its leases' end") {
        route.limits = {test::slots_limit("slots", 1, 60s)};
        const auto decision = limit::Decision::from_results({result(false, 0, 60000ms, 1000ms)}, 0);
        const auto h = limit::rate_limit_headers(route.limits, decision, config::HeaderStyle::both);
        CHECK(find(h, "RateLimit") == "\"slots\";r=0;t=1");
        CHECK(find(h, "X-RateLimit-Reset") == "1");
    }
}

TEST_CASE("policies made beforehand give the same headers, in every style") {
    config::RouteConfig route;
    route.name = "api";
    route.limits = {bucket("burst", 5, 1s, 10), window("minute", 30, 60s),
                    window(std::string(80, 'n'), 7, 90s)};  // a name too long to be kept inline
    std::vector<limit::HeaderValue> policies;
    for (const auto& limit : route.limits) policies.push_back(limit::rate_limit_policy(limit));
    CHECK(policies[0] == "\"burst\";q=10;w=2");
    CHECK(policies[2].view() == "\"" + std::string(80, 'n') + "\";q=7;w=90");
    const std::vector<limit::Decision> decisions{
        limit::Decision::from_results({result(true, 3, 1400ms), result(true, 20, 60000ms), result(true, 6, 90000ms)}, 0),
        limit::Decision::from_results({result(true, 0, 2000ms), result(false, 0, 59000ms, 1500ms), result(true, 1, 1000ms)}, 0),
        limit::Decision::from_results({result(true, 9, 100ms), result(true, 29, 2000ms), result(true, 0, 80000ms)}, 0)};
    for (const auto style : {config::HeaderStyle::ietf, config::HeaderStyle::legacy, config::HeaderStyle::both,
                             config::HeaderStyle::none}) {
        for (const auto& decision : decisions) {
            const auto made = limit::rate_limit_headers(route.limits, decision, style, policies);
            const auto fresh = limit::rate_limit_headers(route.limits, decision, style);
            REQUIRE(made.size() == fresh.size());
            for (std::size_t i = 0; i < made.size(); ++i) {
                CHECK(made[i].first == fresh[i].first);
                CHECK(made[i].second.view() == fresh[i].second.view());
            }
        }
    }
}

TEST_CASE("Retry-After is whole seconds, rounded up, never 0") {
    CHECK(limit::retry_after_seconds(0ms) == 1);
    CHECK(limit::retry_after_seconds(1ms) == 1);
    CHECK(limit::retry_after_seconds(1000ms) == 1);
    CHECK(limit::retry_after_seconds(1001ms) == 2);
    CHECK(limit::retry_after_seconds(59999ms) == 60);
}
