// RedisLimiter on a real redis-server: route-level decisions, deadline, store errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <atomic>
#include <set>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "../support/io_loop.hpp"
#include "../support/limit_configs.hpp"
#include "../support/redis_server.hpp"
#include "limit/decide_script.hpp"
#include "limit/redis_limiter.hpp"
#include "limit/shared_batches.hpp"
#include "redis/topology.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::Decision;
using limit::RedisLimiter;
using limit::RequestKeyValues;
using limit::RouteLimits;
using Outcome = Decision::Outcome;

namespace {

redis::RedisConnectionOptions options_for(std::uint16_t port) {
    redis::RedisConnectionOptions options;
    options.port = port;
    options.backoff_min = 10ms;
    options.backoff_max = 100ms;
    return options;
}

struct Fixture {
    // A long default deadline: on a loaded machine a working Redis must not turn a decision
    // into a store error. The deadline test passes a short one.
    explicit Fixture(std::uint16_t port, std::chrono::milliseconds timeout = 2s,
                     std::shared_ptr<limit::SharedBatches> shared = {})
        : connection(io, options_for(port)),
          topology(redis::topology_of(connection)),
          limiter(io, *topology, "sluice", timeout, true, std::move(shared)) {
        connection.start();
    }

    void wait_ready() { REQUIRE(run_until(io, [&] { return connection.ready(); })); }

    // Issues a decision; `decisions` collects every callback.
    void decide_async(const std::vector<config::LimitConfig>& limits, std::optional<std::string> user = {}) {
        limiter.decide(RouteLimits{"login", limits},
                       RequestKeyValues{"203.0.113.7", "POST", "/login",
                                        [&user](std::string_view name) -> std::optional<std::string_view> {
                                            if (name == "x-user" && user) return *user;
                                            return std::nullopt;
                                        }},
                       [this](Decision d) { decisions.push_back(std::move(d)); });
    }

    Decision decide(const std::vector<config::LimitConfig>& limits, std::optional<std::string> user = {}) {
        const auto before = decisions.size();
        decide_async(limits, std::move(user));
        REQUIRE(decisions.size() == before);  // never answered inside decide()
        REQUIRE(run_until(io, [&] { return decisions.size() > before; }));
        return decisions.back();
    }

    boost::asio::io_context io;
    redis::RedisConnection connection;
    std::unique_ptr<redis::Topology> topology;
    RedisLimiter limiter;
    std::vector<Decision> decisions;
};

}  // namespace

TEST_CASE("redis limiter: one round trip decides every limit of the route", "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port());
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 2),
                                                  sliding_window("minute", 3, 60s)};

    auto first = f.decide(limits);
    CHECK(first.outcome == Outcome::allowed);
    REQUIRE(first.limits.size() == 2);
    CHECK(first.limits[0].remaining == 1);
    CHECK(first.limits[1].remaining == 2);
    CHECK(first.time_us > 0);
    CHECK(check.integer({"EXISTS", "sluice:{login:203.0.113.7}:burst", "sluice:{login:203.0.113.7}:minute"}) == 2);

    CHECK(f.decide(limits).outcome == Outcome::allowed);
    auto third = f.decide(limits);
    CHECK(third.outcome == Outcome::limited);
    CHECK(third.limited_by == 0u);
    CHECK(third.limits[0].retry_after > 0ms);
    CHECK(third.limits[1].allowed);
    CHECK(third.limits[1].remaining == 1);  // not charged for the rejected request
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:minute"}) == 2);
}

