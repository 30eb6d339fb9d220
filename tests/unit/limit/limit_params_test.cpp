#include <catch2/catch.hpp>

#include "../support/limit_configs.hpp"
#include "limit/limit_params.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;

TEST_CASE("limit params: refill interval is per / rate in whole microseconds", "[limit_params]") {
    struct Row {
        double rate;
        std::chrono::milliseconds per;
        std::int64_t interval_us;
    };
    const Row rows[]{
        {1, 3s, 3'000'000},     // exactly one token every 3 s
        {5, 1s, 200'000},
        {2.5, 1s, 400'000},     // fractional rates count
        {0.5, 1s, 2'000'000},
        {3, 1s, 333'333},       // 333333.3 us: to the nearest microsecond
        {2, 1s, 500'000},
        {1000, 1s, 1'000},
        {1e9, 1s, 1},           // never below 1 us
        {0, 1s, 1'000'000},     // invalid (rejected by config): one per `per`
    };
    for (const auto& row : rows) {
        INFO(row.rate << " per " << row.per.count() << "ms");
        const auto params = limit::token_bucket_params(token_bucket("x", row.rate, row.per, 7));
        CHECK(params.interval_us == row.interval_us);
        CHECK(params.burst == 7);
    }
}

TEST_CASE("limit params: sliding window in microseconds", "[limit_params]") {
    auto params = limit::sliding_window_params(sliding_window("x", 30, 60s));
    CHECK(params.limit == 30);
    CHECK(params.window_us == 60'000'000);
    CHECK(limit::sliding_window_params(sliding_window("x", 1, 0ms)).window_us == 1);
}
