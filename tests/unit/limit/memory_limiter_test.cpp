// MemoryLimiter with an injected clock: exact boundaries.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "../support/limit_configs.hpp"
#include "limit/cost.hpp"
#include "limit/memory_limiter.hpp"
#include "time/civil.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::Decision;
using limit::MemoryLimiter;
using limit::RequestKeyValues;
using limit::RouteLimits;
using Outcome = Decision::Outcome;

namespace {

constexpr std::int64_t second = 1'000'000;

struct Fixture {
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [this] { return now; }};
    std::vector<config::LimitConfig> limits;
    std::string ip = "203.0.113.7";

    Decision at(std::int64_t t) {
        now = t;
        return limiter.decide(RouteLimits{"login", limits}, RequestKeyValues{ip, "GET", "/login", {}});
    }
};

}  // namespace

TEST_CASE("memory limiter: 1 per 3 s admits exactly one request every 3 s", "[memory_limiter]") {
    Fixture f;
    f.limits = {token_bucket("slow", 1, 3s, 1)};
    const auto t0 = f.now;
    for (int i = 0; i < 4; ++i) {
        const auto due = t0 + i * 3 * second;
        INFO("period " << i);
        if (i > 0) {
            auto early = f.at(due - 1);
            CHECK(early.outcome == Outcome::limited);
            CHECK(early.limits[0].retry_after == 1ms);  // 1 us, rounded up
        }
        auto on_time = f.at(due);
        CHECK(on_time.outcome == Outcome::allowed);
        CHECK(on_time.limits[0].remaining == 0);
        CHECK(on_time.limits[0].reset == 3000ms);
        CHECK(on_time.time_us == due);
    }
}