TEST_CASE("redis limiter: a sliding window whose cost comes from a header keeps a request as one member",
          "[redis_limiter][redis]") {
    // A client naming the largest cost the limit allows made Redis add that many members (10
    // ms of Redis for 10,000). Limits whose requests may cost more than 1 are weighted
    // (lua/sliding_window.lua): one member and the mark. A limit of cost 1 is as before.
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port());
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{costing(sliding_window("units", 20'000, 60s), "x-user"),
                                                  sliding_window("plain", 5, 60s)};
    auto first = f.decide(limits, "10000");
    REQUIRE(first.outcome == Outcome::allowed);
    CHECK(first.limits[0].remaining == 10'000);
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:units"}) == 2);
    CHECK(check.text({"ZSCORE", "sluice:{login:203.0.113.7}:units", "w"}) == "-9999");
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:plain"}) == 1);
    auto second = f.decide(limits, "10001");
    CHECK(second.outcome == Outcome::limited);
    CHECK(second.limits[0].remaining == 10'000);
    CHECK(f.decide(limits, "10000").limits[0].remaining == 0);
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:units"}) == 3);
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:plain"}) == 2);
}

TEST_CASE("decide script: a sliding window is weighted where a request may cost more than one unit, and on "
          "routes with plans",
          "[lua]") {
    auto y = [](const config::LimitConfig& limit) {
        std::vector<std::string> args;
        limit::append_decide_args(limit, args);
        return args.back();
    };
    const auto plain = sliding_window("w", 5, 1s);
    CHECK(y(plain) == "1000000");
    CHECK(y(costing(plain, "x-cost")) == "1000000,w");
    auto fixed = plain;
    fixed.cost = 2;
    CHECK(y(fixed) == "1000000,w");
    auto reported = plain;
    reported.response_cost_field = "x-tokens";
    CHECK(y(reported) == "1000000,w");
    // One limit name on a route with plans shares its key across the plans (one may take a
    // header's cost, another one unit): every plan's counts it alike.
    auto planned = plain;
    planned.keeps_used = true;
    CHECK(y(planned) == "1000000,w");
}

TEST_CASE("redis limiter: shadow limits and limits that do not apply", "[redis_limiter][redis]") {
    RedisServer server;
    Fixture f(server.port());
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{sliding_window("shadow", 1, 60s, {client_ip()}, true),
                                                  token_bucket("per_user", 1, 60s, 1, {header("x-user")})};

    auto a = f.decide(limits);
    CHECK(a.outcome == Outcome::allowed);
    CHECK_FALSE(a.limits[1].applies);
    auto b = f.decide(limits, "alice");
    CHECK(b.outcome == Outcome::allowed);
    CHECK(b.shadow_limited());
    CHECK(b.limits[1].applies);
    auto c = f.decide(limits, "alice");
    CHECK(c.outcome == Outcome::limited);
    CHECK(c.limited_by == 1u);
}

TEST_CASE("redis limiter: no applicable limit means no round trip", "[redis_limiter][redis]") {
    Fixture f(1);  // nothing listens: any round trip would be a store error
    auto d = f.decide({token_bucket("per_user", 1, 60s, 1, {header("x-user")})});
    CHECK(d.outcome == Outcome::allowed);
    CHECK_FALSE(d.limits[0].applies);
}

// Calls of one command so far, from INFO commandstats.
long long command_calls(SyncRedis& redis, const std::string& command) {
    const auto info = redis.text({"INFO", "commandstats"});
    const auto at = info.find("cmdstat_" + command + ":calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(info.substr(at + command.size() + 15));
}

TEST_CASE("redis limiter: decisions asked for together go out as one call and are each counted",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port(), 2s);
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{sliding_window("w", 50, 60s)};
    for (int i = 0; i < 60; ++i) f.decide_async(limits);
    REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 60; }));
    for (int i = 0; i < 50; ++i) {
        INFO("decision " << i);
        CHECK(f.decisions[i].outcome == Outcome::allowed);
        CHECK(f.decisions[i].limits[0].remaining == static_cast<std::uint64_t>(49 - i));
    }
    for (int i = 50; i < 60; ++i) CHECK(f.decisions[i].outcome == Outcome::limited);
    CHECK(check.integer({"ZCARD", "sluice:{login:203.0.113.7}:w"}) == 50);
    CHECK(command_calls(check, "fcall") == 1);

    SECTION("a long run is split into calls of at most 64 requests, in order") {
        const std::vector<config::LimitConfig> big{token_bucket("tb", 100, 60s, 100)};
        for (int i = 0; i < 150; ++i) f.decide_async(big);
        REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 210; }));
        for (int i = 0; i < 150; ++i) {
            INFO("decision " << i);
            const auto& d = f.decisions[60 + i];
            CHECK(d.outcome == (i < 100 ? Outcome::allowed : Outcome::limited));
            if (i < 100) CHECK(d.limits[0].remaining == static_cast<std::uint64_t>(99 - i));
        }
        CHECK(command_calls(check, "fcall") == 1 + 3);
    }
}

TEST_CASE("redis limiter: slots given back in one turn go as one call, ahead of the decisions after them",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port(), 2s);
    f.wait_ready();
    const std::string key = "sluice:{login:203.0.113.7}:c";
    const std::vector<config::LimitConfig> limits{slots_limit("c", 3, 60s)};
    for (int i = 0; i < 3; ++i) REQUIRE(f.decide(limits).outcome == Outcome::allowed);
    REQUIRE(f.decide(limits).outcome == Outcome::limited);
    REQUIRE(check.integer({"ZCARD", key}) == 3);
    const auto evalsha_before = command_calls(check, "evalsha");

    // A decision asked for first in the turn, the three slots given back after it: its call
    // goes at the end of the turn, after theirs, and finds the three free.
    f.decide_async(limits);
    for (int i = 0; i < 3; ++i) f.limiter.release(f.decisions[i].slots);
    REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 5; }));
    CHECK(f.decisions[4].outcome == Outcome::allowed);
    CHECK(f.decisions[4].limits[0].remaining == 2);
    CHECK(command_calls(check, "evalsha") == evalsha_before + 1);  // one call for three
    CHECK(command_calls(check, "eval") == 0);
    CHECK(check.integer({"ZCARD", key}) == 1);
    CHECK(check.run({"ZSCORE", key, f.decisions[4].slots.token}).reply.type == redis::RedisReply::Type::string);

    SECTION("without a decision after them: at the end of the turn") {
        f.limiter.release(f.decisions[4].slots);
        REQUIRE(run_until(f.io, [&] { return check.integer({"EXISTS", key}) == 0; }));
        CHECK(command_calls(check, "evalsha") == evalsha_before + 2);
    }
    SECTION("a crowd of them: in calls of at most 512") {
        const std::vector<config::LimitConfig> many{slots_limit("c", 1000, 60s)};
        for (int i = 0; i < 600; ++i) f.decide_async(many);
        REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 605; }));
        for (int i = 5; i < 605; ++i) REQUIRE(f.decisions[i].outcome == Outcome::allowed);
        REQUIRE(check.integer({"ZCARD", key}) == 601);
        const auto before = command_calls(check, "evalsha");
        for (int i = 4; i < 605; ++i) f.limiter.release(f.decisions[i].slots);
        REQUIRE(run_until(f.io, [&] { return check.integer({"EXISTS", key}) == 0; }));
        CHECK(command_calls(check, "evalsha") == before + 2);
    }
    SECTION("a worker that stops sends them first, and lets its connections go once Redis took them") {
        f.limiter.release(f.decisions[4].slots);
        bool stopped = false;
        long long left = -1;
        f.limiter.stop([&] {
            stopped = true;
            left = check.integer({"EXISTS", key});
        });
        CHECK_FALSE(stopped);  // (closing the connection now would drop the release unsent)
        REQUIRE(run_until(f.io, [&] { return stopped; }));
        CHECK(left == 0);
    }
    SECTION("without releases to send a worker stops at once") {
        bool stopped = false;
        f.limiter.stop([&] { stopped = true; });
        CHECK(stopped);
    }
}

