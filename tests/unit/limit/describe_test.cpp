#include <catch2/catch.hpp>

#include "limit/describe.hpp"
#include "../support/limit_configs.hpp"

using namespace sluice;
using namespace std::chrono_literals;

TEST_CASE("describe_limit: a limit's settings in a few words, as /stats shows them") {
    CHECK(limit::describe_limit(test::token_bucket("b", 5, 1s, 10)) == "5 per 1s, burst 10, per client_ip");
    CHECK(limit::describe_limit(test::token_bucket("b", 0.5, 1min, 3, {})) == "0.5 per 1m, burst 3, one counter for all");
    CHECK(limit::describe_limit(test::sliding_window("w", 30, 1min, {test::client_ip(), test::header("x-api-key")})) ==
          "30 per 1m (sliding), per client_ip+header:x-api-key");
    CHECK(limit::describe_limit(test::fixed_window("f", 100, 10s, {test::method(), test::path()}, true)) ==
          "100 per 10s, per method+path, shadow");
    CHECK(limit::describe_limit(test::calendar_window("d", 10000, time::CalendarUnit::day, "Europe/Berlin",
                                                      {test::header("x-api-key")})) ==
          "10000 per day (Europe/Berlin), per header:x-api-key");
    CHECK(limit::describe_limit(test::slots_limit("c", 20, 60s)) == "20 in flight, per client_ip");
    CHECK(limit::describe_limit(test::costing(test::token_bucket("b", 100, 1s, 100), "x-cost")) ==
          "100 per 1s, burst 100, per client_ip, cost header:x-cost");
    auto fixed_cost = test::token_bucket("b", 1, 1s, 5);
    fixed_cost.cost = 2;
    CHECK(limit::describe_limit(fixed_cost) == "1 per 1s, burst 5, per client_ip, cost 2");
    CHECK(limit::describe_limit(test::reporting(test::token_bucket("b", 1000, 60s, 100000), "x-tokens-used", 500)) ==
          "1000 per 1m, burst 100000, per client_ip, cost from the response header x-tokens-used, reserve 500");
    CHECK(limit::describe_limit(test::reporting(test::fixed_window("f", 100, 10s), "x-usage", 1, true)) ==
          "100 per 10s, per client_ip, cost from the response trailer x-usage, reserve 1");
    CHECK(config::algorithm_name(config::Algorithm::leaky_bucket) == "leaky_bucket");
}

TEST_CASE("describe_limit: leaky buckets say how much of a burst goes at once") {
    CHECK(limit::describe_limit(test::leaky_bucket("s", 10, 1s, 40, 0, std::nullopt, {})) ==
          "10 per 1s, burst 40, one counter for all");
    CHECK(limit::describe_limit(test::leaky_bucket("s", 10, 1s, 40, 5)) == "10 per 1s, burst 40, delay 5, per client_ip");
    auto nodelay = test::leaky_bucket("s", 10, 1s, 40);
    nodelay.nodelay = true;
    CHECK(limit::describe_limit(nodelay) == "10 per 1s, burst 40, nodelay, per client_ip");
}
