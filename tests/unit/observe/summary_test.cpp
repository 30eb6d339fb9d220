#include <catch2/catch.hpp>

#include "observe/limited_clients.hpp"
#include "observe/metrics.hpp"
#include "observe/summary.hpp"

using namespace sluice;
using namespace std::chrono_literals;

TEST_CASE("summary line in the text form of INTERFACE.md") {
    observe::RouteInterval r;
    r.route = "login";
    r.requests = 124;
    r.forwarded = 100;
    r.limited = 24;
    r.top_limited = {{"203.0.113.7", 20}, {"198.51.100.2", 4}};
    CHECK(observe::format_summary_text(r, 10s, "2026-11-25T19:40:00.000Z") ==
          "2026-11-25T19:40:00.000Z summary route=login interval=10s requests=124 forwarded=100 limited=24 limited_pct=19.4 shadow_limited=0 "
          "store_errors=0 delayed=0 exempt=0 top_limited=203.0.113.7:20,198.51.100.2:4 limited_by=-");
    r.limited_by = {{"free/quota", 20}, {"burst", 4}};
    CHECK(observe::format_summary_text(r, 10s, "T").ends_with(" limited_by=free/quota:20,burst:4"));
    CHECK(observe::format_summary_json(r, 10s, "T").ends_with(R"(,"limited_by":{"free/quota":20,"burst":4}})"));
    r.limited_by.clear();
    CHECK(observe::format_summary_json(r, 10s, "2026-11-25T19:40:00.000Z") ==
          R"({"time":"2026-11-25T19:40:00.000Z","summary":true,"route":"login","interval":"10s","requests":124,"forwarded":100,"limited":24,)"
          R"("limited_pct":19.4,"shadow_limited":0,"store_errors":0,"delayed":0,"exempt":0,"top_limited":[{"client":"203.0.113.7","limited":20},)"
          R"({"client":"198.51.100.2","limited":4}],"limited_by":{}})");
}

TEST_CASE("the reporter gives per-interval deltas for routes with traffic only") {
    observe::Metrics metrics;
    auto& login = metrics.route("login");
    metrics.route("idle");
    observe::SummaryReporter reporter;
    for (int i = 0; i < 10; ++i) login.count_status(200);
    observe::add(login.here().forwarded, 10);
    auto first = reporter.take(metrics, {});
    REQUIRE(first.size() == 1);
    CHECK(first[0].route == "login");
    CHECK(first[0].requests == 10);
    CHECK(first[0].limited_pct() == 0);

    for (int i = 0; i < 40; ++i) login.count_status(429);
    observe::add(login.here().limited, 40);
    auto& quota = metrics.limit(login, "free/quota");
    auto& burst = metrics.limit(login, "burst");
    for (int i = 0; i < 10; ++i) burst.count(observe::DecisionKind::limited);
    for (int i = 0; i < 30; ++i) quota.count(observe::DecisionKind::limited);
    quota.count(observe::DecisionKind::allowed);
    observe::LimitedClients clients;
    for (int i = 0; i < 30; ++i) clients.add("login", "203.0.113.7");
    for (int i = 0; i < 10; ++i) clients.add("login", "198.51.100.2");
    auto second = reporter.take(metrics, clients.take());
    REQUIRE(second.size() == 1);
    CHECK(second[0].requests == 40);
    CHECK(second[0].limited == 40);
    CHECK(second[0].previous_pct == 0);
    CHECK(observe::limited_share_jumped(second[0]));
    REQUIRE(second[0].top_limited.size() == 2);
    CHECK(second[0].top_limited[0] == std::pair<std::string, std::uint64_t>{"203.0.113.7", 30});
    // Refusals by limit, most first; only those of the interval.
    CHECK(second[0].limited_by ==
          std::vector<std::pair<std::string, std::uint64_t>>{{"free/quota", 30}, {"burst", 10}});
    CHECK(clients.take().empty());  // a new interval starts empty
    login.count_status(429);
    burst.count(observe::DecisionKind::limited);
    const auto third = reporter.take(metrics, {});
    REQUIRE(third.size() == 1);
    CHECK(third[0].limited_by == std::vector<std::pair<std::string, std::uint64_t>>{{"burst", 1}});

    CHECK(reporter.take(metrics, {}).empty());  // no traffic since
}

TEST_CASE("limited share jump rule") {
    observe::RouteInterval r;
    r.requests = 100;
    r.limited = 30;
    r.previous_pct = 5;
    CHECK(observe::limited_share_jumped(r));
    r.previous_pct = 20;  // only 10 points more
    CHECK_FALSE(observe::limited_share_jumped(r));
    r.previous_pct = 0;
    r.requests = 10;  // too few requests to judge
    r.limited = 9;
    CHECK_FALSE(observe::limited_share_jumped(r));
}

TEST_CASE("top clients: most first, ties by address, at most n") {
    std::unordered_map<std::string, std::uint64_t> counts{{"b", 5}, {"a", 5}, {"c", 9}, {"d", 1}};
    auto top = observe::top_clients(counts, 3);
    REQUIRE(top.size() == 3);
    CHECK(top[0].first == "c");
    CHECK(top[1].first == "a");
    CHECK(top[2].first == "b");
}

TEST_CASE("prometheus text names every required series") {
    observe::Metrics metrics;
    auto& route = metrics.route("lo\"gin");
    route.count_status(429);
    metrics.limit(route, "burst").count(observe::DecisionKind::limited);
    metrics.store_latency.observe(0.0003);
    metrics.upstream_latency.observe(2.0);
    auto text = observe::prometheus_text(metrics);
    CHECK_THAT(text, Catch::Contains("sluice_requests_total{route=\"lo\\\"gin\",code=\"429\"} 1\n"));
    CHECK_THAT(text, Catch::Contains(
                         "sluice_ratelimit_decisions_total{route=\"lo\\\"gin\",limit=\"burst\",decision=\"limited\"} 1\n"));
    CHECK_THAT(text, Catch::Contains("sluice_store_errors_total 0\n"));
    CHECK_THAT(text, Catch::Contains("sluice_store_latency_seconds_bucket{le=\"0.00025\"} 0\n"));
    CHECK_THAT(text, Catch::Contains("sluice_store_latency_seconds_bucket{le=\"0.0005\"} 1\n"));
    CHECK_THAT(text, Catch::Contains("sluice_upstream_latency_seconds_bucket{le=\"1\"} 0\n"));
    CHECK_THAT(text, Catch::Contains("sluice_upstream_latency_seconds_bucket{le=\"2.5\"} 1\n"));
    CHECK_THAT(text, Catch::Contains("sluice_upstream_latency_seconds_count 1\n"));
    CHECK_THAT(text, Catch::Contains("sluice_connections_active 0\n"));
    CHECK_THAT(text, Catch::Contains("# TYPE sluice_store_latency_seconds histogram\n"));
}