TEST_CASE("redis limiter: the deadline answers when redis is paused; the late reply is ignored",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis admin(server.port());
    Fixture f(server.port(), 25ms);
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10)};
    REQUIRE(f.decide(limits).outcome == Outcome::allowed);

    admin.must({"CLIENT", "PAUSE", "500"});
    const auto start = std::chrono::steady_clock::now();
    auto late = f.decide(limits);
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(late.outcome == Outcome::store_error);
    CHECK_THAT(late.error, Catch::Contains("25ms"));
    CHECK(took >= 25ms);
    CHECK(took < 200ms);

    run_for(f.io, 700ms);  // the pause ends and the reply arrives
    CHECK(f.decisions.size() == 2);
    CHECK(f.connection.ready());
    CHECK(f.decide(limits).outcome == Outcome::allowed);
}

TEST_CASE("redis limiter: a connection's unanswered calls are bounded; past them a batch fails at once",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis admin(server.port());
    Fixture f(server.port(), 5s);
    f.wait_ready();
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 1000000, 1s, 1000000)};
    REQUIRE(f.decide(limits).outcome == Outcome::allowed);
    admin.must({"CLIENT", "PAUSE", "1000"});
    // Full batches (64) are sent at once, a reply in flight or not: 33 of them.
    for (int i = 0; i < 64 * 33; ++i) f.decide_async(limits);
    CHECK(f.decisions.size() == 1);  // (never answered inside decide())
    run_for(f.io, 300ms);            // Redis paused: nothing answered but the batch past the bound
    REQUIRE(f.decisions.size() == 1 + 64);
    for (std::size_t i = 1; i < f.decisions.size(); ++i) {
        CHECK(f.decisions[i].outcome == Outcome::store_error);
        CHECK_THAT(f.decisions[i].error, Catch::Contains("calls of this worker unanswered"));
    }
    // Once Redis answers, the 32 calls it held are answered, and the limiter works on.
    REQUIRE(run_until(f.io, [&] { return f.decisions.size() == 1 + 64 * 33; }, 5s));
    CHECK(f.decisions.back().outcome == Outcome::allowed);
    CHECK(f.decide(limits).outcome == Outcome::allowed);
}

TEST_CASE("redis limiter: store errors", "[redis_limiter][redis]") {
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10)};
    SECTION("redis down") {
        Fixture f(1);
        auto d = f.decide(limits);
        CHECK(d.outcome == Outcome::store_error);
        CHECK(d.limits.empty());
        CHECK_FALSE(d.error.empty());
    }
    SECTION("an error reply") {
        RedisServer server;
        SyncRedis admin(server.port());
        Fixture f(server.port());
        f.wait_ready();
        admin.must({"CONFIG", "SET", "maxmemory", "1"});
        auto d = f.decide(limits);
        CHECK(d.outcome == Outcome::store_error);
        CHECK_THAT(d.error, Catch::Contains("OOM"));
    }
    SECTION("the connection drops mid-decision") {
        RedisServer server;
        Fixture f(server.port(), 2s);
        f.wait_ready();
        server.suspend();
        f.decide_async(limits);
        run_for(f.io, 20ms);
        server.kill();
        REQUIRE(run_until(f.io, [&] { return !f.decisions.empty(); }));
        CHECK(f.decisions[0].outcome == Outcome::store_error);
    }
}