TEST_CASE("memory limiter: token bucket burst and fractional refill", "[memory_limiter]") {
    Fixture f;
    f.limits = {token_bucket("burst", 2.5, 1s, 2)};  // a token every 400 ms
    const auto t0 = f.now;
    CHECK(f.at(t0).limits[0].remaining == 1);
    CHECK(f.at(t0).limits[0].remaining == 0);
    auto rejected = f.at(t0 + 100'000);
    CHECK(rejected.outcome == Outcome::limited);
    CHECK(rejected.limited_by == 0u);
    CHECK(rejected.limits[0].retry_after == 300ms);
    CHECK(rejected.limits[0].reset == 700ms);
    // 1.5 tokens at +600 ms: one request, and the half token is kept.
    CHECK(f.at(t0 + 600'000).outcome == Outcome::allowed);
    auto half = f.at(t0 + 600'000);
    CHECK(half.outcome == Outcome::limited);
    CHECK(half.limits[0].retry_after == 200ms);
    CHECK(f.at(t0 + 800'000).outcome == Outcome::allowed);
    // Long idle: full, not more.
    CHECK(f.at(t0 + 60 * second).limits[0].remaining == 1);
}

TEST_CASE("memory limiter: sliding window edges are exact", "[memory_limiter]") {
    Fixture f;
    f.limits = {sliding_window("win", 2, 1s)};
    const auto t0 = f.now;
    CHECK(f.at(t0).limits[0].remaining == 1);
    CHECK(f.at(t0 + 500'000).limits[0].remaining == 0);
    auto edge = f.at(t0 + second - 1);
    CHECK(edge.outcome == Outcome::limited);
    CHECK(edge.limits[0].retry_after == 1ms);
    CHECK(edge.limits[0].reset == 501ms);  // 500'001 us until the newest leaves
    auto at_edge = f.at(t0 + second);      // the first request leaves exactly here
    CHECK(at_edge.outcome == Outcome::allowed);
    CHECK(at_edge.limits[0].remaining == 0);
    CHECK(at_edge.limits[0].reset == 1000ms);
    auto next = f.at(t0 + second + 1);
    CHECK(next.outcome == Outcome::limited);
    CHECK(next.limits[0].retry_after == 500ms);  // the +500 ms request leaves at +1.5 s
}

TEST_CASE("memory limiter: requests at the same instant are each counted", "[memory_limiter]") {
    Fixture f;
    f.limits = {sliding_window("win", 3, 1s)};
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    CHECK(f.at(f.now).outcome == Outcome::limited);
}

TEST_CASE("memory limiter: all or nothing, and shadow limits", "[memory_limiter]") {
    Fixture f;
    SECTION("a rejection charges no limit") {
        f.limits = {token_bucket("tb", 1, 1s, 5), sliding_window("sw", 1, 10s)};
        CHECK(f.at(f.now).outcome == Outcome::allowed);
        auto second_request = f.at(f.now);
        CHECK(second_request.outcome == Outcome::limited);
        CHECK(second_request.limited_by == 1u);
        CHECK(second_request.limits[0].allowed);
        CHECK(second_request.limits[0].remaining == 4);  // not charged
        CHECK(f.at(f.now).limits[0].remaining == 4);
    }
    SECTION("a shadow limit that would reject does not block and is not charged") {
        f.limits = {token_bucket("tb", 1, 1s, 5), sliding_window("sw", 1, 10s, {client_ip()}, true)};
        CHECK(f.at(f.now).outcome == Outcome::allowed);
        auto d = f.at(f.now);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.shadow_limited());
        CHECK(d.limits[0].remaining == 3);
        CHECK_FALSE(d.limits[1].allowed);
        CHECK(d.limits[1].retry_after == 10000ms);
    }
    SECTION("a limit whose header is absent does not apply") {
        f.limits = {token_bucket("tb", 1, 1s, 1), sliding_window("user", 1, 10s, {header("x-user")})};
        auto d = f.at(f.now);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.limits[0].applies);
        CHECK_FALSE(d.limits[1].applies);
    }
}

TEST_CASE("memory limiter: a counted limit is checked, and charged after the response", "[memory_limiter][count]") {
    // Five failures a minute: successes (never charged) pass however many; each failure is
    // charged; the sixth attempt is refused before it reaches the upstream, taking nothing
    // from the other limit either.
    Fixture f;
    const auto failures = counting(sliding_window("failures", 5, 60s));
    const auto everything = token_bucket("everything", 1, 1s, 100);
    f.limits = {failures, everything};
    for (int i = 0; i < 20; ++i) {
        const auto d = f.at(f.now);
        REQUIRE(d.outcome == Outcome::allowed);
        CHECK(d.limits[0].remaining == 5);  // checked only: nothing taken
    }
    CHECK(f.at(f.now).limits[1].remaining == 79);
    auto charge = [&f, &failures] {
        const std::vector<config::LimitConfig> charges{charging(failures)};
        return f.limiter.decide(RouteLimits{"login", charges}, RequestKeyValues{f.ip, "GET", "/login", {}});
    };
    for (int i = 0; i < 5; ++i) {
        REQUIRE(f.at(f.now).outcome == Outcome::allowed);
        const auto charged = charge();
        CHECK(charged.outcome == Outcome::allowed);
        CHECK(charged.limits[0].remaining == static_cast<std::uint64_t>(4 - i));
    }
    auto refused = f.at(f.now + second);
    CHECK(refused.outcome == Outcome::limited);
    CHECK(refused.limited_by == 0u);
    CHECK(refused.limits[0].retry_after == 59000ms);
    CHECK(f.at(f.now).limits[1].remaining == 75);  // 74, a token back in that second; the refused took nothing
    // Two requests checked together, both failing: the window counts both, past its limit,
    // and admits again only once two have left.
    f.now += 60 * second;
    for (int i = 0; i < 4; ++i) charge();
    CHECK(f.at(f.now).outcome == Outcome::allowed);  // 4 of 5
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    const auto first = charge();
    const auto second_one = charge();
    CHECK(first.outcome == Outcome::allowed);
    CHECK_FALSE(second_one.limits[0].allowed);  // no room left when it was charged ...
    CHECK(second_one.limits[0].remaining == 0);  // ... and still counted (6 in the window)
    CHECK(f.at(f.now).outcome == Outcome::limited);
    CHECK(f.at(f.now).limits[0].retry_after == 60000ms);
    f.now += 60 * second;
    CHECK(f.at(f.now).outcome == Outcome::allowed);
}

TEST_CASE("memory limiter: a ban refuses a key at once until it ends", "[memory_limiter][ban]") {
    Fixture f;
    auto failures = sliding_window("failures", 2, 60s);
    failures.ban = 600s;
    f.limits = {failures, token_bucket("everything", 1, 1s, 100)};
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    CHECK(f.at(f.now).outcome == Outcome::allowed);
    auto tripped = f.at(f.now);
    CHECK(tripped.outcome == Outcome::limited);
    CHECK(tripped.limits[0].banned);
    CHECK(tripped.limits[0].retry_after == 600000ms);
    CHECK_FALSE(tripped.limits[1].applies);  // a banned decision names the ban alone
    // Two minutes on: the window has room, the ban still refuses; the bucket is not asked.
    auto during = f.at(f.now + 120 * second);
    CHECK(during.outcome == Outcome::limited);
    CHECK(during.limited_by == 0u);
    CHECK(during.limits[0].banned);
    CHECK(during.limits[0].retry_after == 480000ms);
    CHECK_FALSE(during.limits[1].applies);
    CHECK(f.limiter.size() == 3);  // the window, the bucket, the ban
    // The ban ends: admitted again, and the bucket took nothing meanwhile (refilled fully).
    auto after = f.at(f.now + 480 * second);
    CHECK(after.outcome == Outcome::allowed);
    CHECK_FALSE(after.limits[0].banned);
    CHECK(after.limits[1].remaining == 99);
    // Tripped again, then reset (what the admin's reset deletes: the key and its ban).
    f.at(f.now);
    CHECK(f.at(f.now).limits[0].banned);
    CHECK(f.limiter.reset({"sluice:{login:203.0.113.7}:failures", "sluice:{login:203.0.113.7}:failures:ban"}) == 2);
    CHECK(f.at(f.now).outcome == Outcome::allowed);
}

TEST_CASE("memory limiter: keys whose state is empty again are swept", "[memory_limiter]") {
    Fixture f;
    f.limits = {token_bucket("tb", 1, 1s, 1), sliding_window("sw", 5, 1s)};
    for (int i = 0; i < 2000; ++i) {
        f.ip = "10.0.0." + std::to_string(i);
        f.at(f.now);
    }
    CHECK(f.limiter.size() >= 2000);
    f.ip = "10.1.1.1";
    const auto later = f.now + 10 * second;
    // Fewer than 4,096 keys are held: every 16 decisions a worker looks at up to 64 keys of
    // one shard, going on to the next shard when one is done, so 4,100 decisions look at
    // about 16,000 keys, every shard more than twice over.
    for (int i = 0; i < 4100; ++i) f.at(later);
    CHECK(f.limiter.size() <= 2);
}

TEST_CASE("memory limiter: the sweep looks at a few keys at a time", "[memory_limiter]") {
    // A whole shard swept at once stalled the sweeping worker (and that shard) for as long as
    // the shard took: now no decision sweeps more than 64 keys, one look every 64 decisions
    // while 4,096 keys or more are held, and every empty key still goes in the end.
    Fixture f;
    f.limits = {token_bucket("tb", 1, 1s, 1)};
    for (int i = 0; i < 10000; ++i) {
        f.ip = "10." + std::to_string(i / 65536) + "." + std::to_string(i / 256 % 256) + "." + std::to_string(i % 256);
        f.at(f.now);
    }
    REQUIRE(f.limiter.size() == 10000);
    f.ip = "10.200.0.1";
    const auto later = f.now + 10 * second;  // every bucket full again: every key empty
    std::size_t before = f.limiter.size();
    for (int i = 1; i <= 2048; ++i) {
        f.at(later);
        const std::size_t after = f.limiter.size();
        // No decision sweeps more than 64 keys, and at most one look of 64 keys comes per 64
        // decisions (the first one may come at once).
        if (after + 64 < before) FAIL("decision " << i << " swept " << before - after << " keys");
        const std::size_t looks = static_cast<std::size_t>(i) / 64 + 1;
        if (after + looks * 64 < 10000) FAIL("after " << i << " decisions only " << after << " keys are left");
        before = after;
    }
    CHECK(f.limiter.size() < 10000 - 1024);  // and it did sweep meanwhile
    for (int i = 0; i < 20000; ++i) f.at(later);
    CHECK(f.limiter.size() <= 1);
}

TEST_CASE("memory limiter: exact under concurrent workers", "[memory_limiter]") {
    MemoryLimiter limiter("sluice");
    const std::vector<config::LimitConfig> limits{sliding_window("sw", 1500, 3600s)};
    std::atomic<int> allowed{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
        workers.emplace_back([&] {
            for (int i = 0; i < 1000; ++i) {
                auto d = limiter.decide(RouteLimits{"r", limits}, RequestKeyValues{"1.2.3.4", "GET", "/", {}});
                if (d.outcome == Outcome::allowed) ++allowed;
            }
        });
    for (auto& worker : workers) worker.join();
    CHECK(allowed == 1500);
}

namespace {

// Microseconds of a UTC date and time.
std::int64_t utc_us(int y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
    return (sluice::time::days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss) * second;
}

}  // namespace

TEST_CASE("memory limiter: fixed windows aligned to the epoch", "[memory_limiter]") {
    Fixture f;
    f.limits = {fixed_window("tenner", 3, 10s)};
    const std::int64_t start = (f.now / (10 * second) + 1) * 10 * second;  // a window edge
    for (int i = 0; i < 3; ++i) {
        auto d = f.at(start + i * second);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.limits[0].remaining == static_cast<std::uint64_t>(2 - i));
        CHECK(d.limits[0].reset == std::chrono::milliseconds(10'000 - i * 1000));  // to the window's end
    }
    auto full = f.at(start + 9'999'999);
    CHECK(full.outcome == Outcome::limited);
    CHECK(full.limits[0].remaining == 0);
    CHECK(full.limits[0].retry_after == 1ms);  // 1 us to the next window, rounded up
    // The next window starts empty, exactly at its edge.
    auto next = f.at(start + 10 * second);
    CHECK(next.outcome == Outcome::allowed);
    CHECK(next.limits[0].remaining == 2);
    // The old window's key is swept once it has ended.
    f.ip = "198.51.100.1";
    for (int i = 0; i < 2000; ++i) f.at(start + 30 * second);
    CHECK(f.limiter.size() == 1);
}

TEST_CASE("memory limiter: a daily quota resets at midnight in its time zone, 23 h on a DST day", "[memory_limiter]") {
    Fixture f;
    f.limits = {calendar_window("daily", 2, sluice::time::CalendarUnit::day, "Europe/Berlin")};
    // 2026-03-29 starts at 23:00 UTC the day before and lasts 23 hours.
    CHECK(f.at(utc_us(2026, 3, 28, 22, 59, 59)).outcome == Outcome::allowed);  // still the 28th
    CHECK(f.at(utc_us(2026, 3, 28, 22, 59, 59)).outcome == Outcome::allowed);
    CHECK(f.at(utc_us(2026, 3, 28, 22, 59, 59)).outcome == Outcome::limited);
    auto first = f.at(utc_us(2026, 3, 28, 23));
    CHECK(first.outcome == Outcome::allowed);
    CHECK(first.limits[0].reset == std::chrono::hours(23));
    CHECK(f.at(utc_us(2026, 3, 29, 12)).outcome == Outcome::allowed);
    auto limited = f.at(utc_us(2026, 3, 29, 21, 59, 59));
    CHECK(limited.outcome == Outcome::limited);
    CHECK(limited.limits[0].retry_after == 1000ms);
    CHECK(f.at(utc_us(2026, 3, 29, 22)).outcome == Outcome::allowed);  // midnight CEST
    // A month: February 2028 has 29 days.
    f.limits = {calendar_window("monthly", 1, sluice::time::CalendarUnit::month, "UTC")};
    CHECK(f.at(utc_us(2028, 2, 1)).outcome == Outcome::allowed);
    auto feb = f.at(utc_us(2028, 2, 29, 23, 59, 59));
    CHECK(feb.outcome == Outcome::limited);
    CHECK(feb.limits[0].retry_after == 1000ms);
    CHECK(f.at(utc_us(2028, 3, 1)).outcome == Outcome::allowed);
}

TEST_CASE("memory limiter: costs from a header", "[memory_limiter]") {
    Fixture f;
    std::optional<std::string> cost;
    auto ask = [&](std::int64_t t) {
        f.now = t;
        return f.limiter.decide(RouteLimits{"api", f.limits},
                                RequestKeyValues{f.ip, "GET", "/", [&](std::string_view name) -> std::optional<std::string_view> {
                                                     if (name == "x-cost" && cost) return *cost;
                                                     return std::nullopt;
                                                 }});
    };
    SECTION("token bucket") {
        f.limits = {costing(token_bucket("units", 10, 1s, 10), "x-cost", 2)};
        cost = "7";
        auto d = ask(f.now);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.limits[0].remaining == 3);
        cost = "4";  // 3 left: refused, and takes nothing
        d = ask(f.now);
        CHECK(d.outcome == Outcome::limited);
        CHECK(d.limits[0].remaining == 3);
        CHECK(d.limits[0].retry_after == 100ms);  // one token at 10/s
        cost.reset();  // default_cost 2
        CHECK(ask(f.now).limits[0].remaining == 1);
        cost = "abc";  // not a number: default_cost
        CHECK(ask(f.now).outcome == Outcome::limited);
        cost = "0";  // free: always passes, takes nothing
        d = ask(f.now);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.limits[0].remaining == 1);
    }
    SECTION("sliding window") {
        f.limits = {costing(sliding_window("units", 5, 10s), "x-cost")};
        const auto t0 = f.now;
        cost = "3";
        CHECK(ask(t0).limits[0].remaining == 2);
        cost = "2";
        CHECK(ask(t0 + second).limits[0].remaining == 0);
        cost = "4";  // fits once 4 - 0 units have left: the 3 of t0 and 1 of t0+1s
        auto d = ask(t0 + 2 * second);
        CHECK(d.outcome == Outcome::limited);
        CHECK(d.limits[0].retry_after == 9000ms);
        CHECK(ask(t0 + 11 * second).outcome == Outcome::allowed);
    }
    SECTION("fixed window") {
        f.limits = {costing(fixed_window("units", 5, 10s), "x-cost")};
        const std::int64_t start = (f.now / (10 * second) + 1) * 10 * second;
        cost = "5";
        CHECK(ask(start).limits[0].remaining == 0);
        cost = "1";
        CHECK(ask(start + second).outcome == Outcome::limited);
        CHECK(ask(start + 10 * second).limits[0].remaining == 4);
    }
    SECTION("over capacity") {
        f.limits = {costing(token_bucket("units", 10, 1s, 10), "x-cost")};
        cost = "11";
        CHECK(limit::cost_over_capacity(f.limits, RequestKeyValues{f.ip, "GET", "/", [&](std::string_view) -> std::optional<std::string_view> { return *cost; }}) == 0u);
        cost = "99999999999999999999999";  // more digits than any number: still over
        CHECK(limit::request_cost(f.limits[0], RequestKeyValues{f.ip, "GET", "/", [&](std::string_view) -> std::optional<std::string_view> { return *cost; }}) > 10u);
        cost = "10";
        CHECK_FALSE(limit::cost_over_capacity(f.limits, RequestKeyValues{f.ip, "GET", "/", [&](std::string_view) -> std::optional<std::string_view> { return *cost; }}));
        for (const char* odd : {"+3", "-3", "3 ", " 3", "3.0", "0x3", "", "３"}) {
            cost = odd;
            INFO("'" << odd << "'");
            CHECK(limit::request_cost(f.limits[0], RequestKeyValues{f.ip, "GET", "/", [&](std::string_view) -> std::optional<std::string_view> { return *cost; }}) == 1u);
        }
        // Never more than capacity + 1 reaches the arithmetic.
        cost = "18446744073709551615";
        CHECK(limit::bounded_cost(f.limits[0], RequestKeyValues{f.ip, "GET", "/", [&](std::string_view) -> std::optional<std::string_view> { return *cost; }}) == 11u);
    }
}

TEST_CASE("memory limiter: concurrency slots", "[memory_limiter]") {
    Fixture f;
    auto slots_limit = sliding_window("inflight", 2, 0ms);
    slots_limit.algorithm = config::Algorithm::concurrency;
    slots_limit.lease = 2s;
    f.limits = {slots_limit};
    const auto t0 = f.now;
    auto a = f.at(t0);
    CHECK(a.outcome == Outcome::allowed);
    REQUIRE(a.slots.keys.size() == 1);
    CHECK(a.slots.keys[0].second == 2 * second);
    CHECK(a.limits[0].remaining == 1);
    CHECK(a.limits[0].reset == 2000ms);
    auto b = f.at(t0 + 1000);
    CHECK(b.outcome == Outcome::allowed);
    CHECK(b.slots.token != a.slots.token);
    auto refused = f.at(t0 + 2000);
    CHECK(refused.outcome == Outcome::limited);
    CHECK(refused.slots.empty());
    CHECK(refused.limits[0].retry_after == 1000ms);
    // Released by its owner: the place is free at once; another token frees nothing.
    limit::Slots stranger = a.slots;
    stranger.token = "stranger";
    f.limiter.release(stranger);
    CHECK(f.at(t0 + 3000).outcome == Outcome::limited);
    f.limiter.release(a.slots);
    auto c = f.at(t0 + 4000);
    CHECK(c.outcome == Outcome::allowed);
    // Renewed while it runs; an unrenewed slot comes back when its lease ends.
    f.now = t0 + second;
    f.limiter.renew(b.slots);  // b now ends at t0 + 3 s; c at t0 + 2.004 s
    auto late = f.at(t0 + 2 * second + 4000);
    CHECK(late.outcome == Outcome::allowed);  // c's lease ended
    CHECK(f.at(t0 + 2 * second + 5000).outcome == Outcome::limited);  // b (renewed) and late
    CHECK(f.at(t0 + 3 * second + 1000).outcome == Outcome::allowed);  // b's renewed lease ended
}

TEST_CASE("memory limiter: leaky bucket holds a burst back and lets it out at the rate", "[memory_limiter][leaky]") {
    Fixture f;
    const auto t0 = f.now;
    SECTION("rate 10/s, burst 40: 40 at once leave 100 ms apart, the 41st is limited") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40)};
        for (int i = 0; i < 40; ++i) {
            INFO("request " << i);
            const auto d = f.at(t0);
            REQUIRE(d.outcome == Outcome::allowed);
            CHECK(d.wait() == std::chrono::milliseconds(100 * i));
            CHECK(d.limits[0].remaining == static_cast<std::uint64_t>(39 - i));
            CHECK(d.limits[0].reset == std::chrono::milliseconds(100 * (i + 1)));  // empty again then
        }
        const auto over = f.at(t0);
        CHECK(over.outcome == Outcome::limited);
        CHECK(over.limits[0].retry_after == 100ms);  // one leaves, one fits
        CHECK(over.wait() == 0ms);
        // Taking nothing: 100 ms later exactly one fits, and waits for the 39 still ahead of it.
        const auto later = f.at(t0 + second / 10);
        CHECK(later.outcome == Outcome::allowed);
        CHECK(later.wait() == 3900ms);
        CHECK(f.at(t0 + second / 10).outcome == Outcome::limited);
    }
    SECTION("delay: 10 passes the first request and 10 more at once (nginx's delay), the rest wait") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40, 10)};
        for (int i = 0; i < 40; ++i) {
            INFO("request " << i);
            const auto d = f.at(t0);
            REQUIRE(d.outcome == Outcome::allowed);
            CHECK(d.wait() == std::chrono::milliseconds(i <= 10 ? 0 : 100 * (i - 10)));
        }
        CHECK(f.at(t0).outcome == Outcome::limited);
    }
    SECTION("nodelay: the whole burst at once, then one per interval") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40)};
        f.limits[0].nodelay = true;
        for (int i = 0; i < 40; ++i) CHECK(f.at(t0).wait() == 0ms);
        CHECK(f.at(t0).outcome == Outcome::limited);
        CHECK(f.at(t0 + second / 10).wait() == 0ms);
    }
    SECTION("max_wait: a request that would wait longer is limited, taking nothing") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40, 0, 250ms)};
        for (int i = 0; i < 3; ++i) CHECK(f.at(t0).wait() == std::chrono::milliseconds(100 * i));
        const auto d = f.at(t0);  // would wait 300 ms
        CHECK(d.outcome == Outcome::limited);
        CHECK(d.limits[0].retry_after == 50ms);  // then it would wait 250 ms
        const auto then = f.at(t0 + 50'000);
        CHECK(then.outcome == Outcome::allowed);
        CHECK(then.wait() == 250ms);
    }
    SECTION("may_wait false (max_waiting reached): what would wait is limited, what passes at once passes") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40, 1)};
        auto ask = [&](bool may_wait) {
            return f.limiter.decide(RouteLimits{"login", f.limits}, RequestKeyValues{f.ip, "GET", "/login", {}, may_wait});
        };
        f.now = t0;
        CHECK(ask(false).outcome == Outcome::allowed);  // the first and `delay` more go at once
        CHECK(ask(false).outcome == Outcome::allowed);
        CHECK(ask(false).outcome == Outcome::limited);
        const auto d = ask(true);
        CHECK(d.outcome == Outcome::allowed);
        CHECK(d.wait() == 100ms);
    }
    SECTION("waits are exact to the microsecond: 3 per second leave 333,333 us apart") {
        f.limits = {leaky_bucket("shape", 3, 1s, 5)};
        for (int i = 0; i < 5; ++i) CHECK(f.at(t0).wait() == std::chrono::microseconds(333'333 * i));
    }
    SECTION("a shadow leaky bucket never holds a request back") {
        f.limits = {leaky_bucket("shape", 10, 1s, 2, 0, std::nullopt, {client_ip()}, true)};
        CHECK(f.at(t0).wait() == 0ms);
        const auto second_one = f.at(t0);
        CHECK(second_one.limits[0].wait == 100ms);  // reported
        CHECK(second_one.wait() == 0ms);            // not applied
        const auto third = f.at(t0);
        CHECK(third.outcome == Outcome::allowed);
        CHECK(third.shadow_limited());
    }
    SECTION("with another limit that rejects, the leaky bucket takes nothing") {
        f.limits = {leaky_bucket("shape", 10, 1s, 40), token_bucket("cap", 100, 1s, 2)};
        CHECK(f.at(t0).wait() == 0ms);
        CHECK(f.at(t0).wait() == 100ms);
        CHECK(f.at(t0).outcome == Outcome::limited);  // by cap
        // Two in the bucket at t0, one left by t0 + 100 ms: a third waits for that one only.
        CHECK(f.at(t0 + second / 10).wait() == 100ms);
    }
}

TEST_CASE("memory limiter: max_keys bounds the keys held, evicting the least recently used", "[memory_limiter]") {
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 4096};
    const std::vector<config::LimitConfig> limits{token_bucket("hourly", 1, 3600s, 1)};
    auto decide = [&](const std::string& ip) {
        return limiter.decide(RouteLimits{"api", limits}, RequestKeyValues{ip, "GET", "/", {}}).outcome;
    };
    // Two clients use up their bucket.
    CHECK(decide("198.51.100.1") == Outcome::allowed);
    CHECK(decide("198.51.100.1") == Outcome::limited);
    CHECK(decide("198.51.100.2") == Outcome::allowed);
    // 40,000 other clients come by once each; the first client keeps asking (and being
    // refused) meanwhile, the second is idle.
    std::uint64_t others = 0;
    for (int i = 0; i < 40'000; ++i) {
        now += 1;
        CHECK(decide("10." + std::to_string(i / 65536) + "." + std::to_string(i / 256 % 256) + "." +
                     std::to_string(i % 256)) == Outcome::allowed);
        ++others;
        if (i % 50 == 0) REQUIRE(decide("198.51.100.1") == Outcome::limited);
        REQUIRE(limiter.size() <= 4096);
    }
    CHECK(limiter.size() <= 4096);
    CHECK(limiter.size() > 4096 - MemoryLimiter::shard_count * 8);  // each shard close to its share
    CHECK(limiter.evictions() == others + 2 - limiter.size());      // every key evicted held state
    // The busy client is still refused; the idle one was evicted and starts again from empty.
    CHECK(decide("198.51.100.1") == Outcome::limited);
    CHECK(decide("198.51.100.2") == Outcome::allowed);
    // A smaller bound (a reload) applies as keys come: no shard keeps more than its share.
    limiter.set_max_keys(4096);  // the floor: 64 per shard
    const auto before = limiter.evictions();
    for (int i = 0; i < 1000; ++i) decide("192.0.2." + std::to_string(i % 256) + "." + std::to_string(i));
    CHECK(limiter.size() <= 4096);
    CHECK(limiter.evictions() > before);
}

