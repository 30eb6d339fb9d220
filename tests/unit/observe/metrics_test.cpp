#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "observe/metrics.hpp"

using namespace sluice;

// Workers add to copies of their own (stripes); every reader must see the exact sums,
// whichever stripes the adds went to, workers beyond stripe_count sharing copies.
TEST_CASE("striped counters: adds from many worker threads read back as exact sums", "[metrics]") {
    observe::Metrics metrics;
    auto& route = metrics.route("api");
    auto& limit = metrics.limit(route, "per_client");
    const std::size_t threads = observe::stripe_count + 3;
    const int per_thread = 2000;
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            observe::set_stripe(t);
            for (int i = 0; i < per_thread; ++i) {
                route.count_status(i % 4 == 0 ? 429 : 200);
                observe::add(route.here().forwarded);
                limit.count(i % 4 == 0 ? observe::DecisionKind::limited : observe::DecisionKind::allowed);
                metrics.upstream_latency.observe(i % 2 == 0 ? 0.0002 : 0.2);
            }
        });
    for (auto& th : pool) th.join();
    const std::uint64_t all = threads * per_thread;
    CHECK(route.total(&observe::RouteCounts::requests) == all);
    CHECK(route.total(&observe::RouteCounts::forwarded) == all);
    CHECK(route.status_total(429) == all / 4);
    CHECK(route.status_total(200) == all - all / 4);
    CHECK(route.status_total(404) == 0);
    CHECK(route.status_total(700) == 0);
    CHECK(limit.decisions(observe::DecisionKind::limited) == all / 4);
    CHECK(limit.decisions(observe::DecisionKind::allowed) == all - all / 4);
    const auto h = metrics.upstream_latency.reading();
    CHECK(h.count == all);
    CHECK(h.cumulative.back() == all);
    CHECK(h.cumulative.front() == all / 2);  // 0.2 ms: in the first bucket (0.5 ms)
    CHECK(h.sum == Approx(all / 2 * 0.2002).epsilon(1e-6));

    // The exposition adds the stripes up too.
    const auto text = observe::prometheus_text(metrics);
    CHECK(text.find("sluice_requests_total{route=\"api\",code=\"429\"} " + std::to_string(all / 4) + "\n") !=
          std::string::npos);
    CHECK(text.find("decision=\"allowed\"} " + std::to_string(all - all / 4) + "\n") != std::string::npos);
    CHECK(text.find("sluice_upstream_latency_seconds_count " + std::to_string(all) + "\n") != std::string::npos);
}

TEST_CASE("striped counters: each stripe starts on a cache line of its own", "[metrics]") {
    observe::Striped<observe::Counter> striped;
    std::vector<std::uintptr_t> where;
    for (std::size_t i = 0; i < observe::stripe_count; ++i) {
        observe::set_stripe(i);
        where.push_back(reinterpret_cast<std::uintptr_t>(&striped.mine()));
    }
    observe::set_stripe(0);
    for (std::size_t i = 0; i < where.size(); ++i) {
        CHECK(where[i] % 64 == 0);
        for (std::size_t j = 0; j < i; ++j) CHECK(where[i] / 64 != where[j] / 64);
    }
}

TEST_CASE("metrics: HTTP/2 connections ended for abuse are counted per defence", "[metrics]") {
    observe::Metrics metrics;
    observe::add(metrics.http2_abuse[0]);
    observe::add(metrics.http2_abuse[2], 3);
    const auto text = observe::prometheus_text(metrics);
    CHECK(text.find("# TYPE sluice_http2_abuse_total counter\n") != std::string::npos);
    CHECK(text.find("sluice_http2_abuse_total{reason=\"rapid_reset\"} 1\n") != std::string::npos);
    CHECK(text.find("sluice_http2_abuse_total{reason=\"continuation_flood\"} 0\n") != std::string::npos);
    CHECK(text.find("sluice_http2_abuse_total{reason=\"control_flood\"} 3\n") != std::string::npos);
}

TEST_CASE("route metrics go once nothing holds them: routes a reload took away", "[metrics]") {
    observe::Metrics metrics;
    auto names = [&] {
        std::vector<std::string> out;
        metrics.for_each_route([&](const observe::RouteMetrics& r) { out.push_back(r.name); });
        return out;
    };
    auto kept = metrics.route_held("kept");
    {
        auto gone = metrics.route_held("gone");  // a snapshot's, until its last request ended
        observe::add(gone->here().requests);
        metrics.prune();
        CHECK(names() == std::vector<std::string>{"-", "kept", "gone"});
        CHECK(metrics.route_held("gone") == gone);  // the same again while held
    }
    metrics.prune();
    CHECK(names() == std::vector<std::string>{"-", "kept"});
    // A route named anew by each of many reloads does not grow the registry.
    for (int i = 0; i < 1000; ++i) {
        auto held = metrics.route_held("r" + std::to_string(i));
        metrics.prune();
    }
    metrics.prune();
    CHECK(names().size() == 2);
    // Named again later: counted from zero.
    CHECK(metrics.route_held("gone")->total(&observe::RouteCounts::requests) == 0);
    // A kept route's limits alike: a limit named anew by each reload does not grow it, one
    // held stays with its counts.
    auto limit_names = [&] {
        std::vector<std::string> out;
        metrics.for_each_route([&](const observe::RouteMetrics& r) {
            if (r.name == "kept")
                for (const auto& l : r.limits) out.push_back(l->name);
        });
        return out;
    };
    auto burst = metrics.limit_held(*kept, "burst");
    burst->count(observe::DecisionKind::limited);
    for (int i = 0; i < 1000; ++i) {
        auto held = metrics.limit_held(*kept, "l" + std::to_string(i));
        metrics.prune(64);
    }
    CHECK(limit_names().size() <= 66);
    metrics.prune();
    CHECK(limit_names() == std::vector<std::string>{"burst"});
    CHECK(metrics.limit_held(*kept, "burst") == burst);
    CHECK(burst->decisions(observe::DecisionKind::limited) == 1);
}