namespace {

// Decide calls Redis has run since start: FCALL, EVALSHA and EVAL.
std::int64_t script_calls(SyncRedis& redis) {
    auto info = redis.text({"INFO", "commandstats"});
    std::int64_t total = 0;
    for (const char* name : {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
        auto at = info.find(name);
        if (at != std::string::npos) total += std::stoll(info.substr(at + std::string(name).size()));
    }
    return total;
}

}  // namespace

TEST_CASE("redis limiter: a rejection is remembered until its retry time, without round trips",
          "[redis_limiter][redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    Fixture f(server.port());
    f.wait_ready();
    // One token, refilled after 400 ms.
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 1, 400ms, 1)};

    CHECK(f.decide(limits).outcome == Outcome::allowed);
    auto rejected = f.decide(limits);
    REQUIRE(rejected.outcome == Outcome::limited);
    const auto calls = script_calls(check);
    CHECK(f.limiter.remembered_rejections() == 1);

    for (int i = 0; i < 20; ++i) {
        auto again = f.decide(limits);
        CHECK(again.outcome == Outcome::limited);
        CHECK(again.limited_by == 0u);
        CHECK(again.limits[0].retry_after > 0ms);
        CHECK(again.limits[0].retry_after <= rejected.limits[0].retry_after);
        CHECK(again.time_us == 0);  // not a store decision
    }
    CHECK(script_calls(check) == calls);  // answered without Redis

    SECTION("after the retry time Redis decides again, and admits") {
        std::this_thread::sleep_for(rejected.limits[0].retry_after + 20ms);
        CHECK(f.decide(limits).outcome == Outcome::allowed);
        CHECK(script_calls(check) == calls + 1);
    }
    SECTION("a reload forgets what was remembered") {
        f.limiter.clear_rejections();
        CHECK(f.decide(limits).outcome == Outcome::limited);
        CHECK(script_calls(check) == calls + 1);
    }
    SECTION("a client with another key is not affected") {
        const std::vector<config::LimitConfig> per_user{token_bucket("burst", 1, 400ms, 1, {header("x-user")})};
        CHECK(f.decide(per_user, "bob").outcome == Outcome::allowed);
        CHECK(script_calls(check) == calls + 1);
    }
}

// ---- several workers, one queue of batches (shared_batches.hpp) ------------------------

namespace {

// Runs two workers' loops by turns (as their threads would) until `done()`.
bool run_both_until(boost::asio::io_context& a, boost::asio::io_context& b, const std::function<bool()>& done,
                    std::chrono::milliseconds limit = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
        run_slice(a, 1ms);
        run_slice(b, 1ms);
    }
    return done();
}

// Runs what is ready; the number of handlers run.
std::size_t polled(boost::asio::io_context& io) {
    io.restart();
    return io.poll();
}

// A decision asked for goes out (or into the queue) on its worker's next turn: runs `f`'s loop
// until the queue is as `expected` says, however busy the machine.
void run_until_queue(Fixture& f, const std::function<bool()>& expected) {
    REQUIRE(run_until(f.io, expected));
}

// Two workers' limiters on one Redis sharing a queue of batches, connected.
struct TwoWorkers {
    TwoWorkers(std::uint16_t port, std::chrono::milliseconds timeout)
        : shared(std::make_shared<limit::SharedBatches>()), a(port, timeout, shared), b(port, timeout, shared) {
        a.wait_ready();
        b.wait_ready();
    }
    // With Redis suspended: a's first decision goes in a's call, a's second waits behind it,
    // then b's call carries b's own and a's second.
    void a_twice_then_b(const std::vector<config::LimitConfig>& limits) {
        a.decide_async(limits);
        run_until_queue(a, [&] { return shared->in_flight() == 1; });
        a.decide_async(limits);
        run_until_queue(a, [&] { return shared->waiting() == 1; });
        b.decide_async(limits);
        run_until_queue(b, [&] { return shared->in_flight() == 2 && shared->waiting() == 0; });
    }
    std::shared_ptr<limit::SharedBatches> shared;
    Fixture a;
    Fixture b;
};

limit::SharedBatches::Part part_of(std::uint64_t member, std::uint64_t id, std::size_t requests) {
    limit::SharedBatches::Part part;
    part.member = member;
    part.id = id;
    for (std::size_t r = 0; r < requests; ++r) {
        part.keys.push_back("k" + std::to_string(member) + "." + std::to_string(id) + "." + std::to_string(r));
        part.args.plan_of.push_back(0);
        part.args.tokens.emplace_back();
    }
    part.args.plans.push_back("token_bucket 0 1 1000 5");
    return part;
}

}  // namespace

TEST_CASE("decide script: batches built apart go as one call, each plan sent once", "[lua][shared_batches]") {
    const std::vector<std::string> tb{"token_bucket", "0", "1", "1000", "5"};
    const std::vector<std::string> sw{"sliding_window", "0", "1", "10", "60000000"};
    const std::vector<std::string> cc{"concurrency", "0", "1", "3", "30000000"};
    auto fill = [&](limit::DecideArgs& args) {
        args.limit(tb);
        args.end_request();
        args.limit(sw);
        args.end_request();
        args.limit(tb);
        args.end_request();
    };
    limit::DecideArgs first;
    fill(first);
    limit::DecideArgs second;
    second.limit(cc);
    second.end_request("owner-1");
    second.limit(sw);
    second.end_request();
    second.limit(cc);
    second.end_request("owner-2");
    limit::DecideArgs alone;  // the same requests, taken alone
    fill(alone);
    const auto a = first.take_parts();
    const auto b = second.take_parts();
    CHECK(a.requests() == 3);
    CHECK(b.requests() == 3);
    // decide_argv moves the texts out of its parts: each call gets its own copies.
    auto a1 = a, a2 = a, a3 = a, b2 = b, b3 = b;
    CHECK(limit::decide_argv({&a1}) == alone.take());
    // The second batch's sliding window is the first's plan 2; its concurrency plan is new.
    CHECK(limit::decide_argv({&a2, &b2}) ==
          std::vector<std::string>{"3", "token_bucket 0 1 1000 5", "sliding_window 0 1 10 60000000",
                                   "concurrency 0 1 3 30000000", "1", "2", "1", "3", "owner-1", "2", "3", "owner-2"});
    CHECK(limit::decide_argv({&b3, &a3}) ==
          std::vector<std::string>{"3", "concurrency 0 1 3 30000000", "sliding_window 0 1 10 60000000",
                                   "token_bucket 0 1 1000 5", "1", "owner-1", "2", "1", "owner-2", "3", "2", "3"});
    CHECK(first.requests() == 0);
    // Parts of one plan: the call goes without plan numbers, unless a request has an owner token.
    auto one_plan = [&](limit::DecideArgs& args, const std::vector<std::string>& limit, const std::string& token) {
        args.limit(limit);
        if (token.empty()) args.end_request();
        else args.end_request(token);
        return args.take_parts();
    };
    limit::DecideArgs x, y;
    auto x1 = one_plan(x, tb, ""), y1 = one_plan(y, tb, "");
    CHECK(limit::decide_argv({&x1, &y1}) == std::vector<std::string>{"1", "token_bucket 0 1 1000 5"});
    auto x2 = one_plan(x, cc, "owner-1"), y2 = one_plan(y, cc, "owner-2");
    CHECK(limit::decide_argv({&x2, &y2}) ==
          std::vector<std::string>{"1", "concurrency 0 1 3 30000000", "1", "owner-1", "1", "owner-2"});
}