TEST_CASE("memory limiter: the bound holds in bytes too: long keys, large windows", "[memory_limiter]") {
    // 40,000 keys: 10.24 MB (MemoryLimiter::bytes_per_key each, on average).
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 40'000};
    const std::size_t budget = 40'000 * MemoryLimiter::bytes_per_key;
    // Keys of 4 KB (a header's value a client chose): about 2,500 fit, not 40,000 (160 MB).
    const std::vector<config::LimitConfig> hourly{token_bucket("hourly", 1, 3600s, 1)};
    for (int i = 0; i < 20'000; ++i) {
        now += 1;
        REQUIRE(limiter.decide(RouteLimits{"api", hourly},
                               RequestKeyValues{std::to_string(i) + std::string(4000, 'k'), "GET", "/", {}})
                    .outcome == Outcome::allowed);
    }
    CHECK(limiter.bytes() <= budget + MemoryLimiter::shard_count * 8'000);  // a share, and a key over it at most
    CHECK(limiter.size() < 3'000);
    CHECK(limiter.evictions() == 20'000 - limiter.size());
    // A request of 1,000 units is one entry of a sliding window's log, not 1,000 (a cost a
    // client names in a header must not make the store allocate it): 5,000 such keys fit.
    const std::vector<config::LimitConfig> windows{
        [] {
            auto limit = sliding_window("logged", 100'000, 3600s);
            limit.cost = 1'000;
            return limit;
        }()};
    const std::size_t size_before = limiter.size();
    const std::uint64_t evicted_before = limiter.evictions();
    for (int i = 0; i < 5'000; ++i) {
        now += 1;
        REQUIRE(limiter.decide(RouteLimits{"api", windows}, RequestKeyValues{"10.1." + std::to_string(i), "GET", "/", {}})
                    .outcome == Outcome::allowed);
    }
    CHECK(limiter.bytes() <= budget + MemoryLimiter::shard_count * 8'200);
    CHECK(limiter.size() + (limiter.evictions() - evicted_before) == size_before + 5'000);
    CHECK(limiter.size() > 5'000);  // (keys of 4 KB made room)
    {
        // Counted as 1,000 each: the 100th request of a key is its last.
        const RequestKeyValues one{"10.1.0", "GET", "/", {}};
        for (int i = 1; i < 100; ++i) REQUIRE(limiter.decide(RouteLimits{"api", windows}, one).outcome == Outcome::allowed);
        CHECK(limiter.decide(RouteLimits{"api", windows}, one).outcome == Outcome::limited);
    }
    {
        // A log of many requests (8 bytes each) is counted: 600 keys of 1,000 requests are 5
        // MB, over the 2 MB of a store of 8,000 keys.
        MemoryLimiter logs{"sluice", [&now] { return now; }, 8'000};
        const std::vector<config::LimitConfig> large{sliding_window("large", 100'000, 3600s)};
        for (int key = 0; key < 600; ++key)
            for (int i = 0; i < 1'000; ++i) {
                now += 1;
                logs.decide(RouteLimits{"api", large}, RequestKeyValues{"10.2." + std::to_string(key), "GET", "/", {}});
            }
        CHECK(logs.bytes() <= 8'000 * MemoryLimiter::bytes_per_key + MemoryLimiter::shard_count * 8'400);
        CHECK(logs.size() < 320);
    }
    // The client asking meanwhile keeps its window (the most recent keys stay): refused at its limit.
    const std::vector<config::LimitConfig> small{sliding_window("small", 3, 3600s)};
    for (int i = 0; i < 3; ++i) CHECK(limiter.decide(RouteLimits{"api", small}, RequestKeyValues{"198.51.100.9", "GET", "/", {}}).outcome == Outcome::allowed);
    CHECK(limiter.decide(RouteLimits{"api", small}, RequestKeyValues{"198.51.100.9", "GET", "/", {}}).outcome == Outcome::limited);
    // What is emptied or swept is counted out again.
    now += 7200 * second;
    for (int i = 0; i < 40'000; ++i) limiter.decide(RouteLimits{"api", small}, RequestKeyValues{"192.0.2.1", "GET", "/", {}});
    CHECK(limiter.size() <= 2);
    CHECK(limiter.bytes() <= 2 * 400);
}

TEST_CASE("memory limiter: the bytes bound is the store's, not a shard's: a large key empties nothing",
          "[memory_limiter]") {
    // A site-wide window whose log grows to 2.4 MB (its capacity more), far past a shard's
    // 64th of the 10 MB bound, beside 2,000 clients' own windows: nothing is evicted, and
    // every count stays exact.
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 40'000};
    const std::vector<config::LimitConfig> limits{sliding_window("site", 1'000'000, 3600s, {}),
                                                  sliding_window("client", 200, 3600s)};
    auto decide = [&](int client) {
        now += 1;
        return limiter.decide(RouteLimits{"api", limits},
                              RequestKeyValues{"10.2." + std::to_string(client / 256) + "." + std::to_string(client % 256),
                                               "GET", "/", {}});
    };
    for (int round = 0; round < 150; ++round)
        for (int client = 0; client < 2'000; ++client) REQUIRE(decide(client).outcome == Outcome::allowed);
    CHECK(limiter.evictions() == 0);
    CHECK(limiter.size() == 2'001);
    const auto last = decide(7);
    CHECK(last.limits[0].remaining == 1'000'000 - 300'001);
    CHECK(last.limits[1].remaining == 200 - 151);
    for (int i = 0; i < 49; ++i) CHECK(decide(7).outcome == Outcome::allowed);
    CHECK(decide(7).outcome == Outcome::limited);
}

TEST_CASE("memory limiter: reset and the sweep keep the recency list whole", "[memory_limiter]") {
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 4096};
    const std::vector<config::LimitConfig> limits{token_bucket("fast", 10, 1s, 1)};
    auto decide = [&](const std::string& ip) {
        return limiter.decide(RouteLimits{"api", limits}, RequestKeyValues{ip, "GET", "/", {}}).outcome;
    };
    // Keys that empty within 100 ms, swept as decisions go by, reset in between, and past
    // the bound: the list and the map must agree throughout (ASan would see a dangling link).
    for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 5000; ++i) decide("10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256));
        CHECK(limiter.reset({"sluice:{api}:fast:10.0.0.1", "sluice:{api}:fast:10.0.0.2"}) <= 2);
        now += second;
        CHECK(limiter.size() <= 4096);
    }
    CHECK(decide("10.0.0.1") == Outcome::allowed);
}

TEST_CASE("memory limiter: a concurrency slot held is never evicted", "[memory_limiter]") {
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 4096};
    const std::vector<config::LimitConfig> one_at_a_time{slots_limit("inflight", 1, 60s, {})};
    const std::vector<config::LimitConfig> hourly{token_bucket("hourly", 1, 3600s, 1)};
    auto held = limiter.decide(RouteLimits{"slow", one_at_a_time}, RequestKeyValues{"198.51.100.1", "GET", "/", {}});
    REQUIRE(held.outcome == Outcome::allowed);
    // 20,000 other keys: every shard is over its share of 64 many times.
    for (int i = 0; i < 20'000; ++i)
        limiter.decide(RouteLimits{"api", hourly},
                       RequestKeyValues{"10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256), "GET", "/", {}});
    CHECK(limiter.evictions() > 0);
    // The request under way still holds the only slot.
    CHECK(limiter.decide(RouteLimits{"slow", one_at_a_time}, RequestKeyValues{"198.51.100.2", "GET", "/", {}}).outcome ==
          Outcome::limited);
    limiter.release(held.slots);
    CHECK(limiter.decide(RouteLimits{"slow", one_at_a_time}, RequestKeyValues{"198.51.100.2", "GET", "/", {}}).outcome ==
          Outcome::allowed);
}

TEST_CASE("memory limiter: a sliding window's sums of units go once its requests of several units have left",
          "[memory_limiter]") {
    // A request of 5 units among requests of one: the log numbers its units (16 bytes a
    // request) while it is there, and goes back to 8 bytes a request once it has left.
    std::int64_t now = 1'700'000'000 * second;
    MemoryLimiter limiter{"sluice", [&now] { return now; }, 1'000};
    auto heavy = sliding_window("w", 1'000, 1s);
    heavy.cost = 5;
    const std::vector<config::LimitConfig> heavy_route{heavy}, light_route{sliding_window("w", 1'000, 1s)};
    auto ask = [&](const std::vector<config::LimitConfig>& limits) {
        return limiter.decide(RouteLimits{"api", limits}, RequestKeyValues{"192.0.2.1", "GET", "/", {}});
    };
    REQUIRE(ask(heavy_route).limits[0].remaining == 995);
    for (int i = 1; i <= 100; ++i) {
        now += 1'000;
        REQUIRE(ask(light_route).limits[0].remaining == static_cast<std::uint64_t>(995 - i));
    }
    const std::size_t with_sums = limiter.bytes();
    now += 950'000;  // the 5 units and the first 50 of one have left
    CHECK(ask(light_route).limits[0].remaining == 1'000 - 50 - 1);
    CHECK(limiter.bytes() + 100 * 8 <= with_sums);
    now += 1'000;
    CHECK(ask(light_route).limits[0].remaining == 1'000 - 50 - 1);  // (one more left, one more came)
}