TEST_CASE("shared batches: a batch waits while its worker has a call in flight and rides with the next call",
          "[shared_batches]") {
    boost::asio::io_context io_a, io_b, io_c;
    limit::SharedBatches shared(8);
    std::vector<std::pair<std::uint64_t, std::size_t>> delivered_a, delivered_b;  // call, part index
    int woken_a = 0, woken_b = 0, woken_c = 0;
    const auto a = shared.join(
        io_a, [&](const auto& call, std::size_t i) { delivered_a.emplace_back(call->number, i); }, [&] { ++woken_a; });
    const auto b = shared.join(
        io_b, [&](const auto& call, std::size_t i) { delivered_b.emplace_back(call->number, i); }, [&] { ++woken_b; });
    const auto c = shared.join(io_c, [](const auto&, std::size_t) {}, [&] { ++woken_c; });
    REQUIRE(a != b);

    // Nothing in flight: sent at once, alone.
    auto first = shared.offer(a, part_of(a, 1, 3), true, false);
    REQUIRE(first);
    CHECK(first->parts.size() == 1);
    CHECK(first->keys == 3);
    CHECK(first->sender == a);
    // a has a call in flight: its next batches wait...
    CHECK_FALSE(shared.offer(a, part_of(a, 2, 2), true, false));
    CHECK_FALSE(shared.offer(a, part_of(a, 3, 4), true, false));
    CHECK(shared.waiting() == 2);
    // ... unless full (a full batch never waits; what waits joins it while the call stays
    // within 8 requests: here nothing) ...
    auto forced = shared.offer(a, part_of(a, 4, 8), true, true);
    REQUIRE(forced);
    CHECK(forced->parts.size() == 1);
    CHECK(shared.waiting() == 2);
    // ... and b, with nothing in flight, sends its own and takes them along, in order, while
    // the call stays within 8 requests (its own 1 + 2 + 4).
    auto second = shared.offer(b, part_of(b, 1, 1), true, false);
    REQUIRE(second);
    REQUIRE(second->parts.size() == 3);
    CHECK(second->parts[0].member == b);
    CHECK(second->parts[1].member == a);
    CHECK(second->parts[1].id == 2);
    CHECK(second->parts[2].id == 3);
    CHECK(second->first_key == std::vector<std::size_t>{0, 1, 3});
    CHECK(second->keys == 7);
    CHECK(shared.waiting() == 0);
    CHECK(shared.carried() == 2);  // a's two, in b's call
    CHECK(shared.in_flight() == 3);
    // A connection that is not ready sends only its own; nothing to send is no call.
    CHECK_FALSE(shared.offer(c, std::nullopt, true, false));
    CHECK_FALSE(shared.offer(b, part_of(b, 2, 2), true, false));  // b is busy now
    auto alone = shared.offer(c, part_of(c, 1, 1), false, false);
    REQUIRE(alone);
    CHECK(alone->parts.size() == 1);
    CHECK(shared.waiting() == 1);

    // Answered where b concludes its own: a has calls of its own in flight, so its two parts
    // are kept for it (no wake-up of its thread); nothing to b. b's part waits, which b (free
    // again) sends next: nobody is woken.
    std::vector<limit::SharedBatches::Answered> ready;
    CHECK(shared.answered(second, b, ready));
    CHECK(ready.empty());
    CHECK(polled(io_a) == 0);
    CHECK(polled(io_b) == 0);
    CHECK(woken_a + woken_b + woken_c == 0);
    // a's own call is answered: a takes what was kept for it.
    CHECK(shared.answered(first, a, ready));
    REQUIRE(ready.size() == 2);
    CHECK(ready[0].first == second);
    CHECK(ready[0].second == 1);
    CHECK(ready[1].second == 2);
    ready.clear();
    CHECK(polled(io_a) == 0);
    CHECK(delivered_a.empty());
    // Answered where its sender cannot conclude it (it stopped): its owner, with no call in
    // flight, gets its part posted, and the member whose part waits longest is woken to send it.
    CHECK(shared.answered(alone, 0, ready));
    CHECK(ready.empty());
    CHECK(polled(io_b) == 1);
    CHECK(woken_b == 1);
    CHECK(polled(io_c) == 1);  // its part (its limiter, gone or stopped, concludes nothing)
    CHECK(woken_c == 0);
    auto next = shared.offer(b, std::nullopt, true, false);
    REQUIRE(next);
    CHECK(next->parts.size() == 1);
    CHECK(next->parts[0].id == 2);
    CHECK(shared.carried() == 2);  // b's own, in b's call: not another worker's

    // A member that leaves: its waiting parts are dropped and nothing is posted to it; the
    // member whose part waits longest is woken, should the one leaving have been the one to
    // send it.
    CHECK_FALSE(shared.offer(a, part_of(a, 5, 1), true, false));  // a: `forced` in flight
    CHECK_FALSE(shared.offer(b, part_of(b, 3, 1), true, false));
    shared.leave(a);
    CHECK(shared.waiting() == 1);
    CHECK(polled(io_b) == 1);
    CHECK(woken_b == 2);
    CHECK(shared.answered(forced, 0, ready));  // b's part waits: b is woken
    CHECK(polled(io_a) == 0);
    CHECK(polled(io_b) == 1);
    CHECK(woken_b == 3);
    CHECK(shared.answered(next, b, ready));
    CHECK(shared.in_flight() == 0);
    auto last = shared.offer(b, std::nullopt, true, false);
    REQUIRE(last);
    CHECK(last->parts[0].id == 3);
    CHECK_FALSE(shared.answered(last, b, ready));
    CHECK(shared.waiting() == 0);
    CHECK(ready.empty());
}

TEST_CASE("shared batches: expired parts are dropped, a member's own are withdrawn, kept answers taken early",
          "[shared_batches]") {
    boost::asio::io_context io_a, io_b;
    limit::SharedBatches shared;
    const auto a = shared.join(io_a, [](const auto&, std::size_t) {}, [] {});
    const auto b = shared.join(io_b, [](const auto&, std::size_t) {}, [] {});
    auto own = shared.offer(a, part_of(a, 1, 1), true, false);
    REQUIRE(own);
    auto late = part_of(a, 2, 1);
    late.expires = std::chrono::steady_clock::now() - 1ms;  // every decision of it answered
    CHECK_FALSE(shared.offer(a, std::move(late), true, false));
    CHECK_FALSE(shared.offer(a, part_of(a, 3, 2), true, false));
    CHECK_FALSE(shared.offer(a, part_of(a, 4, 3), true, false));
    // b sends: the expired part is dropped, never sent; the others ride.
    auto rides = shared.offer(b, std::nullopt, true, false);
    REQUIRE(rides);
    REQUIRE(rides->parts.size() == 2);
    CHECK(rides->parts[0].id == 3);
    CHECK(rides->parts[1].id == 4);
    // Answered while a's own call is still out: kept for a, and a's deadline can take it.
    std::vector<limit::SharedBatches::Answered> ready;
    CHECK_FALSE(shared.answered(rides, b, ready));
    CHECK(polled(io_a) == 0);
    const auto kept = shared.take_kept(a);
    REQUIRE(kept.size() == 2);
    CHECK(kept[1].second == 1);
    CHECK(shared.take_kept(a).empty());
    // a's connection went down: its waiting parts come back to it, b's stay.
    CHECK_FALSE(shared.offer(a, part_of(a, 5, 1), true, false));
    CHECK_FALSE(shared.offer(b, part_of(b, 1, 1), false, false) == nullptr);  // b: a call in flight
    CHECK_FALSE(shared.offer(b, part_of(b, 2, 1), true, false));
    const auto withdrawn = shared.withdraw(a);
    REQUIRE(withdrawn.size() == 1);
    CHECK(withdrawn[0].id == 5);
    CHECK(shared.waiting() == 1);
}

TEST_CASE("redis limiter: with its connection gone, a worker's waiting batch fails at once, not at its deadline",
          "[redis_limiter][redis][shared_batches]") {
    RedisServer server;
    TwoWorkers workers(server.port(), 5s);
    auto& shared = workers.shared;
    auto& a = workers.a;
    const std::vector<config::LimitConfig> limits{token_bucket("tb", 1, 3600s, 10)};
    server.suspend();
    a.decide_async(limits);
    run_until_queue(a, [&] { return shared->in_flight() == 1; });
    a.decide_async(limits);  // waits behind a's call: b sends nothing to take it along
    run_until_queue(a, [&] { return shared->waiting() == 1; });
    const auto start = std::chrono::steady_clock::now();
    server.kill();
    REQUIRE(run_both_until(a.io, workers.b.io, [&] { return a.decisions.size() == 2; }));
    CHECK(std::chrono::steady_clock::now() - start < 3s);  // far from the 5 s deadline
    CHECK(a.decisions[0].outcome == Outcome::store_error);
    CHECK(a.decisions[1].outcome == Outcome::store_error);
    CHECK_THAT(a.decisions[1].error, !Catch::Contains("within"));
    CHECK(shared->waiting() == 0);
}

TEST_CASE("redis limiter: a batch due while its worker's call is in flight goes with another worker's call",
          "[redis_limiter][redis][shared_batches]") {
    RedisServer server;
    SyncRedis check(server.port());
    TwoWorkers workers(server.port(), 2s);
    auto& shared = workers.shared;
    auto& a = workers.a;
    auto& b = workers.b;
    const std::vector<config::LimitConfig> limits{token_bucket("tb", 1, 3600s, 10)};

    server.suspend();  // the first call stays in flight
    workers.a_twice_then_b(limits);
    server.resume();
    REQUIRE(run_both_until(a.io, b.io, [&] { return a.decisions.size() == 2 && b.decisions.size() == 1; }));
    // One key, three decisions in two calls on two connections (which Redis runs in either
    // order): each took one token, none was lost or counted twice.
    std::multiset<std::uint64_t> remaining;
    for (const auto* d : {&a.decisions[0], &a.decisions[1], &b.decisions[0]}) {
        REQUIRE(d->outcome == Outcome::allowed);
        remaining.insert(d->limits[0].remaining);
    }
    CHECK(remaining == std::multiset<std::uint64_t>{7, 8, 9});
    // b's own decision first in its call, a's second right after it.
    CHECK(a.decisions[1].limits[0].remaining + 1 == b.decisions[0].limits[0].remaining);
    CHECK(command_calls(check, "fcall") == 2);  // two calls for three decisions
    CHECK(a.decide(limits).limits[0].remaining == 6);
    CHECK(shared->in_flight() == 0);
    CHECK(shared->waiting() == 0);

    SECTION("a rejection decided in another worker's call is remembered by its own") {
        const std::vector<config::LimitConfig> one{token_bucket("one", 1, 3600s, 1)};
        REQUIRE(b.decide(one).outcome == Outcome::allowed);
        server.suspend();
        workers.a_twice_then_b(one);
        server.resume();
        REQUIRE(run_both_until(a.io, b.io, [&] { return a.decisions.size() == 5 && b.decisions.size() == 3; }));
        // b's decide took the one token: every one of these was refused, wherever it was sent.
        CHECK(a.decisions[3].outcome == Outcome::limited);
        CHECK(a.decisions[4].outcome == Outcome::limited);
        CHECK(b.decisions[2].outcome == Outcome::limited);
        CHECK(a.limiter.remembered_rejections() == 1);
        CHECK(a.decide(one).outcome == Outcome::limited);
        // b's decide, a's call, b's call with a's second; a's last answered from its memory.
        CHECK(command_calls(check, "fcall") == 3 + 3);
    }
}

TEST_CASE("redis limiter: concurrency slots taken in another worker's call are the request's own",
          "[redis_limiter][redis][shared_batches]") {
    RedisServer server;
    SyncRedis check(server.port());
    TwoWorkers workers(server.port(), 2s);
    auto& a = workers.a;
    auto& b = workers.b;
    // A concurrency limit and a token bucket in one plan: owner tokens travel after the plan
    // numbers, each request's own, also when batches are merged.
    const std::vector<config::LimitConfig> limits{slots_limit("c", 3, 60s), token_bucket("tb", 1, 3600s, 10)};
    server.suspend();
    workers.a_twice_then_b(limits);
    server.resume();
    REQUIRE(run_both_until(a.io, b.io, [&] { return a.decisions.size() == 2 && b.decisions.size() == 1; }));
    std::set<std::string> tokens;
    for (const auto* d : {&a.decisions[0], &a.decisions[1], &b.decisions[0]}) {
        REQUIRE(d->outcome == Outcome::allowed);
        REQUIRE(d->slots.keys.size() == 1);
        tokens.insert(d->slots.token);
    }
    CHECK(tokens.size() == 3);
    const std::string key = "sluice:{login:203.0.113.7}:c";
    CHECK(check.integer({"ZCARD", key}) == 3);
    for (const auto& token : tokens) CHECK(check.run({"ZSCORE", key, token}).reply.type == redis::RedisReply::Type::string);
    // The fourth finds the three slots taken; a's second gives its slot back, by its token.
    CHECK(b.decide(limits).outcome == Outcome::limited);
    a.limiter.release(a.decisions[1].slots);
    REQUIRE(run_until(a.io, [&] { return check.integer({"ZCARD", key}) == 2; }));
    CHECK(check.run({"ZSCORE", key, a.decisions[1].slots.token}).reply.type == redis::RedisReply::Type::nil);
}

TEST_CASE("redis limiter: a shared call that fails fails every worker's part; a stopping worker's do not wait",
          "[redis_limiter][redis][shared_batches]") {
    RedisServer server;
    // Long deadlines: every answer below is the call's, never a deadline's.
    TwoWorkers workers(server.port(), 10s);
    auto& shared = workers.shared;
    auto& a = workers.a;
    auto& b = workers.b;
    const std::vector<config::LimitConfig> limits{token_bucket("tb", 1, 3600s, 10)};
    server.suspend();
    workers.a_twice_then_b(limits);

    SECTION("the connection drops") {
        server.kill();
        REQUIRE(run_both_until(a.io, b.io, [&] { return a.decisions.size() == 2 && b.decisions.size() == 1; }));
        CHECK(a.decisions[0].outcome == Outcome::store_error);
        CHECK(a.decisions[1].outcome == Outcome::store_error);
        CHECK(b.decisions[0].outcome == Outcome::store_error);
        CHECK_THAT(a.decisions[1].error, !Catch::Contains("within"));  // the call's error, not a deadline
        CHECK(shared->in_flight() == 0);
    }
    SECTION("the worker that sent it stops: its connection closes once the call is answered") {
        bool closed = false;
        b.limiter.stop([&] {
            closed = true;
            b.connection.stop();
        });
        REQUIRE(b.decisions.size() == 1);  // its own decision: answered once, when it stopped
        CHECK(b.decisions[0].outcome == Outcome::store_error);
        run_for(b.io, 50ms);
        CHECK_FALSE(closed);
        server.resume();
        REQUIRE(run_both_until(a.io, b.io, [&] { return a.decisions.size() == 2 && closed; }));
        REQUIRE(a.decisions[0].outcome == Outcome::allowed);
        REQUIRE(a.decisions[1].outcome == Outcome::allowed);
        // b's own decision ran (it was sent) right before a's second in b's call; the calls
        // ran in either order: 9, (8), 7 or (9), 8, 7.
        const auto sum = a.decisions[0].limits[0].remaining + a.decisions[1].limits[0].remaining;
        CHECK((sum == 9 + 7 || sum == 8 + 7));
        CHECK(a.decide(limits).limits[0].remaining == 6);
        run_for(b.io, 50ms);
        CHECK(b.decisions.size() == 1);
    }
    SECTION("the worker whose batch is in the call stops: answered once, and nothing posted to it") {
        bool closed = false;
        a.limiter.stop([&] { closed = true; });
        CHECK(closed);  // it sent nothing of others': closes at once
        REQUIRE(a.decisions.size() == 2);
        CHECK(a.decisions[0].outcome == Outcome::store_error);
        CHECK(a.decisions[1].outcome == Outcome::store_error);
        server.resume();
        REQUIRE(run_both_until(a.io, b.io, [&] { return b.decisions.size() == 1; }));
        CHECK(b.decisions[0].outcome == Outcome::allowed);
        // a's first call and a's second (in b's) still ran: b's own was right before a's second.
        const auto left = b.decisions[0].limits[0].remaining;
        CHECK((left == 9 || left == 8));
        run_both_until(a.io, b.io, [&] { return shared->in_flight() == 0; });
        run_for(a.io, 50ms);
        CHECK(a.decisions.size() == 2);
    }
}

TEST_CASE("redis limiter: workers on their own threads sharing a queue: every decision exact, once",
          "[redis_limiter][redis][shared_batches]") {
    RedisServer server;
    SyncRedis check(server.port());
    auto shared = std::make_shared<limit::SharedBatches>();
    constexpr int workers = 4;
    constexpr int rounds = 40;
    constexpr int per_round = 5;
    // One key every worker decides (burst 300 of 800 requests) and one of each worker's own.
    const std::vector<config::LimitConfig> limits{token_bucket("all", 1, 3600s, 300),
                                                  token_bucket("own", 1, 3600s, 1000, {header("x-user")})};
    std::vector<std::unique_ptr<Fixture>> fixtures;
    for (int w = 0; w < workers; ++w) {
        fixtures.push_back(std::make_unique<Fixture>(server.port(), 10s, shared));
        fixtures.back()->wait_ready();
    }
    std::atomic<int> started{0};
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    std::vector<char> finished(workers, 0);  // one element per thread (not vector<bool>'s shared bits)
    for (int w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            auto& f = *fixtures[w];
            ++started;
            while (started < workers) std::this_thread::yield();
            std::size_t asked = 0;
            for (int r = 0; r < rounds; ++r) {
                for (int i = 0; i < per_round; ++i) f.decide_async(limits, "user" + std::to_string(w));
                asked += per_round;
                // Half the rounds wait for their answers, half go on: batches of several sizes.
                if (r % 2 == 0) run_until(f.io, [&] { return f.decisions.size() == asked; }, 10s);
                else f.io.poll();
            }
            finished[w] = run_until(f.io, [&] { return f.decisions.size() == asked; }, 10s);
            // A worker's loop runs on while the others need it: it may be the one to send
            // what they handed over.
            ++done;
            run_until(f.io, [&] { return done == workers; }, 10s);
        });
    for (auto& t : threads) t.join();
    int allowed = 0;
    for (int w = 0; w < workers; ++w) {
        INFO("worker " << w);
        const auto& f = *fixtures[w];
        CHECK(finished[w]);
        REQUIRE(f.decisions.size() == static_cast<std::size_t>(rounds * per_round));
        // The worker's own key: each admitted decision took one, none twice (batches that
        // ride another worker's call may run before the worker's own call in flight).
        std::set<std::uint64_t> own;
        for (const auto& d : f.decisions) {
            INFO(d.error);
            REQUIRE(d.outcome != Outcome::store_error);
            REQUIRE(d.limits.size() == 2);
            if (d.outcome == Outcome::allowed) {
                ++allowed;
                CHECK(own.insert(d.limits[1].remaining).second);
            } else {
                CHECK(d.limited_by == 0u);
            }
        }
    }
    CHECK(allowed == 300);
    for (int w = 0; w < workers; ++w) {
        // The own key's remaining figures: exactly 999 down to 1000 - admitted, each once.
        INFO("worker " << w);
        std::set<std::uint64_t> own;
        for (const auto& d : fixtures[w]->decisions)
            if (d.outcome == Outcome::allowed) own.insert(d.limits[1].remaining);
        REQUIRE_FALSE(own.empty());
        CHECK(*own.rbegin() == 999);
        CHECK(*own.begin() == 1000 - own.size());
    }
    CHECK(shared->in_flight() == 0);
    CHECK(shared->waiting() == 0);
}
