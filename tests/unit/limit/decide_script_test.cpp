// lua/*.lua run by a real redis-server, called directly (FCALL of the library, or EVALSHA of
// the script, with hand-made arguments).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/redis_server.hpp"
#include "limit/decide_script.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using test::RedisServer;
using test::SyncRedis;

namespace {

struct ScriptLimit {
    std::string key;
    std::string algorithm;  // "token_bucket" | "sliding_window" | "fixed_window"
    bool shadow;
    std::int64_t a;  // interval_us | limit | limit
    std::int64_t b;  // burst | window_us | window_us
    std::int64_t cost = 1;
    std::string calendar;  // y's text instead of b: a fixed window's "b0,b1,b2,b3", a bucket's "burst,kept"
    std::string token = {};  // concurrency: the request's owner token
    std::string flags = {};  // the flags field as written, instead of shadow's "0" or "1"
};

ScriptLimit bucket(std::string key, std::int64_t interval_us, std::int64_t burst, bool shadow = false) {
    return {std::move(key), "token_bucket", shadow, interval_us, burst, 1, {}};
}
// A bucket of a route with plans: it keeps what was used when read under another interval.
ScriptLimit kept_bucket(std::string key, std::int64_t interval_us, std::int64_t burst) {
    return {std::move(key), "token_bucket", false, interval_us, burst, 1, std::to_string(burst) + ",kept"};
}
ScriptLimit fixed(std::string key, std::int64_t limit, std::int64_t window_us, std::int64_t cost = 1) {
    return {std::move(key), "fixed_window", false, limit, window_us, cost, {}};
}
ScriptLimit calendar(std::string key, std::int64_t limit, std::vector<std::int64_t> bounds) {
    std::string spec;
    for (auto b : bounds) spec += (spec.empty() ? "" : ",") + std::to_string(b);
    return {std::move(key), "fixed_window", false, limit, 0, 1, spec};
}
ScriptLimit slots(std::string key, std::int64_t limit, std::int64_t lease_us, std::string token) {
    return {std::move(key), "concurrency", false, limit, lease_us, 1, {}, std::move(token)};
}
ScriptLimit window(std::string key, std::int64_t limit, std::int64_t window_us, bool shadow = false) {
    return {std::move(key), "sliding_window", shadow, limit, window_us, 1, {}};
}

// `limit` with its flags field written as given (and, with `cost`, that cost).
ScriptLimit flagged(ScriptLimit limit, std::string flags) {
    limit.flags = std::move(flags);
    return limit;
}
ScriptLimit flagged(ScriptLimit limit, std::string flags, std::int64_t cost) {
    limit.cost = cost;
    return flagged(std::move(limit), std::move(flags));
}

// One request's answer: Redis's TIME and one result per limit.
struct DecideReply {
    std::int64_t now_us = 0;
    std::vector<limit::LimitResult> results;
};

struct Script {
    SyncRedis& redis;
    // The Redis Cluster variant: a batch's keys go in ARGV (lua/cluster_keys.lua); on a
    // server without cluster mode every key is local, so it decides as the other does.
    bool cluster = false;
    // The function library (FUNCTION LOAD, FCALL: what sluice uses on Redis 7), or the
    // script (SCRIPT LOAD, EVALSHA: where FUNCTION is refused).
    bool library = true;
    redis::ScriptCode code = limit::decide_code(cluster);
    std::string name = load();  // the function's name, or the script's sha

    std::string load() {
        if (!library) return redis.text({"SCRIPT", "LOAD", code.script});
        const auto loaded = redis.run({"FUNCTION", "LOAD", code.library});
        if (!loaded.ok() && loaded.error->message.find("already exists") == std::string::npos)
            FAIL("FUNCTION LOAD: " << loaded.error->message);
        return code.function;
    }
    // The start of a call: FCALL name, or EVALSHA sha.
    std::vector<std::string> call() const { return {library ? "FCALL" : "EVALSHA", name}; }

    // One call deciding each request (the limits of one route) in turn.
    redis::RedisResult raw_batch(const std::vector<std::vector<ScriptLimit>>& requests) {
        std::vector<std::string> keys;
        limit::DecideArgs builder;
        for (const auto& limits : requests) {
            std::vector<std::vector<std::string>> limit_args;
            for (const auto& l : limits) {
                keys.push_back(l.key);
                limit_args.push_back({l.algorithm, !l.flags.empty() ? l.flags : l.shadow ? "1" : "0", std::to_string(l.cost), std::to_string(l.a),
                                      l.calendar.empty() ? std::to_string(l.b) : l.calendar});
            }
            for (const auto& a : limit_args) builder.limit(a);
            std::string token;
            for (const auto& l : limits)
                if (!l.token.empty()) token = l.token;
            if (token.empty()) builder.end_request();
            else builder.end_request(token);
        }
        const auto argv = builder.take();
        std::vector<std::string> args = call();
        if (cluster) {
            args.push_back("0");
            args.push_back(std::to_string(keys.size()));
        } else {
            args.push_back(std::to_string(keys.size()));
        }
        args.insert(args.end(), keys.begin(), keys.end());
        args.insert(args.end(), argv.begin(), argv.end());
        return redis.run(args);
    }

    redis::RedisResult raw(const std::vector<ScriptLimit>& limits) { return raw_batch({limits}); }

    // The replies of a batch, one per request.
    std::vector<DecideReply> batch(const std::vector<std::vector<ScriptLimit>>& requests) {
        auto result = raw_batch(requests);
        if (!result.ok()) FAIL("script error: " << result.error->message);
        std::size_t total = 0;
        for (const auto& limits : requests) total += limits.size();
        REQUIRE(limit::is_decide_reply(result.reply, total, cluster));
        std::vector<DecideReply> out;
        std::size_t index = 0;
        for (const auto& limits : requests) {
            DecideReply reply;
            reply.now_us = limit::decide_time(result.reply);
            for (std::size_t i = 0; i < limits.size(); ++i) reply.results.push_back(limit::decide_result(result.reply, index++));
            out.push_back(std::move(reply));
        }
        return out;
    }

    DecideReply operator()(const std::vector<ScriptLimit>& limits) { return batch({limits}).front(); }
};

// How often Redis ran `command` (lowercase) since its statistics were last reset.
long long command_calls(SyncRedis& redis, const std::string& command) {
    const auto stats = redis.text({"INFO", "commandstats"});
    const auto at = stats.find("cmdstat_" + command + ":calls=");
    if (at == std::string::npos) return 0;
    return std::stoll(stats.substr(at + command.size() + 15));
}

std::int64_t redis_time_us(SyncRedis& redis) {
    const auto reply = redis.must({"TIME"});
    return std::stoll(reply.elements[0].text) * 1'000'000 + std::stoll(reply.elements[1].text);
}

std::int64_t ceil_ms(std::int64_t us) { return us <= 0 ? 0 : (us + 999) / 1000; }

}  // namespace

TEST_CASE("decide script: a reply of more than 256 integers (a full batch and more) is read whole, in order", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    // 130 requests, one bucket each with its own burst: 521 integers, packed 256 at a time.
    std::vector<std::vector<ScriptLimit>> requests;
    for (int i = 0; i < 130; ++i)
        requests.push_back({bucket("{big" + std::to_string(i) + "}:b", 3'600'000'000, 2 + i % 50)});
    const auto first = decide.batch(requests);
    REQUIRE(first.size() == requests.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
        CAPTURE(i);
        CHECK(first[i].results[0].allowed);
        CHECK(first[i].results[0].remaining == static_cast<std::uint64_t>(1 + i % 50));
    }
    // The same with the buckets emptied by a cost of their burst: each refused, each with its own wait.
    for (int i = 0; i < 130; ++i) requests[static_cast<std::size_t>(i)][0].cost = 2 + i % 50;
    const auto second = decide.batch(requests);
    for (std::size_t i = 0; i < second.size(); ++i) {
        CAPTURE(i);
        CHECK_FALSE(second[i].results[0].allowed);
        CHECK(second[i].results[0].remaining == static_cast<std::uint64_t>(1 + i % 50));
        // One token short, an hour a token: about an hour to wait.
        CHECK(second[i].results[0].retry_after > 3'599'000ms);
        CHECK(second[i].results[0].retry_after <= 3'600'001ms);
    }
}

TEST_CASE("decide script: token bucket admits a full burst, then rejects with exact figures", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t interval = 1'000'000;  // 1 token per second
    const std::int64_t burst = 5;

    std::int64_t first = 0;
    for (int i = 0; i < burst; ++i) {
        auto r = decide({bucket("tb", interval, burst)});
        if (i == 0) first = r.now_us;
        INFO("request " << i);
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == static_cast<std::uint64_t>(burst - 1 - i));
        CHECK(r.results[0].retry_after == 0ms);
        // The bucket is full again when every token taken has refilled: first + (i+1) intervals.
        CHECK(r.results[0].reset.count() == ceil_ms(first + (i + 1) * interval - r.now_us));
    }
    // The state is one integer: the time the bucket is full again, in microseconds.
    CHECK(redis.text({"GET", "tb"}) == std::to_string(first + burst * interval));

    auto r = decide({bucket("tb", interval, burst)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 0);
    // One token is back at first + interval.
    CHECK(r.results[0].retry_after.count() == ceil_ms(first + interval - r.now_us));
    CHECK(r.results[0].reset.count() == ceil_ms(first + burst * interval - r.now_us));
}

TEST_CASE("decide script: 1 per 300 ms admits exactly one request per 300 ms of Redis time", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t interval = 300'000;

    std::int64_t last_admitted = 0;
    int admitted = 0;
    const auto stop = std::chrono::steady_clock::now() + 1100ms;
    while (std::chrono::steady_clock::now() < stop) {
        auto r = decide({bucket("one", interval, 1)});
        if (admitted == 0) {
            REQUIRE(r.results[0].allowed);
        } else if (r.now_us >= last_admitted + interval) {
            CHECK(r.results[0].allowed);  // a token is back: must be admitted
        } else {
            CHECK_FALSE(r.results[0].allowed);  // earlier: must not
            CHECK(r.results[0].retry_after.count() == ceil_ms(last_admitted + interval - r.now_us));
        }
        if (r.results[0].allowed) {
            last_admitted = r.now_us;
            ++admitted;
        }
        std::this_thread::sleep_for(7ms);
    }
    CHECK(admitted >= 3);
    CHECK(admitted <= 4);
}

TEST_CASE("decide script: fractional refill counts", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    // 2.5 per second = one token every 400 ms; burst 2.
    const std::int64_t interval = 400'000;
    auto a = decide({bucket("frac", interval, 2)});
    auto b = decide({bucket("frac", interval, 2)});
    REQUIRE(a.results[0].allowed);
    REQUIRE(b.results[0].allowed);
    auto c = decide({bucket("frac", interval, 2)});
    REQUIRE_FALSE(c.results[0].allowed);
    CHECK(c.results[0].retry_after.count() == ceil_ms(a.now_us + interval - c.now_us));

    std::this_thread::sleep_for(std::chrono::milliseconds(c.results[0].retry_after.count() + 5));
    auto d = decide({bucket("frac", interval, 2)});
    CHECK(d.results[0].allowed);
    CHECK(d.results[0].remaining == 0);
    // Partly refilled tokens are kept, not rounded away: the next one is due exactly one
    // interval after the previous one was due.
    auto e = decide({bucket("frac", interval, 2)});
    CHECK_FALSE(e.results[0].allowed);
    CHECK(e.results[0].retry_after.count() == ceil_ms(a.now_us + 2 * interval - e.now_us));
}

TEST_CASE("decide script: sliding window is exact over rolling time", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t limit = 3;
    const std::int64_t window_us = 200'000;

    std::vector<std::int64_t> admitted;  // on Redis's clock
    const auto stop = std::chrono::steady_clock::now() + 900ms;
    int rejected = 0;
    while (std::chrono::steady_clock::now() < stop) {
        auto r = decide({window("sw", limit, window_us)});
        std::int64_t in_window = 0;
        for (auto t : admitted) in_window += (r.now_us - t < window_us);
        INFO("now " << r.now_us << " in window " << in_window);
        REQUIRE(r.results[0].allowed == (in_window < limit));
        if (r.results[0].allowed) {
            CHECK(r.results[0].remaining == static_cast<std::uint64_t>(limit - in_window - 1));
            CHECK(r.results[0].reset.count() == ceil_ms(window_us));
            admitted.push_back(r.now_us);
        } else {
            ++rejected;
            // The oldest counted request leaves at its time + window.
            const std::int64_t oldest = admitted[admitted.size() - in_window];
            CHECK(r.results[0].retry_after.count() == ceil_ms(oldest + window_us - r.now_us));
            CHECK(r.results[0].reset.count() == ceil_ms(admitted.back() + window_us - r.now_us));
        }
        std::this_thread::sleep_for(9ms);
    }
    CHECK(rejected > 0);
    CHECK(admitted.size() > static_cast<std::size_t>(limit));
    CHECK(redis.integer({"ZCARD", "sw"}) <= limit);  // expired members are trimmed on write
}

TEST_CASE("decide script: window edges on Redis's clock", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t window_us = 1'000'000;
    const std::int64_t t0 = redis_time_us(redis);

    SECTION("a request exactly one window old no longer counts") {
        redis.must({"ZADD", "edge", std::to_string(t0 - window_us), "old"});
        auto r = decide({window("edge", 1, window_us)});
        CHECK(r.results[0].allowed);  // now >= t0, so t0 - window is out
    }
    SECTION("a request inside the window counts until it leaves") {
        const std::int64_t leaves_at = t0 + 200'000;
        redis.must({"ZADD", "edge", std::to_string(leaves_at - window_us), "inside"});
        auto r = decide({window("edge", 1, window_us)});
        REQUIRE_FALSE(r.results[0].allowed);
        CHECK(r.results[0].retry_after.count() == ceil_ms(leaves_at - r.now_us));
        CHECK(r.results[0].reset.count() == ceil_ms(leaves_at - r.now_us));
    }
}

TEST_CASE("decide script: every key written expires exactly when its state is empty again", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};

    SECTION("token bucket: when it has refilled to full") {
        decide({bucket("tb", 200'000, 10)});
        decide({bucket("tb", 200'000, 10)});
        auto r = decide({bucket("tb", 200'000, 10)});
        const std::int64_t full_at = std::stoll(redis.text({"GET", "tb"}));
        CHECK(full_at >= r.now_us + 600'000 - 100'000);
        CHECK(redis.integer({"PEXPIRETIME", "tb"}) == ceil_ms(full_at));
        const auto pttl = redis.integer({"PTTL", "tb"});
        CHECK(pttl > 0);
        CHECK(pttl <= r.results[0].reset.count() + 1);
    }
    SECTION("sliding window: when its newest request leaves the window, also under a second") {
        decide({window("sw", 5, 250'000)});
        auto r = decide({window("sw", 5, 250'000)});
        CHECK(redis.integer({"PEXPIRETIME", "sw"}) == ceil_ms(r.now_us + 250'000));
        // Expiry is rounded up to the ms and PTTL counts from the current ms: up to +1.
        const auto pttl = redis.integer({"PTTL", "sw"});
        CHECK(pttl > 150);
        CHECK(pttl <= 251);
    }
    SECTION("the key really goes when it expires") {
        decide({bucket("short", 30'000, 1)});
        decide({window("short_sw", 1, 30'000)});
        std::this_thread::sleep_for(60ms);
        CHECK(redis.integer({"EXISTS", "short", "short_sw"}) == 0);
    }
}

TEST_CASE("decide script: a rejected request writes nothing", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};

    SECTION("token bucket") {
        REQUIRE(decide({bucket("tb", 3'000'000, 1)}).results[0].allowed);
        const auto value = redis.text({"GET", "tb"});
        const auto expires = redis.integer({"PEXPIRETIME", "tb"});
        REQUIRE_FALSE(decide({bucket("tb", 3'000'000, 1)}).results[0].allowed);
        CHECK(redis.text({"GET", "tb"}) == value);
        CHECK(redis.integer({"PEXPIRETIME", "tb"}) == expires);
    }
    SECTION("sliding window: not even a trim of expired members") {
        REQUIRE(decide({window("sw", 1, 10'000'000)}).results[0].allowed);
        redis.must({"ZADD", "sw", "1", "ancient"});
        const auto members = redis.must({"ZRANGE", "sw", "0", "-1", "WITHSCORES"});
        const auto expires = redis.integer({"PEXPIRETIME", "sw"});
        REQUIRE_FALSE(decide({window("sw", 1, 10'000'000)}).results[0].allowed);
        const auto after = redis.must({"ZRANGE", "sw", "0", "-1", "WITHSCORES"});
        REQUIRE(after.elements.size() == 4);
        CHECK(after.elements[0].text == "ancient");
        CHECK(after.elements[2].text == members.elements[2].text);
        CHECK(redis.integer({"PEXPIRETIME", "sw"}) == expires);
    }
    SECTION("all or nothing: a limit that allows is not charged when another rejects") {
        REQUIRE(decide({window("strict", 1, 10'000'000)}).results[0].allowed);
        auto r = decide({bucket("fresh_tb", 1'000'000, 3), window("fresh_sw", 5, 1'000'000),
                         window("strict", 1, 10'000'000)});
        CHECK(r.results[0].allowed);
        CHECK(r.results[1].allowed);
        CHECK_FALSE(r.results[2].allowed);
        // Reported as they stand: nothing was taken.
        CHECK(r.results[0].remaining == 3);
        CHECK(r.results[1].remaining == 5);
        CHECK(r.results[0].reset == 0ms);
        CHECK(r.results[1].reset == 0ms);
        CHECK(redis.integer({"EXISTS", "fresh_tb", "fresh_sw"}) == 0);
        CHECK(redis.integer({"ZCARD", "strict"}) == 1);
    }
}

TEST_CASE("decide script: all limits are charged together when all allow", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    auto r = decide({bucket("a", 1'000'000, 3), window("b", 2, 1'000'000)});
    CHECK(r.results[0].remaining == 2);
    CHECK(r.results[1].remaining == 1);
    r = decide({bucket("a", 1'000'000, 3), window("b", 2, 1'000'000)});
    CHECK(r.results[0].remaining == 1);
    CHECK(r.results[1].remaining == 0);
    r = decide({bucket("a", 1'000'000, 3), window("b", 2, 1'000'000)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 1);  // b rejected: a keeps its token
    CHECK_FALSE(r.results[1].allowed);
}

TEST_CASE("decide script: shadow limits report but do not block", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};

    SECTION("a shadow limit that would reject is not charged; the enforced ones are") {
        decide({bucket("enforced", 1'000'000, 10), window("shadow", 1, 10'000'000, true)});
        auto r = decide({bucket("enforced", 1'000'000, 10), window("shadow", 1, 10'000'000, true)});
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == 8);
        CHECK_FALSE(r.results[1].allowed);
        CHECK(r.results[1].retry_after > 0ms);
        CHECK(redis.integer({"ZCARD", "shadow"}) == 1);
    }
    SECTION("a shadow limit that allows is charged when the request goes through") {
        decide({bucket("enforced", 1'000'000, 10), bucket("shadow_tb", 1'000'000, 10, true)});
        auto r = decide({bucket("enforced", 1'000'000, 10), bucket("shadow_tb", 1'000'000, 10, true)});
        CHECK(r.results[1].allowed);
        CHECK(r.results[1].remaining == 8);
    }
    SECTION("...and not charged when an enforced limit rejects") {
        decide({bucket("enforced", 10'000'000, 1)});
        auto r = decide({bucket("enforced", 10'000'000, 1), bucket("shadow_tb", 1'000'000, 10, true)});
        CHECK_FALSE(r.results[0].allowed);
        CHECK(r.results[1].allowed);
        CHECK(redis.integer({"EXISTS", "shadow_tb"}) == 0);
    }
}

TEST_CASE("decide script: requests in the same microsecond are each counted", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    // One call passing the same key twice is two admissions at one Redis TIME.
    auto r = decide({window("same", 10, 1'000'000), window("same", 10, 1'000'000)});
    REQUIRE(r.results[0].allowed);
    REQUIRE(r.results[1].allowed);
    const auto members = redis.must({"ZRANGE", "same", "0", "-1"});
    REQUIRE(members.elements.size() == 2);
    CHECK(members.elements[0].text == std::to_string(r.now_us) + "-0");
    CHECK(members.elements[1].text == std::to_string(r.now_us) + "-1");
    r = decide({window("same", 10, 1'000'000)});
    CHECK(r.results[0].remaining == 7);
}

TEST_CASE("decide script: time is Redis TIME", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const auto before = redis_time_us(redis);
    const auto r = decide({bucket("t", 1000, 1)});
    const auto after = redis_time_us(redis);
    CHECK(r.now_us >= before);
    CHECK(r.now_us <= after);
}

TEST_CASE("decide script: large figures come back exact", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t day_us = 86'400'000'000;
    auto r = decide({window("big_sw", 1'000'000, day_us), bucket("big_tb", day_us, 1'000'000)});
    CHECK(r.results[0].remaining == 999'999);
    CHECK(r.results[0].reset.count() == 86'400'000);
    CHECK(r.results[1].remaining == 999'999);
    CHECK(r.results[1].reset.count() == 86'400'000);
    CHECK(redis.text({"GET", "big_tb"}) == std::to_string(r.now_us + day_us));
    // Figures from 1e14 on, which Lua would print with an exponent.
    auto huge = decide({bucket("huge_tb", 1, 200'000'000'000'000)});
    CHECK(huge.results[0].remaining == 199'999'999'999'999u);
    const auto members = redis.must({"ZRANGE", "big_sw", "0", "-1", "WITHSCORES"});
    CHECK(members.elements[1].text == std::to_string(r.now_us));
}

TEST_CASE("decide script: a token bucket key is small", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::string key = "sluice:{login:203.0.113.7}:burst";
    decide({bucket(key, 200'000, 10)});
    CHECK(redis.integer({"MEMORY", "USAGE", key}) <= 100);
}

TEST_CASE("decide script: a token bucket decides alike whether it first writes or first reads its key", "[lua][redis]") {
    // A lone token bucket whose keys are mostly missing writes a key it has not read in the
    // call as a full bucket becomes, only where it does not exist, and reads what an existing
    // one holds, in one SET NX GET; once its keys are mostly there it reads first (GET). The
    // plan remembers which (lua/token_bucket.lua): the figures must not depend on it.
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t interval = 1'000'000, burst = 5;
    auto calls = [&](const std::string& command) { return command_calls(redis, command); };
    // Each way: a missing key, then the same key again (it exists now), then a full bucket's
    // worth more in one batch, the last of which is refused.
    auto exercise = [&](const std::string& key) {
        auto first = decide({bucket(key, interval, burst)});
        CHECK(first.results[0].allowed);
        CHECK(first.results[0].remaining == static_cast<std::uint64_t>(burst - 1));
        CHECK(first.results[0].reset.count() == ceil_ms(interval));
        CHECK(redis.text({"GET", key}) == std::to_string(first.now_us + interval));
        CHECK(redis.integer({"PEXPIRETIME", key}) == ceil_ms(first.now_us + interval));
        auto second = decide({bucket(key, interval, burst)});
        CHECK(second.results[0].allowed);
        CHECK(second.results[0].remaining == static_cast<std::uint64_t>(burst - 2));
        CHECK(second.results[0].reset.count() == ceil_ms(first.now_us + 2 * interval - second.now_us));
        std::vector<std::vector<ScriptLimit>> rest(burst - 1, {bucket(key, interval, burst)});
        auto replies = decide.batch(rest);
        for (std::size_t i = 0; i + 1 < replies.size(); ++i) CHECK(replies[i].results[0].allowed);
        CHECK_FALSE(replies.back().results[0].allowed);
        CHECK(replies.back().results[0].remaining == 0);
        CHECK(redis.text({"GET", key}) == std::to_string(first.now_us + burst * interval));
    };

    // 40 requests, each on a key that exists, teach the plan that its keys exist.
    auto teach_keys_exist = [&] {
        for (int i = 0; i < 40; ++i) redis.must({"SET", "there" + std::to_string(i), "1", "PX", "60000"});
        std::vector<std::vector<ScriptLimit>> there;
        for (int i = 0; i < 40; ++i) there.push_back({bucket("there" + std::to_string(i), interval, burst)});
        decide.batch(there);
        redis.must({"CONFIG", "RESETSTAT"});
    };

    SECTION("keys mostly missing: SET NX GET, no GET") {
        redis.must({"CONFIG", "RESETSTAT"});
        exercise("fresh");
        CHECK(calls("get") == 2);  // exercise()'s own two
    }
    SECTION("keys mostly there: GET first") {
        teach_keys_exist();
        exercise("fresh");
        CHECK(calls("get") == 2 + 3);  // a GET per call that reads the key first
    }
    SECTION("read first: whatever the key holds is read as by the other way") {
        // The GET way reads a value of up to 16 bytes itself (lua/token_bucket.lua, alone):
        // a tat sluice wrote, or anything else, which is not ours (a full bucket, replaced).
        teach_keys_exist();
        for (const std::string value : {"nan", "inf", "-inf", "-5", "1e400", "", "abc", " 12", "1e5", "0x10", "12",
                                        "-0", "1795738700922926.5", "99999999999999999999"}) {
            INFO(value);
            redis.must({"SET", "odd", value});
            const auto r = decide({bucket("odd", interval, burst)});
            CHECK(r.results[0].allowed);
            CHECK(r.results[0].remaining == static_cast<std::uint64_t>(burst - 1));
            CHECK(r.results[0].reset.count() == ceil_ms(interval));
            CHECK(redis.text({"GET", "odd"}) == std::to_string(r.now_us + interval));
        }
        // A tat sluice wrote, 3 s ahead: 3 tokens used, and this request's.
        const auto now = decide({bucket("clock", interval, burst)}).now_us;
        redis.must({"SET", "ahead", std::to_string(now + 3 * interval)});
        const auto r = decide({bucket("ahead", interval, burst)});
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == static_cast<std::uint64_t>(burst - 4));
        CHECK(redis.text({"GET", "ahead"}) == std::to_string(now + 4 * interval));
        CHECK(calls("get") == (14 + 2) + (14 + 1));  // the script read every key first; the test's own
    }
    SECTION("a key that is not a string is replaced either way") {
        redis.must({"ZADD", "z", "1", "x"});
        auto r = decide({bucket("z", interval, burst)});
        CHECK(r.results[0].remaining == static_cast<std::uint64_t>(burst - 1));
        CHECK(redis.text({"TYPE", "z"}) == "string");
    }
}

TEST_CASE("decide script: a key of the other algorithm is replaced, not an error", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    SECTION("sorted set read by a token bucket") {
        redis.must({"ZADD", "k", "1", "x"});
        auto r = decide({bucket("k", 1'000'000, 5)});
        CHECK(r.results[0].remaining == 4);
        CHECK(redis.text({"TYPE", "k"}) == "string");
    }
    SECTION("string read by a sliding window") {
        redis.must({"SET", "k", "12345"});
        auto r = decide({window("k", 5, 1'000'000)});
        CHECK(r.results[0].remaining == 4);
        CHECK(redis.text({"TYPE", "k"}) == "zset");
    }
    SECTION("string read by a concurrency limit, twice in one call") {
        redis.must({"SET", "k", "12345"});
        const auto replies = decide.batch({{slots("k", 5, 1'000'000, "a")}, {slots("k", 5, 1'000'000, "b")}});
        CHECK(replies[0].results[0].remaining == 4);
        CHECK(replies[1].results[0].remaining == 3);
        CHECK(replies[1].results[0].reset.count() == 1000);
        CHECK(redis.text({"TYPE", "k"}) == "zset");
        CHECK(redis.integer({"ZCARD", "k"}) == 2);
        CHECK(redis.integer({"PEXPIRETIME", "k"}) == ceil_ms(replies[0].now_us + 1'000'000));
    }
}

TEST_CASE("decide script: a batch decides its requests in order, each as if alone", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    // Burst 3 on one key, asked five times in one call, with a request on another key and
    // one whose second limit rejects in between.
    redis.must({"SET", "tight", "1"});
    auto replies = decide.batch({
        {bucket("b", minute, 3)},
        {bucket("b", minute, 3)},
        {bucket("other", minute, 3)},
        {bucket("b", minute, 3), window("tight", 0, minute)},  // rejected: writes nothing
        {bucket("b", minute, 3)},
        {bucket("b", minute, 3)},
        {bucket("b", minute, 3)},
    });
    REQUIRE(replies.size() == 7);
    CHECK(replies[0].results[0].allowed);
    CHECK(replies[0].results[0].remaining == 2);
    CHECK(replies[1].results[0].remaining == 1);
    CHECK(replies[2].results[0].allowed);
    CHECK(replies[2].results[0].remaining == 2);
    CHECK(replies[3].results[0].allowed);  // the bucket alone would admit ...
    CHECK_FALSE(replies[3].results[1].allowed);  // ... the window does not
    CHECK(replies[3].results[0].remaining == 1);  // not charged
    CHECK(replies[4].results[0].allowed);
    CHECK(replies[4].results[0].remaining == 0);
    CHECK_FALSE(replies[5].results[0].allowed);
    CHECK(replies[5].results[0].retry_after > 59'000ms);
    CHECK_FALSE(replies[6].results[0].allowed);
    // One Redis TIME for the whole batch; the key holds three intervals past it.
    CHECK(replies[6].now_us == replies[0].now_us);
    CHECK(redis.text({"GET", "b"}) == std::to_string(replies[0].now_us + 3 * minute));
    CHECK(redis.text({"TYPE", "tight"}) == "string");  // the rejected request wrote nothing
}

TEST_CASE("decide script: a batch counts a sliding window's requests in order, each as if alone", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    const std::int64_t t0 = redis_time_us(redis);
    // Two members from before, one of them expired; a limit of 4 leaves room for three.
    redis.must({"ZADD", "w", std::to_string(t0 - minute - 5), "expired", std::to_string(t0 - 1000), "old"});
    auto replies = decide.batch({
        {window("w", 4, minute)},
        {window("w", 4, minute), window("tight", 0, minute)},  // rejected by the other limit
        {window("w", 4, minute)},
        {window("w", 4, minute), window("other", 9, minute)},
        {window("w", 4, minute)},  // full: the oldest counted member is "old"
        {window("w", 4, minute)},
        {window("w", 4, minute), window("other", 9, minute)},
    });
    REQUIRE(replies.size() == 7);
    const auto now = replies[0].now_us;
    CHECK(replies[0].results[0].allowed);
    CHECK(replies[0].results[0].remaining == 2);
    CHECK(replies[1].results[0].allowed);  // the window alone would admit ...
    CHECK(replies[1].results[0].remaining == 2);  // ... but took nothing
    CHECK(replies[1].results[0].reset.count() == ceil_ms(minute));  // the newest is this call's
    CHECK_FALSE(replies[1].results[1].allowed);
    CHECK(replies[2].results[0].remaining == 1);
    CHECK(replies[3].results[0].allowed);
    CHECK(replies[3].results[0].remaining == 0);
    CHECK(replies[3].results[1].remaining == 8);
    for (int i : {4, 5, 6}) {
        INFO("request " << i);
        CHECK_FALSE(replies[i].results[0].allowed);
        CHECK(replies[i].results[0].retry_after.count() == ceil_ms(t0 - 1000 + minute - now));
        CHECK(replies[i].results[0].reset.count() == ceil_ms(minute));
    }
    CHECK(replies[6].results[1].allowed);  // allowed alone, not charged
    CHECK(replies[6].results[1].remaining == 8);
    // The set holds "old" and the three admitted, named by the members held before each.
    const auto members = redis.must({"ZRANGE", "w", "0", "-1"});
    REQUIRE(members.elements.size() == 4);
    CHECK(members.elements[0].text == "old");
    for (int i = 1; i <= 3; ++i) CHECK(members.elements[i].text == std::to_string(now) + "-" + std::to_string(i));
    CHECK(redis.integer({"ZCARD", "other"}) == 1);
    CHECK(redis.integer({"EXISTS", "tight"}) == 0);
    CHECK(redis.integer({"PEXPIRETIME", "w"}) == ceil_ms(now + minute));
}

TEST_CASE("decide script: a batch takes a key's concurrency slots in order, each as if alone", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    // What the sets hold besides: nothing more; 40 ended slots nobody trimmed (in "d" only
    // ended ones); a limit of 17 with 13 more live slots (in "d" 3 ended ones). The figures
    // are the same, and the ended slots go.
    const std::string way = GENERATE(as<std::string>{}, "few", "untrimmed", "large limit");
    CAPTURE(way);
    const std::int64_t second = 1'000'000, lease = 2 * second, minute = 60 * second;
    const std::int64_t t0 = redis_time_us(redis);
    // Held before the call: a slot that ended, one ending soon and one whose longer lease (a
    // configuration before a reload) ends after every slot this call takes.
    redis.must({"ZADD", "c", std::to_string(t0 - 5), "ended", std::to_string(t0 + second / 2), "early",
                std::to_string(t0 + 5 * second), "late"});
    // The large limit holds 13 more live slots, so that as many are left as of the limit of 4.
    const std::int64_t c_limit = way == "large limit" ? 17 : 4;
    for (int i = 0; way == "large limit" && i < 13; ++i)
        redis.must({"ZADD", "c", std::to_string(t0 + 3 * second + i), "held" + std::to_string(i)});
    // "d" holds no live slot: none at all, 40 ended ones, or 3 ended ones.
    const int d_ended = way == "untrimmed" ? 40 : way == "large limit" ? 3 : 0;
    for (int i = 0; i < d_ended; ++i) redis.must({"ZADD", "d", std::to_string(t0 - 100 - i), "gone" + std::to_string(i)});
    for (int i = 0; way == "untrimmed" && i < 40; ++i)
        redis.must({"ZADD", "c", std::to_string(t0 - 1000 - i), "stale" + std::to_string(i)});
    redis.must({"PEXPIREAT", "c", std::to_string(ceil_ms(t0 + 5 * second))});
    auto replies = decide.batch({
        {slots("c", c_limit, lease, "a")},
        {slots("c", c_limit, lease, "b"), window("tight", 0, minute)},  // rejected by the other limit
        {slots("c", c_limit, lease, "b2"), window("other", 9, minute)},
        {slots("c", c_limit, lease, "x")},  // full
        {slots("c", c_limit, lease, "y"), window("other", 9, minute)},
        {slots("d", 2, lease, "p")},  // a key without live slots
        {slots("d", 2, lease, "q"), window("other", 9, minute)},
        {slots("d", 2, lease, "r")},
    });
    REQUIRE(replies.size() == 8);
    const auto now = replies[0].now_us;
    const auto late = ceil_ms(t0 + 5 * second - now), early = ceil_ms(t0 + second / 2 - now);
    CHECK(replies[0].results[0].allowed);
    CHECK(replies[0].results[0].remaining == 1);
    CHECK(replies[0].results[0].reset.count() == late);
    CHECK(replies[1].results[0].allowed);  // the slot alone would be taken ...
    CHECK_FALSE(replies[1].results[1].allowed);  // ... the window refuses
    CHECK(replies[1].results[0].remaining == 1);  // nothing taken
    CHECK(replies[2].results[0].allowed);
    CHECK(replies[2].results[0].remaining == 0);
    CHECK(replies[2].results[0].reset.count() == late);
    for (int i : {3, 4}) {
        INFO("request " << i);
        CHECK_FALSE(replies[i].results[0].allowed);
        CHECK(replies[i].results[0].remaining == 0);
        CHECK(replies[i].results[0].retry_after.count() == early);  // the earliest lease end
        CHECK(replies[i].results[0].reset.count() == late);
    }
    CHECK(replies[4].results[1].allowed);  // allowed alone, not charged
    CHECK(replies[4].results[1].remaining == 8);
    CHECK(replies[5].results[0].allowed);
    CHECK(replies[5].results[0].remaining == 1);
    CHECK(replies[5].results[0].reset.count() == ceil_ms(lease));
    CHECK(replies[6].results[0].allowed);
    CHECK(replies[6].results[0].remaining == 0);
    CHECK(replies[6].results[1].remaining == 7);
    CHECK_FALSE(replies[7].results[0].allowed);
    CHECK(replies[7].results[0].retry_after == 1000ms);  // a second at most
    CHECK(replies[7].results[0].reset.count() == ceil_ms(lease));
    // Redis holds what one call per request would have left: the ended slot trimmed, the
    // admitted ones at now + lease, the expiry at the last lease end.
    // (The large limit's 13 more slots end after these, before "late".)
    const auto c = redis.must({"ZRANGE", "c", "0", "-1", "WITHSCORES"});
    REQUIRE(c.elements.size() == (way == "large limit" ? 34u : 8u));
    CHECK(c.elements[0].text == "early");
    CHECK(c.elements[2].text == "a");
    CHECK(c.elements[3].text == std::to_string(now + lease));
    CHECK(c.elements[4].text == "b2");
    CHECK(c.elements[5].text == std::to_string(now + lease));
    CHECK(c.elements[c.elements.size() - 2].text == "late");
    CHECK(redis.integer({"PEXPIRETIME", "c"}) == ceil_ms(t0 + 5 * second));
    const auto d = redis.must({"ZRANGE", "d", "0", "-1"});
    REQUIRE(d.elements.size() == 2);
    CHECK(d.elements[0].text == "p");
    CHECK(d.elements[1].text == "q");
    CHECK(redis.integer({"PEXPIRETIME", "d"}) == ceil_ms(now + lease));
    CHECK(redis.integer({"ZCARD", "other"}) == 2);
    CHECK(redis.integer({"EXISTS", "tight"}) == 0);
}

TEST_CASE("decide script: a set that is not there is asked whether it exists; sets mostly there are counted at once",
          "[lua][redis]") {
    // lua/concurrency.lua and sliding_window.lua: where a lone limit's keys are mostly gone (a
    // client's slots all given back, a client back after its window), ZCARD first: a key
    // that is not there needs no DEL. Where they mostly exist (a global cap, a busy client),
    // or nothing is known yet, ZCOUNT at once. Either way the figures are the same, and a set
    // whose members all ended is replaced (DEL) by the new one.
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const bool concurrency = GENERATE(true, false);
    CAPTURE(concurrency);
    const std::int64_t span = 2'000'000;  // a slot's lease, a window
    auto limit = [&](const std::string& key, const std::string& token) {
        return concurrency ? slots(key, 2, span, token) : window(key, 2, span);
    };
    auto calls = [&](const std::string& command) { return command_calls(redis, command); };
    // One request on `key`: admitted, 1 left, the set then holds its member alone.
    auto one = [&](const std::string& key) {
        redis.must({"CONFIG", "RESETSTAT"});
        const auto r = decide({limit(key, "a")});
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == 1);
        CHECK(r.results[0].reset.count() == span / 1000);
        const auto held = redis.must({"ZRANGE", key, "0", "-1", "WITHSCORES"});
        REQUIRE(held.elements.size() == 2);
        CHECK(held.elements[0].text == (concurrency ? "a" : std::to_string(r.now_us) + "-0"));
        CHECK(held.elements[1].text == std::to_string(concurrency ? r.now_us + span : r.now_us));
        CHECK(redis.integer({"PEXPIRETIME", key}) == ceil_ms(r.now_us + span));
    };
    // A set whose members all ended (not expired yet: a slot released out of order, a
    // window's members given back).
    auto ended = [&](const std::string& key) {
        const std::int64_t t0 = redis_time_us(redis);
        redis.must({"ZADD", key, std::to_string(t0 - 3 * span), "old1", std::to_string(t0 - 4 * span), "old2"});
    };
    // A plan knows nothing of its keys yet: counted at once (a key not there is then DELeted).
    // The commands the last one() ran: ZCARD, ZCOUNT and DEL (each at most once).
    auto ran = [&](long long zcard, long long zcount, long long del) {
        CHECK(calls("zcard") == zcard);
        CHECK(calls("zcount") == zcount);
        CHECK(calls("del") == del);
    };
    one("new");
    ran(0, 1, 1);
    // 40 keys that are not there teach the plan that its keys are mostly gone.
    std::vector<std::vector<ScriptLimit>> gone;
    for (int i = 0; i < 40; ++i) gone.push_back({limit("gone" + std::to_string(i), "g" + std::to_string(i))});
    for (const auto& reply : decide.batch(gone)) CHECK(reply.results[0].remaining == 1);
    one("first");
    ran(1, 0, 0);
    CHECK(calls("zadd") == 1);
    ended("stale");
    one("stale");
    ran(1, 1, 1);
    // 40 keys that hold a live member each teach the plan that its keys mostly exist.
    const std::int64_t t0 = redis_time_us(redis);
    std::vector<std::vector<ScriptLimit>> busy;
    for (int i = 0; i < 40; ++i) {
        const std::string key = "busy" + std::to_string(i);
        redis.must({"ZADD", key, std::to_string(concurrency ? t0 + span : t0), "other"});
        busy.push_back({limit(key, "t" + std::to_string(i))});
    }
    for (const auto& reply : decide.batch(busy)) CHECK(reply.results[0].remaining == 0);
    one("second");
    ran(0, 1, 1);
    ended("stale2");
    one("stale2");
    ran(0, 1, 1);
}

TEST_CASE("decide script: a key used by both algorithms in one batch is handed over in order", "[lua][redis]") {
    // After a reload changed a limit's algorithm, one batch can hold the same key under both.
    // The bucket writes at the end of the call; the window must still see, and then replace,
    // what the bucket wrote before it, exactly as one call per request would.
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    SECTION("bucket, then window: the window's set is what stays") {
        auto replies = decide.batch({{bucket("k", minute, 3)}, {bucket("k", minute, 3)}, {window("k", 5, minute)}});
        CHECK(replies[1].results[0].remaining == 1);
        CHECK(replies[2].results[0].remaining == 4);  // the string was not a set: nothing counted
        CHECK(redis.text({"TYPE", "k"}) == "zset");
        CHECK(redis.integer({"ZCARD", "k"}) == 1);
    }
    SECTION("bucket, window, bucket: the second bucket finds the set, a full bucket") {
        auto replies = decide.batch({{bucket("k", minute, 3)}, {window("k", 5, minute)}, {bucket("k", minute, 3)}});
        CHECK(replies[0].results[0].remaining == 2);
        CHECK(replies[2].results[0].remaining == 2);
        CHECK(redis.text({"TYPE", "k"}) == "string");
        CHECK(redis.text({"GET", "k"}) == std::to_string(replies[0].now_us + minute));
    }
    SECTION("the same in a request of two limits") {
        auto replies = decide.batch({{bucket("k", minute, 3)}, {window("k", 5, minute), bucket("other", minute, 3)}});
        CHECK(replies[1].results[0].remaining == 4);
        CHECK(redis.text({"TYPE", "k"}) == "zset");
        CHECK(redis.text({"GET", "other"}) == std::to_string(replies[0].now_us + minute));
    }
}

TEST_CASE("decide script: a limit checked only takes nothing; its charge takes the cost, past the capacity too",
          "[lua][redis][count]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    SECTION("token bucket") {
        // Checked (flags 2) three times: nothing taken, every one admitted.
        auto replies = decide.batch({{flagged(bucket("b", minute, 2), "2")}, {flagged(bucket("b", minute, 2), "2")},
                                     {flagged(bucket("b", minute, 2), "2"), bucket("other", minute, 5)}});
        for (const auto& reply : replies) {
            CHECK(reply.results[0].allowed);
            CHECK(reply.results[0].remaining == 2);
        }
        CHECK(replies[2].results[1].remaining == 4);  // the ordinary limit beside it took its token
        CHECK(redis.integer({"EXISTS", "b"}) == 0);
        // Charged (flags 4) three times: the third goes past the capacity, and is reported
        // as a limit with no room (allowed 0), remaining 0.
        replies = decide.batch({{flagged(bucket("b", minute, 2), "4")}, {flagged(bucket("b", minute, 2), "4")},
                                {flagged(bucket("b", minute, 2), "4")}});
        CHECK(replies[0].results[0].remaining == 1);
        CHECK(replies[1].results[0].remaining == 0);
        CHECK_FALSE(replies[2].results[0].allowed);
        CHECK(replies[2].results[0].remaining == 0);
        // Past the capacity by one: the stored tat is three intervals ahead, and the debt is
        // kept (a counted limit's bucket is not read as merely empty): the next check waits
        // two intervals, one for the debt and one for itself.
        CHECK(std::stoll(redis.text({"GET", "b"})) == replies[2].now_us + 3 * minute);
        const auto waits = decide.batch({{flagged(bucket("b", minute, 2), "2")}});
        CHECK(waits[0].results[0].retry_after.count() == ceil_ms(replies[2].now_us + 2 * minute - waits[0].now_us));
        // The check refuses now, and a refused request of another limit takes nothing.
        replies = decide.batch({{flagged(bucket("b", minute, 2), "2"), bucket("other", minute, 5)}});
        CHECK_FALSE(replies[0].results[0].allowed);
        CHECK(replies[0].results[1].allowed);
        CHECK(replies[0].results[1].remaining == 4);  // (it would take one: the request is refused)
    }
    SECTION("sliding window") {
        auto replies = decide.batch({{flagged(window("w", 2, minute), "2")}, {flagged(window("w", 2, minute), "3")}});
        CHECK(replies[0].results[0].remaining == 2);
        CHECK(replies[1].results[0].remaining == 2);
        CHECK(redis.integer({"EXISTS", "w"}) == 0);
        replies = decide.batch({{flagged(window("w", 2, minute), "4")}, {flagged(window("w", 2, minute), "4")},
                                {flagged(window("w", 2, minute), "4")}});
        CHECK(replies[1].results[0].remaining == 0);
        CHECK_FALSE(replies[2].results[0].allowed);
        CHECK(redis.integer({"ZCARD", "w"}) == 3);  // every charge counted
        replies = decide.batch({{flagged(window("w", 2, minute), "2")}});
        CHECK_FALSE(replies[0].results[0].allowed);
        // Room again once two of the three have left: a whole window after the second.
        CHECK(replies[0].results[0].retry_after.count() > 0);
    }
    SECTION("fixed window, with a cost") {
        ScriptLimit quota = fixed("f", 5, minute, 2);
        auto replies = decide.batch({{flagged(quota, "2")}, {flagged(quota, "4")}, {flagged(quota, "4")}, {flagged(quota, "4")}});
        CHECK(replies[0].results[0].remaining == 5);
        CHECK(replies[1].results[0].remaining == 3);
        CHECK(replies[2].results[0].remaining == 1);
        CHECK_FALSE(replies[3].results[0].allowed);  // 4 + 2 > 5: no room, charged all the same
        CHECK(replies[3].results[0].remaining == 0);
        CHECK(redis.text({"GET", "f"}).ends_with(":6"));
        replies = decide.batch({{flagged(fixed("f", 5, minute, 1), "2")}});
        CHECK_FALSE(replies[0].results[0].allowed);
    }
}

TEST_CASE("decide script: a refusal by a limit with a ban bans the key; nothing is counted while it lasts",
          "[lua][redis][ban]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    auto banning = [](ScriptLimit limit, std::int64_t ban_us, std::string flags = "0") {
        limit.flags = flags + "b" + std::to_string(ban_us);
        return limit;
    };
    // Two requests fit the window of 2 a minute; the third is refused and bans the key for
    // ten minutes (retry: the ban's end, later than the window's own).
    const ScriptLimit tight = banning(window("w", 2, minute), 10 * minute);
    auto replies = decide.batch({{tight, bucket("other", minute, 100)},
                                 {tight, bucket("other", minute, 100)},
                                 {tight, bucket("other", minute, 100)},
                                 {tight, bucket("other", minute, 100)}});
    CHECK(replies[1].results[0].allowed);
    CHECK(replies[1].results[1].remaining == 98);
    CHECK(replies[2].results[0].banned);
    CHECK_FALSE(replies[2].results[0].allowed);
    CHECK(replies[2].results[0].retry_after.count() == 600'000);
    CHECK(replies[2].results[1].remaining == 98);  // (the refused request took nothing)
    // The fourth, in the same call, finds the ban: refused, the bucket not even asked.
    CHECK(replies[3].results[0].banned);
    CHECK(replies[3].results[0].retry_after.count() == 600'000);
    CHECK(redis.text({"GET", "w:ban"}) == std::to_string(replies[2].now_us + 10 * minute));
    CHECK(redis.integer({"PEXPIRETIME", "w:ban"}) == ceil_ms(replies[2].now_us + 10 * minute));
    CHECK(redis.integer({"ZCARD", "w"}) == 2);
    // The window empties (its key deleted): the ban holds all the same; the other limit is
    // not asked, so takes nothing.
    redis.must({"DEL", "w"});
    replies = decide.batch({{tight, bucket("other", minute, 100)}});
    CHECK(replies[0].results[0].banned);
    CHECK(replies[0].results[0].retry_after.count() > 590'000);
    CHECK(redis.integer({"EXISTS", "w"}) == 0);
    CHECK(std::stoll(redis.text({"GET", "other"})) < replies[0].now_us + 3 * minute);  // still 2 taken
    // A look-up (every cost 0) during the ban: the ban over the window's own figures, and
    // the other limit as it stands (98 left, not 1, 0, 0, 0); nothing written.
    {
        ScriptLimit tight_look = tight, other_look = bucket("other", minute, 100);
        tight_look.cost = other_look.cost = 0;
        const std::string other_before = redis.text({"GET", "other"});
        const auto look = decide.batch({{tight_look, other_look}});
        CHECK(look[0].results[0].banned);
        CHECK(look[0].results[0].remaining == 0);
        CHECK(look[0].results[0].retry_after.count() > 590'000);
        CHECK(look[0].results[1].allowed);
        CHECK(look[0].results[1].remaining == 98);
        CHECK(redis.text({"GET", "other"}) == other_before);
        CHECK(redis.integer({"EXISTS", "w"}) == 0);
    }
    // Lifted (the admin reset deletes it): the window decides again.
    redis.must({"DEL", "w:ban"});
    replies = decide.batch({{tight, bucket("other", minute, 100)}});
    CHECK(replies[0].results[0].allowed);
    CHECK_FALSE(replies[0].results[0].banned);
    // A limit checked only (count) bans too; a ban below the limit's own retry keeps the later.
    const ScriptLimit quota = banning(fixed("f", 1, minute), 1'000'000, "2");
    replies = decide.batch({{quota}});
    CHECK(replies[0].results[0].allowed);
    redis.must({"SET", "f", std::to_string(replies[0].now_us - replies[0].now_us % minute) + ":1"});
    replies = decide.batch({{quota}});
    CHECK(replies[0].results[0].banned);
    // (The later of the ban, 1 s, and the window's end, whenever in the minute this runs.)
    CHECK(replies[0].results[0].retry_after.count() ==
          std::max<std::int64_t>(1000, ceil_ms(minute - replies[0].now_us % minute)));
    // A look-up (cost 0) of a window past its limit is refused but starts no ban.
    ScriptLimit over = window("v", 2, minute);
    over.flags = "4";
    decide.batch({{over}, {over}, {over}});
    ScriptLimit look = banning(window("v", 2, minute), 10 * minute, "2");
    look.cost = 0;
    replies = decide.batch({{look}});
    CHECK_FALSE(replies[0].results[0].allowed);
    CHECK_FALSE(replies[0].results[0].banned);
    CHECK(redis.integer({"EXISTS", "v:ban"}) == 0);
    // Malformed: a ban on a shadow limit, a charge, concurrency; a ban of 0.
    for (const char* flags : {"1b5", "4b5", "0b0", "0b", "0x5"}) {
        CAPTURE(flags);
        ScriptLimit bad = window("z", 2, minute);
        bad.flags = flags;
        const auto result = decide.raw({bad});
        REQUIRE_FALSE(result.ok());
    }
}

// A sliding window whose requests may cost more than one unit (its plan says ",w").
ScriptLimit weighted(std::string key, std::int64_t limit, std::int64_t window_us, std::int64_t cost,
                     std::string flags = {}) {
    return {std::move(key), "sliding_window", false, limit, window_us, cost, std::to_string(window_us) + ",w",
            {}, std::move(flags)};
}

TEST_CASE("decide script: a weighted sliding window keeps a request of any cost as one member", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    // 10,000 units: one member, and the mark holding the units beyond one (scored -9,999),
    // where they were 10,000 members (a ZADD of about 10 ms).
    auto r = decide({weighted("w", 20'000, minute, 10'000)});
    REQUIRE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 10'000);
    const std::int64_t first = r.now_us;
    CHECK(redis.integer({"ZCARD", "w"}) == 2);
    CHECK(redis.text({"ZSCORE", "w", "w"}) == "-9999");
    // Requests of one unit and of more beside it, counted in units.
    r = decide({weighted("w", 20'000, minute, 1)});
    CHECK(r.results[0].remaining == 9'999);
    const std::int64_t second = r.now_us;
    r = decide({weighted("w", 20'000, minute, 9'000)});
    CHECK(r.results[0].remaining == 999);
    const std::int64_t third = r.now_us;
    CHECK(redis.integer({"ZCARD", "w"}) == 4);
    CHECK(redis.text({"ZSCORE", "w", "w"}) == "-18998");
    // Refused, nothing written: 1 unit must leave (the first request's 10,000 go together),
    // then 10,001 (the first's and the second's), then 19,001 (all three).
    r = decide({weighted("w", 20'000, minute, 1'000)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 999);
    CHECK(r.results[0].retry_after.count() == ceil_ms(first + minute - r.now_us));
    r = decide({weighted("w", 20'000, minute, 11'000)});
    CHECK(r.results[0].retry_after.count() == ceil_ms(second + minute - r.now_us));
    r = decide({weighted("w", 20'000, minute, 20'000)});
    CHECK(r.results[0].retry_after.count() == ceil_ms(third + minute - r.now_us));
    CHECK(r.results[0].reset.count() == ceil_ms(third + minute - r.now_us));
    CHECK(redis.integer({"ZCARD", "w"}) == 4);
    // A give-back of part of the 9,000 leaves it as one member of 5,000; the rest, and more
    // than it holds, removes it (the one-unit member beside it is another instant's).
    r = decide({weighted("w", 20'000, minute, 4'000, "5t" + std::to_string(third))});
    CHECK(r.results[0].remaining == 4'999);
    CHECK(redis.integer({"ZCARD", "w"}) == 4);
    CHECK(redis.text({"ZSCORE", "w", "w"}) == "-14998");
    r = decide({weighted("w", 20'000, minute, 6'000, "5t" + std::to_string(third))});
    CHECK(r.results[0].remaining == 9'999);
    CHECK(redis.integer({"ZCARD", "w"}) == 3);
    CHECK(redis.text({"ZSCORE", "w", "w"}) == "-9999");
    // Of 3 units given back, 2 leave a member of one unit: a plain member again.
    r = decide({weighted("w", 20'000, minute, 3)});
    const std::int64_t small = r.now_us;
    r = decide({weighted("w", 20'000, minute, 2, "5t" + std::to_string(small))});
    CHECK(r.results[0].remaining == 9'998);
    CHECK(redis.text({"ZSCORE", "w", "w"}) == "-9999");
    CHECK(redis.integer({"ZCOUNT", "w", std::to_string(small), std::to_string(small)}) == 1);

    // Members leaving the window take their units with them: the mark is lowered as the set
    // is counted, by a refused request too, and goes with the last weighted member.
    const std::int64_t short_window = 600'000;
    r = decide({weighted("s", 100, short_window, 60)});
    const std::int64_t heavy = r.now_us;
    while (redis_time_us(redis) < heavy + short_window / 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = decide({weighted("s", 100, short_window, 30)});
    const std::int64_t light = r.now_us;
    REQUIRE(light < heavy + short_window);
    CHECK(r.results[0].remaining == 10);
    CHECK(redis.text({"ZSCORE", "s", "w"}) == "-88");
    while (redis_time_us(redis) <= heavy + short_window) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = decide({weighted("s", 100, short_window, 80)});
    if (r.now_us < light + short_window) {  // (the 30 still count, for 300 ms: 70 fit, not 80)
        CHECK_FALSE(r.results[0].allowed);
        CHECK(r.results[0].remaining == 70);
        CHECK(redis.integer({"ZCARD", "s"}) == 2);
        CHECK(redis.text({"ZSCORE", "s", "w"}) == "-29");
    }

    // A refusal's retry reads at most 48 members from the oldest (47 and the mark) and 16
    // back from the newest: exact there; between them, when the need-th member has left
    // (never early).
    r = decide({weighted("long", 700, minute, 100)});
    const std::int64_t oldest = r.now_us;
    std::vector<std::int64_t> at;
    for (int i = 0; i < 599; ++i) at.push_back(decide({weighted("long", 700, minute, 1)}).now_us);
    auto retry = [&](std::int64_t cost) {
        const auto refused = decide({weighted("long", 700, minute, cost)});
        REQUIRE_FALSE(refused.results[0].allowed);
        return std::pair{refused.results[0].retry_after.count(), refused.now_us};
    };
    auto [ms, now] = retry(2);  // 1 unit must leave: the oldest's 100 go
    CHECK(ms == ceil_ms(oldest + minute - now));
    std::tie(ms, now) = retry(102);  // 101: and the first of one unit
    CHECK(ms == ceil_ms(at[0] + minute - now));
    std::tie(ms, now) = retry(700);  // all 699
    CHECK(ms == ceil_ms(at[598] + minute - now));
    std::tie(ms, now) = retry(131);  // 130: the 31st member, on the second page
    CHECK(ms == ceil_ms(at[29] + minute - now));
    std::tie(ms, now) = retry(690);  // 689: the 11th from the newest
    CHECK(ms == ceil_ms(at[588] + minute - now));
    std::tie(ms, now) = retry(401);  // 400: the 301st member, read from neither end: the 400th's
    CHECK(ms == ceil_ms(at[398] + minute - now));
    CHECK(redis.integer({"ZCARD", "long"}) == 601);
}

TEST_CASE("decide script: a key counted again within a call (its window changed on reload) names its members on",
          "[lua][redis]") {
    // The batch holds requests of both configurations: the set is written and counted again,
    // and the members of this instant go on from those already named (two of "<t>-1" were one).
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const auto replies = decide.batch({{window("w", 100, 60'000'000)},
                                       {window("w", 100, 30'000'000)},
                                       {window("w", 100, 60'000'000)}});
    CHECK(replies[2].results[0].remaining == 97);
    CHECK(redis.integer({"ZCARD", "w"}) == 3);
}

TEST_CASE("decide script: a reservation settled after the response: a charge past it, or a give-back",
          "[lua][redis][settle]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::int64_t minute = 60'000'000;
    auto give_back = [](ScriptLimit limit, std::int64_t cost, std::int64_t at) {
        limit.flags = "5t" + std::to_string(at);
        limit.cost = cost;
        return limit;
    };
    SECTION("token bucket") {
        // A reservation of 40 of 100 ("d": the bucket keeps a debt), then 10 more reserved.
        auto reserved = decide.batch({{flagged(bucket("b", minute, 100), "0d", 40)}});
        REQUIRE(reserved[0].results[0].allowed);
        CHECK(reserved[0].results[0].remaining == 60);
        // The response reports 15: 25 go back.
        auto settled = decide.batch({{give_back(bucket("b", minute, 100), 25, reserved[0].now_us)}});
        CHECK(settled[0].results[0].allowed);
        CHECK(settled[0].results[0].remaining == 85);
        // Taking it back again cannot make the bucket more than full.
        settled = decide.batch({{give_back(bucket("b", minute, 100), 1000, reserved[0].now_us)}});
        CHECK(settled[0].results[0].remaining == 100);
        // Another reports 250 against a reservation of 50: 200 charged past it, a debt of 150
        // the next requests wait out ("d" keeps it: the retry counts the whole debt).
        reserved = decide.batch({{flagged(bucket("b", minute, 100), "0d", 50)}});
        decide.batch({{flagged(bucket("b", minute, 100), "4", 200)}});
        auto next = decide.batch({{flagged(bucket("b", minute, 100), "0d", 1)}});
        CHECK_FALSE(next[0].results[0].allowed);
        const std::int64_t tat = reserved[0].now_us + 250 * minute;  // (a full bucket before)
        CHECK(std::stoll(redis.text({"GET", "b"})) >= tat - 1);
        CHECK(next[0].results[0].retry_after.count() ==
              ceil_ms(std::stoll(redis.text({"GET", "b"})) + minute - 100 * minute - next[0].now_us));
        // Without "d" the same bucket reads as merely empty: a retry of one interval.
        auto capped = decide.batch({{flagged(bucket("b", minute, 100), "0", 1)}});
        CHECK(capped[0].results[0].retry_after.count() <= 60'000);
    }
    SECTION("sliding window") {
        auto reserved = decide.batch({{flagged(window("w", 10, minute), "0", 6)}});
        CHECK(reserved[0].results[0].remaining == 4);
        decide.batch({{flagged(window("w", 10, minute), "0", 2)}});
        CHECK(redis.integer({"ZCARD", "w"}) == 8);
        // 4 of the first reservation's 6 go back (its members, scored at its time); then 3 are
        // admitted in one call after a give-back in the same call: every member distinct.
        auto replies = decide.batch({{give_back(window("w", 10, minute), 4, reserved[0].now_us)},
                                     {flagged(window("w", 10, minute), "0", 3)}});
        CHECK(replies[0].results[0].remaining == 6);
        CHECK(replies[1].results[0].remaining == 3);
        CHECK(redis.integer({"ZCARD", "w"}) == 7);
        CHECK(redis.integer({"ZCOUNT", "w", std::to_string(reserved[0].now_us), std::to_string(reserved[0].now_us)}) == 2);
        // More than is left of it: only what it still holds goes.
        decide.batch({{give_back(window("w", 10, minute), 50, reserved[0].now_us)}});
        CHECK(redis.integer({"ZCARD", "w"}) == 5);
        // A reservation that has left the window gives nothing back.
        redis.must({"ZADD", "w", std::to_string(reserved[0].now_us - minute), "old-0"});
        decide.batch({{give_back(window("w", 10, minute), 1, reserved[0].now_us - minute)}});
        CHECK(redis.integer({"ZCARD", "w"}) == 6);
    }
    SECTION("fixed window") {
        // Windows of 1000 days: no window ends while this runs.
        const std::int64_t days = 1000LL * 86'400'000'000;
        auto reserved = decide.batch({{flagged(fixed("f", 10, days), "0", 6)}});
        const std::int64_t start = reserved[0].now_us - reserved[0].now_us % days;
        auto replies = decide.batch({{give_back(fixed("f", 10, days), 5, reserved[0].now_us)}});
        CHECK(redis.text({"GET", "f"}) == std::to_string(start) + ":1");
        CHECK(replies[0].results[0].remaining == 9);
        // Never below 0; a reservation of an earlier window gives nothing back to this one.
        decide.batch({{give_back(fixed("f", 10, days), 5, reserved[0].now_us)}});
        CHECK(redis.text({"GET", "f"}) == std::to_string(start) + ":0");
        decide.batch({{flagged(fixed("f", 10, days), "0", 4)}});
        decide.batch({{give_back(fixed("f", 10, days), 3, start - 1)}});
        CHECK(redis.text({"GET", "f"}) == std::to_string(start) + ":4");
    }
    SECTION("thousands of units at once") {
        // A window's members go to Redis a thousand per command (Lua unpacks a few thousand
        // values at most): a settle of 4500 and a give-back of 4400 of them.
        auto reserved = decide.batch({{flagged(window("w", 10'000, minute), "0", 100)}});
        auto charged = decide.batch({{flagged(window("w", 10'000, minute), "4", 4500)}});
        CHECK(charged[0].results[0].remaining == 10'000 - 4600);
        CHECK(redis.integer({"ZCARD", "w"}) == 4600);
        decide.batch({{give_back(window("w", 10'000, minute), 4400, charged[0].now_us)}});
        CHECK(redis.integer({"ZCARD", "w"}) == 200);
        decide.batch({{give_back(window("w", 10'000, minute), 100, reserved[0].now_us)}});
        CHECK(redis.integer({"ZCARD", "w"}) == 100);
        // A cost past 2^53 would not count exactly: refused.
        REQUIRE(decide.raw({flagged(fixed("f", 10, minute), "4", 0)}).ok());
        auto huge = flagged(fixed("f", 10, minute), "4", 0);
        huge.cost = std::numeric_limits<std::int64_t>::max();
        REQUIRE_FALSE(decide.raw({huge}).ok());
    }
    // Malformed: a give-back without its time, a time on another flag, "d" where it means
    // nothing, a give-back of concurrency.
    for (const char* flags : {"5", "5t", "0t5", "4t5", "2d", "5d", "5b5"}) {
        CAPTURE(flags);
        ScriptLimit bad = bucket("z", minute, 2);
        bad.flags = flags;
        REQUIRE_FALSE(decide.raw({bad}).ok());
    }
    ScriptLimit held = slots("c", 2, minute, "token");
    held.flags = "5t5";
    REQUIRE_FALSE(decide.raw({held}).ok());
    ScriptLimit debt_window = window("z", 2, minute);
    debt_window.flags = "0d";
    REQUIRE_FALSE(decide.raw({debt_window}).ok());
}

TEST_CASE("decide script: malformed calls are error replies", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script decide{redis, false, library};
    auto run = [&](std::vector<std::string> keys_then_args, std::size_t keys) {
        std::vector<std::string> args = decide.call();
        args.push_back(std::to_string(keys));
        args.insert(args.end(), keys_then_args.begin(), keys_then_args.end());
        return redis.run(args);
    };
    auto expect_error = [](const redis::RedisResult& result, const std::string& text) {
        INFO("expected an error containing '" << text << "'");
        REQUIRE_FALSE(result.ok());
        CHECK_THAT(result.error->message, Catch::Contains(text));
    };
    expect_error(decide.raw({ScriptLimit{"k", "leaking_bucket", false, 1, 1, 1, {}}}), "plan 1: unknown algorithm leaking_bucket");
    // A leaky bucket's second parameter is "burst,delay_us,max_wait_us", three whole numbers.
    for (const char* spec : {"5", "5,0", "5,0,1,2", "5,-1,0", "5,0,x", "5,,0"})
        expect_error(run({"k", "1", std::string("leaky_bucket 0 1 1000 ") + spec, "1"}, 1),
                     "plan 1: parameters of limit 1 are not valid");
    // A limit is five fields, separated by single spaces; limits are separated by ";".
    for (const char* plan : {"token_bucket 0 1 1000", "token_bucket 0 1 1000 5 6", "token_bucket  0 1 1000 5",
                             "token_bucket 6 1 1000 5", "token_bucket 0 -1 1000 5", "token_bucket 0 1 1e3 5", "",
                             "token_bucket 0 1 1000 5;", ";token_bucket 0 1 1000 5"})
        expect_error(run({"k", "1", plan, "1"}, 1), "is not \"algorithm flags cost x y\"");
    // Concurrency and leaky buckets are not counted after the response.
    for (const char* plan : {"concurrency 2 1 5 1000000", "leaky_bucket 4 1 1000 5,0,0"})
        expect_error(run({"k", "1", plan, "1", "token"}, 1), "is not counted after the response");
    expect_error(run({"k", "1", "token_bucket 0 1 1000 x", "1"}, 1), "plan 1: parameters of limit 1 are not valid");
    expect_error(run({"k", "1", "token_bucket 0 1 1000 5;token_bucket 0 1 1000 y", "1"}, 1),
                 "plan 1: parameters of limit 2 are not valid");
    expect_error(run({"k", "token_bucket 0 1 1000 5", "1"}, 1), "argument 1 is not a number of plans");
    expect_error(run({"k", "2", "token_bucket 0 1 1000 5"}, 1), "argument 1 is not a number of plans");
    expect_error(run({"k", "1", "token_bucket 0 1 1000 5", "2"}, 1), "argument 3 is not a plan number");
    expect_error(run({"k", "1", "token_bucket 0 1 1000 5", "01"}, 1), "argument 3 is not a plan number");
    expect_error(run({"k", "k2", "1", "token_bucket 0 1 1000 5", "1"}, 2), "2 keys for 1 limits");
    expect_error(run({"k", "1", "token_bucket 0 1 1000 5", "1", "1"}, 1), "1 keys for 2 limits");
    expect_error(run({"k", "1", "concurrency 0 1 5 1000000", "1"}, 1), "argument 4 is not an owner token");
    // Requests without plan numbers: one plan, without a concurrency limit, and whole
    // requests' keys. (Without keys such a call decides nothing, as one with no requests.)
    expect_error(run({"k", "k2", "2", "token_bucket 0 1 1000 5", "token_bucket 0 1 1000 6"}, 2),
                 "requests without plan numbers need one plan, without a concurrency limit");
    expect_error(run({"k", "1", "concurrency 0 1 5 1000000"}, 1),
                 "requests without plan numbers need one plan, without a concurrency limit");
    expect_error(run({"k", "k2", "k3", "1", "token_bucket 0 1 1000 5;token_bucket 0 1 1000 6"}, 3), "3 keys for 2 limits");
    // A library keeps its table of plan numbers from call to call: a number only names a plan
    // of its own call, also after a call refused midway through its plans.
    REQUIRE(run({"p1", "p2", "p3", "3", "token_bucket 0 1 1000 5", "token_bucket 0 1 1000 6", "token_bucket 0 1 1000 7",
                 "1", "2", "3"}, 3).ok());
    expect_error(run({"p1", "3", "token_bucket 0 1 1000 5", "token_bucket 0 1 1000 x", "token_bucket 0 1 1000 7", "1"}, 1),
                 "plan 2: parameters of limit 1 are not valid");
    expect_error(run({"p1", "1", "token_bucket 0 1 1000 5", "2"}, 1), "argument 3 is not a plan number");
    expect_error(run({"p1", "1", "token_bucket 0 1 1000 5", "3"}, 1), "argument 3 is not a plan number");
    const auto nothing = run({"1", "token_bucket 0 1 1000 5"}, 0);
    REQUIRE(nothing.ok());
    CHECK(limit::is_decide_reply(nothing.reply, 0, false));
    // A malformed plan used late in a batch: the whole call is refused before anything runs.
    auto late = decide.raw_batch({{bucket("k", 1000, 5)}, {bucket("k", 1000, 5)}, {ScriptLimit{"k", "token_bucket", false, 1, -2, 1, {}}}});
    expect_error(late, "plan 2: parameters of limit 1 are not valid");
    CHECK(redis.integer({"EXISTS", "k"}) == 0);
    // A malformed plan is not remembered as parsed: the same text is refused again, and a
    // good plan after it works.
    expect_error(run({"k", "1", "token_bucket 0 1 1000 x", "1"}, 1), "plan 1: parameters of limit 1 are not valid");
    REQUIRE(run({"k", "1", "token_bucket 0 1 1000 5", "1"}, 1).ok());
    CHECK(redis.integer({"EXISTS", "k"}) == 1);
}

TEST_CASE("decide script: a batch of one plan decides alike with and without the requests' plan numbers",
          "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    const bool cluster = GENERATE(false, true);
    CAPTURE(library, cluster);
    Script decide{redis, cluster, library};
    const std::int64_t minute = 60'000'000;
    // Eight requests of one route (a bucket and a window), three clients, so keys repeat
    // within the call; the second batch finds the first one's state.
    auto requests = [&](const std::string& side) {
        std::vector<std::vector<ScriptLimit>> out;
        for (int i = 0; i < 8; ++i) {
            const std::string tag = "{" + side + std::to_string(i % 3) + "}";
            out.push_back({bucket(tag + ":tb", minute, 3), window(tag + ":sw", 2, minute)});
        }
        return out;
    };
    // The same requests with a plan number each, as the protocol also allows.
    auto numbered = [&](const std::vector<std::vector<ScriptLimit>>& batch) {
        std::vector<std::string> keys;
        for (const auto& limits : batch)
            for (const auto& l : limits) keys.push_back(l.key);
        std::vector<std::string> args = decide.call();
        if (cluster) args.push_back("0");
        args.push_back(std::to_string(keys.size()));
        args.insert(args.end(), keys.begin(), keys.end());
        args.insert(args.end(), {"1", "token_bucket 0 1 60000000 3;sliding_window 0 1 2 60000000"});
        for (std::size_t r = 0; r < batch.size(); ++r) args.push_back("1");
        auto result = redis.run(args);
        REQUIRE(result.ok());
        REQUIRE(limit::is_decide_reply(result.reply, keys.size(), cluster));
        std::vector<limit::LimitResult> out;
        for (std::size_t i = 0; i < keys.size(); ++i) out.push_back(limit::decide_result(result.reply, i));
        return out;
    };
    // What the builder sends for them (the first form).
    {
        limit::DecideArgs args;
        const std::vector<std::string> tb{"token_bucket", "0", "1", "60000000", "3"};
        const std::vector<std::string> sw{"sliding_window", "0", "1", "2", "60000000"};
        for (int i = 0; i < 8; ++i) {
            args.limit(tb);
            args.limit(sw);
            args.end_request();
        }
        CHECK(args.take() ==
              std::vector<std::string>{"1", "token_bucket 0 1 60000000 3;sliding_window 0 1 2 60000000"});
    }
    for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        const auto without = decide.batch(requests("a"));
        const auto with = numbered(requests("b"));
        REQUIRE(with.size() == 16);
        std::size_t admitted = 0;
        for (std::size_t r = 0; r < without.size(); ++r)
            for (std::size_t l = 0; l < 2; ++l) {
                CAPTURE(r, l);
                const auto& a = without[r].results[l];
                const auto& b = with[2 * r + l];
                CHECK(a.allowed == b.allowed);
                CHECK(a.remaining == b.remaining);
                if (round == 0) {  // (later, each side's times count from its own first call)
                    CHECK(a.retry_after == b.retry_after);
                    CHECK(a.reset == b.reset);
                }
                if (l == 0 && a.allowed && without[r].results[1].allowed) ++admitted;
            }
        // Each client: two admitted by its window in the first round, none in the second.
        CHECK(admitted == (round == 0 ? 6u : 0u));
    }
    for (int c = 0; c < 3; ++c) {
        const std::string a = "{a" + std::to_string(c) + "}:sw", b = "{b" + std::to_string(c) + "}:sw";
        CHECK(redis.integer({"ZCARD", a}) == 2);
        CHECK(redis.integer({"ZCARD", b}) == 2);
    }
}

TEST_CASE("decide script: requests with the same limits share a plan", "[lua]") {
    const std::vector<std::string> tb{"token_bucket", "0", "1", "1000", "5"};
    const std::vector<std::string> sw{"sliding_window", "1", "1", "10", "60000000"};
    const std::vector<std::string> tb_other{"token_bucket", "0", "1", "1000", "6"};
    limit::DecideArgs args;
    args.limit(tb);
    args.end_request();
    args.limit(tb);
    args.limit(sw);
    args.end_request();
    args.limit(tb);
    args.end_request();
    args.limit(tb_other);
    args.end_request();
    args.limit(sw);
    args.limit(tb);
    args.end_request();
    args.limit(tb);
    args.limit(sw);
    args.end_request();
    CHECK(args.requests() == 6);
    const std::vector<std::string> expected{
        "4",
        "token_bucket 0 1 1000 5",
        "token_bucket 0 1 1000 5;sliding_window 1 1 10 60000000",
        "token_bucket 0 1 1000 6",
        "sliding_window 1 1 10 60000000;token_bucket 0 1 1000 5",
        "1", "2", "1", "3", "4", "2"};
    CHECK(args.take() == expected);
    CHECK(args.requests() == 0);
    // One plan without owner tokens: the requests go without their numbers.
    args.limit(tb_other);
    args.end_request();
    args.limit(tb_other);
    args.end_request();
    CHECK(args.take() == std::vector<std::string>{"1", "token_bucket 0 1 1000 6"});
    // With an owner token they are numbered again.
    const std::vector<std::string> cc{"concurrency", "0", "1", "3", "30000000"};
    args.limit(cc);
    args.end_request("owner");
    args.limit(cc);
    args.end_request("owner-2");
    CHECK(args.take() == std::vector<std::string>{"1", "concurrency 0 1 3 30000000", "1", "owner", "1", "owner-2"});
    args.limit(tb_other);
    args.end_request();
    CHECK(args.take() == std::vector<std::string>{"1", "token_bucket 0 1 1000 6"});
}

TEST_CASE("decide script: a route's limits known by their ids share a plan without comparing texts", "[lua]") {
    // A route's argument lists come with their key plan's ids (RedisLimiter): the same ids are
    // the same plan at once. Lists without ids, or with other ids but the same texts, still
    // find the plan by their texts; ids never make two different texts one plan.
    const std::vector<std::string> tb{"token_bucket", "0", "1", "1000", "5"};
    const std::vector<std::string> sw{"sliding_window", "1", "1", "10", "60000000"};
    const std::vector<std::string> tb_copy = tb;
    const std::vector<std::string> tb_other{"token_bucket", "0", "1", "1000", "6"};
    limit::DecideArgs args;
    args.limit(tb, 7);
    args.end_request();  // plan 1
    args.limit(tb, 7);
    args.limit(sw, 8);
    args.end_request();  // plan 2
    args.limit(tb, 7);
    args.end_request();  // 1, by its id
    args.limit(tb_copy);
    args.end_request();  // 1, by its text
    args.limit(tb_copy, 9);
    args.end_request();  // 1, by its text (9 is new)
    args.limit(tb_other, 10);
    args.end_request();  // plan 3
    args.limit(tb, 7);
    args.limit(std::vector<std::string>(sw));
    args.end_request();  // 2, by its texts (one list is the request's own)
    args.limit(tb_other, 10);
    args.end_request();  // 3, by its id
    args.limit(std::vector<std::string>{"token_bucket", "0", "2", "1000", "5"});
    args.end_request();  // plan 4: a cost of its own
    const std::vector<std::string> expected{
        "4",
        "token_bucket 0 1 1000 5",
        "token_bucket 0 1 1000 5;sliding_window 1 1 10 60000000",
        "token_bucket 0 1 1000 6",
        "token_bucket 0 2 1000 5",
        "1", "2", "1", "1", "1", "3", "2", "3", "4"};
    CHECK(args.take() == expected);
    // After take() the next call numbers its plans afresh: the same ids start plan 1 again.
    args.limit(tb_other, 10);
    args.end_request();
    args.limit(tb, 7);
    args.end_request();
    CHECK(args.take() == std::vector<std::string>{"2", "token_bucket 0 1 1000 6", "token_bucket 0 1 1000 5", "1", "2"});
}

TEST_CASE("decide script: plans kept from batch to batch give the ARGV a fresh builder gives", "[lua]") {
    // Batch after batch of random requests: some limits known by ids (a route's, always the
    // same lists for an id), some lists of their own (a cost per request); some requests with
    // a token. Each batch's ARGV, as views and owned, is what the protocol says: each plan's
    // text once, numbered by first appearance, then each request's number (and token), but
    // for a batch of one plan and no tokens.
    std::mt19937 random(24);
    std::vector<std::vector<std::string>> by_id;  // id i's arguments
    for (int i = 0; i < 40; ++i)
        by_id.push_back({i % 2 ? "sliding_window" : "token_bucket", "0", "1", std::to_string(1000 + i % 7), "5"});
    limit::DecideArgs args;
    for (int batch = 0; batch < 300; ++batch) {
        // Early batches use few ids (kept plans are found), later ones many (the kept plans
        // pass their bound and are dropped).
        const int ids = batch < 100 ? 3 : 40;
        std::vector<std::string> texts;  // reference: each text once, in order
        std::vector<std::string> tail;
        const int requests = 1 + static_cast<int>(random() % 12);
        std::vector<std::vector<std::string>> own;  // lists of the batch's own, alive until sent
        own.reserve(64);
        for (int r = 0; r < requests; ++r) {
            std::string text;
            const int limits = 1 + static_cast<int>(random() % 2);
            for (int l = 0; l < limits; ++l) {
                const std::vector<std::string>* list = nullptr;
                if (random() % 4 == 0) {
                    own.push_back({"token_bucket", "0", std::to_string(1 + random() % 3), "1000", "5"});
                    list = &own.back();
                    args.limit(*list);
                } else {
                    const auto id = random() % ids;
                    list = &by_id[id];
                    args.limit(*list, 1000 + id);
                }
                if (!text.empty()) text += ';';
                for (std::size_t f = 0; f < list->size(); ++f) text += (f ? " " : "") + (*list)[f];
            }
            const bool token = random() % 5 == 0;
            if (token) args.end_request("t" + std::to_string(r));
            else args.end_request();
            auto at = std::find(texts.begin(), texts.end(), text);
            if (at == texts.end()) at = texts.insert(texts.end(), text);
            tail.push_back(std::to_string(at - texts.begin() + 1));
            if (token) tail.push_back("t" + std::to_string(r));
        }
        std::vector<std::string> expected{std::to_string(texts.size())};
        expected.insert(expected.end(), texts.begin(), texts.end());
        // (one plan and no token: no numbers)
        if (texts.size() > 1 || tail.size() > static_cast<std::size_t>(requests))
            expected.insert(expected.end(), tail.begin(), tail.end());
        INFO("batch " << batch);
        if (batch % 2 == 0) {
            const auto& views = args.argv();
            REQUIRE(std::vector<std::string>(views.begin(), views.end()) == expected);
            args.clear();
        } else {
            REQUIRE(args.take() == expected);
        }
        CHECK(args.requests() == 0);
    }
}

namespace {

// A decide reply as the script writes it: one string of little-endian 64-bit integers.
redis::RedisReply packed_reply(const std::vector<std::int64_t>& values) {
    redis::RedisReply r;
    r.type = redis::RedisReply::Type::string;
    for (auto v : values) {
        auto bits = static_cast<std::uint64_t>(v);
        for (int b = 0; b < 8; ++b, bits >>= 8) r.text.push_back(static_cast<char>(bits & 0xff));
    }
    return r;
}

}  // namespace

TEST_CASE("decide script: reading the reply", "[lua]") {
    using redis::RedisReply;
    const auto ok = packed_reply({1700000000000001, 1, 4, 0, 250, 0, 0, 1200, 60000});
    REQUIRE(limit::is_decide_reply(ok, 2));
    CHECK(limit::decide_time(ok) == 1700000000000001);
    auto second = limit::decide_result(ok, 1);
    CHECK_FALSE(second.allowed);
    CHECK(second.remaining == 0);
    CHECK(second.retry_after == 1200ms);
    CHECK(second.reset == 60000ms);
    CHECK(limit::decide_result(ok, 0).remaining == 4);
    // Values past 32 bits are read whole.
    const auto big = packed_reply({(std::int64_t{1} << 53) - 1, 1, std::int64_t{1} << 40, 7, std::int64_t{3} << 33});
    REQUIRE(limit::is_decide_reply(big, 1));
    CHECK(limit::decide_time(big) == (std::int64_t{1} << 53) - 1);
    CHECK(limit::decide_result(big, 0).remaining == std::uint64_t{1} << 40);
    CHECK(limit::decide_result(big, 0).reset == std::chrono::milliseconds(std::int64_t{3} << 33));
    // Times past a century are read as a century: no overflow in nanoseconds.
    constexpr std::int64_t year_ms = limit::max_reply_ms;
    const auto huge = packed_reply({1, 1, 4, std::int64_t{1} << 62, std::int64_t{1} << 62, 0, 0,
                                    std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max()});
    REQUIRE(limit::is_decide_reply(huge, 2));
    CHECK(limit::decide_result(huge, 0).wait == std::chrono::microseconds(year_ms * 1000));
    CHECK(limit::decide_result(huge, 0).reset == std::chrono::milliseconds(year_ms));
    CHECK(limit::decide_result(huge, 1).retry_after == std::chrono::milliseconds(year_ms));
    CHECK(limit::decide_result(huge, 1).reset == std::chrono::milliseconds(year_ms));

    for (const auto& bad : std::vector<std::vector<std::int64_t>>{{}, {1}, {1, 1, 4, 0}, {1, 1, -4, 0, 250}, {1, 1, 4, 0, 250, 7}, {-1, 1, 4, 0, 250}}) {
        INFO("reply of " << bad.size() << " integers");
        CHECK_FALSE(limit::is_decide_reply(packed_reply(bad), 1));
    }
    // A string that is not a whole number of integers, or one byte short.
    auto odd = packed_reply({1, 1, 4, 0, 250});
    odd.text.push_back('\0');
    CHECK_FALSE(limit::is_decide_reply(odd, 1));
    odd.text.resize(39);
    CHECK_FALSE(limit::is_decide_reply(odd, 1));
    // The shape of the reply before this form (an array of integers) is not taken.
    RedisReply array;
    array.type = RedisReply::Type::array;
    for (std::int64_t v : {1, 1, 4, 0, 250}) {
        RedisReply e;
        e.type = RedisReply::Type::integer;
        e.integer = v;
        array.elements.push_back(e);
    }
    CHECK_FALSE(limit::is_decide_reply(array, 1));
    auto status = packed_reply({1, 1, 4, 0, 250});
    status.type = RedisReply::Type::status;
    CHECK_FALSE(limit::is_decide_reply(status, 1));
}

TEST_CASE("decide script, cluster variant: keys in ARGV decide exactly as keys in KEYS", "[lua][redis][cluster]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);
    CAPTURE(library);
    Script plain{redis, false, library};
    Script cluster{redis, true, library};
    REQUIRE(plain.name != cluster.name);
    // The same requests on two sets of keys, one through each variant, batch by batch.
    for (int round = 0; round < 4; ++round) {
        std::vector<std::vector<ScriptLimit>> a, b;
        for (int r = 0; r < 6; ++r) {
            const std::string client = std::to_string(r % 3);
            a.push_back({bucket("{p" + client + "}:b", 3'600'000'000, 5), window("{p" + client + "}:w", 7, 3'600'000'000)});
            b.push_back({bucket("{c" + client + "}:b", 3'600'000'000, 5), window("{c" + client + "}:w", 7, 3'600'000'000)});
        }
        const auto x = plain.batch(a);
        const auto y = cluster.batch(b);
        REQUIRE(x.size() == y.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
            for (std::size_t l = 0; l < 2; ++l) {
                CAPTURE(round, i, l);
                CHECK(x[i].results[l].allowed == y[i].results[l].allowed);
                CHECK(x[i].results[l].remaining == y[i].results[l].remaining);
            }
        }
    }
    // Without cluster mode every key is local: nothing is "elsewhere".
    const auto local = cluster.raw_batch({{bucket("{e}:b", 1000, 1)}, {window("{f}:w", 1, 1000)}});
    REQUIRE(local.ok());
    REQUIRE(limit::is_decide_reply(local.reply, 2, true));
    CHECK_FALSE(limit::decide_elsewhere(local.reply, 0));
    CHECK_FALSE(limit::decide_elsewhere(local.reply, 1));
    // A request sent on its own keeps its keys in KEYS (Redis checks their slot).
    auto single_call = cluster.call();
    single_call.insert(single_call.end(), {"1", "{s}:b", "1", "token_bucket 0 1 1000000 2", "1"});
    const auto single = redis.run(single_call);
    REQUIRE(single.ok());
    REQUIRE(limit::is_decide_reply(single.reply, 1, true));
    CHECK(limit::decide_result(single.reply, 0).remaining == 1);
    // Malformed key counts are refused before anything runs.
    for (const std::string bad : {"x", "-1", "1.5", "12"}) {
        auto bad_call = cluster.call();
        bad_call.insert(bad_call.end(), {"0", bad, "{s}:b", "1", "token_bucket 0 1 1000000 2", "1"});
        const auto r = redis.run(bad_call);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error->message.find("argument 1 is not a number of keys") != std::string::npos);
    }
}

TEST_CASE("decide replies: 2 (elsewhere) is only read from the cluster variant; 3 is banned", "[lua][cluster]") {
    auto reply = packed_reply({1'000'000, 2, 0, 0, 0});
    CHECK_FALSE(limit::is_decide_reply(reply, 1));
    REQUIRE(limit::is_decide_reply(reply, 1, true));
    CHECK(limit::decide_elsewhere(reply, 0));
    reply = packed_reply({1'000'000, 4, 0, 0, 0});
    CHECK_FALSE(limit::is_decide_reply(reply, 1, true));
    reply = packed_reply({1'000'000, 3, 0, 0, 0});
    REQUIRE(limit::is_decide_reply(reply, 1));
    REQUIRE(limit::is_decide_reply(reply, 1, true));
    CHECK_FALSE(limit::decide_elsewhere(reply, 0));
    const auto banned = limit::decide_result(reply, 0);
    CHECK(banned.banned);
    CHECK_FALSE(banned.allowed);
}

TEST_CASE("decide script: fixed windows aligned to the epoch", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t every = 400'000;  // 400 ms
    // Start just after a window edge, so the three requests below share a window.
    while (redis_time_us(redis) % every > 100'000) std::this_thread::sleep_for(10ms);
    std::int64_t start = 0;
    for (int i = 0; i < 3; ++i) {
        auto r = decide({fixed("fw", 3, every)});
        if (i == 0) start = r.now_us - r.now_us % every;
        INFO("request " << i);
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == static_cast<std::uint64_t>(2 - i));
        CHECK(r.results[0].reset.count() == ceil_ms(start + every - r.now_us));  // the window's end
    }
    // The state: the window's start and its count; the key ends with the window.
    CHECK(redis.text({"GET", "fw"}) == std::to_string(start) + ":3");
    CHECK(redis.integer({"PEXPIRETIME", "fw"}) == (start + every + 999) / 1000);
    auto r = decide({fixed("fw", 3, every)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 0);
    CHECK(r.results[0].retry_after.count() == ceil_ms(start + every - r.now_us));
    CHECK(redis.text({"GET", "fw"}) == std::to_string(start) + ":3");  // a refusal writes nothing
    // The next window starts from nothing, whatever the old key still says.
    while (redis_time_us(redis) < start + every) std::this_thread::sleep_for(5ms);
    r = decide({fixed("fw", 3, every, 2)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 1);
    // A key of another type (the limit's algorithm changed) reads as an empty window.
    redis.must({"ZADD", "other", "1", "a"});
    CHECK(decide({fixed("other", 1, every)}).results[0].allowed);
}

TEST_CASE("decide script: calendar windows are picked by Redis TIME among the boundaries sent", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t now = redis_time_us(redis);
    const std::int64_t b1 = now - 500'000, b2 = now + 700'000;
    const std::vector<std::int64_t> bounds{b1 - 86'400'000'000, b1, b2, b2 + 3'600'000'000};
    auto r = decide({calendar("cal", 2, bounds)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].reset.count() == ceil_ms(b2 - r.now_us));
    CHECK(decide({calendar("cal", 2, bounds)}).results[0].allowed);
    r = decide({calendar("cal", 2, bounds)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].retry_after.count() == ceil_ms(b2 - r.now_us));
    CHECK(redis.text({"GET", "cal"}) == std::to_string(b1) + ":2");
    // Once TIME passes b2 the next window (b2..b3, an hour) counts from nothing.
    while (redis_time_us(redis) < b2) std::this_thread::sleep_for(20ms);
    r = decide({calendar("cal", 2, bounds)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 1);
    CHECK(r.results[0].reset.count() == ceil_ms(b2 + 3'600'000'000 - r.now_us));

    // Boundaries that do not hold TIME (clocks a window apart): an error, and nothing written,
    // even for the batch's other requests.
    const std::int64_t later = redis_time_us(redis) + 60'000'000;
    const auto skewed = decide.raw_batch({{bucket("tb", 1000, 5)}, {calendar("cal2", 2, {later, later + 1, later + 2, later + 3})}});
    REQUIRE_FALSE(skewed.ok());
    CHECK_THAT(skewed.error->message, Catch::Contains("is outside the calendar windows"));
    CHECK(redis.integer({"EXISTS", "tb"}) == 0);
    CHECK(redis.integer({"EXISTS", "cal2"}) == 0);
    // Malformed boundaries are refused before anything runs.
    for (const std::string bad : {"1,2,3", "4,3,2,1", "1,1,2,3", "a,b,c,d", "1,2,3,4,5", "0", "-5", "1.5"}) {
        INFO(bad);
        ScriptLimit l = calendar("cal3", 2, {});
        l.calendar = bad;
        if (bad == "0" || bad == "-5" || bad == "1.5") {
            l.calendar.clear();
            l.b = std::stoll(bad == "1.5" ? "0" : bad);
        }
        const auto refused = decide.raw({l});
        REQUIRE_FALSE(refused.ok());
        CHECK_THAT(refused.error->message, Catch::Contains("are not valid"));
    }
}

TEST_CASE("decide script: a request's cost, in every algorithm", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    auto costing = [](ScriptLimit l, std::int64_t cost) {
        l.cost = cost;
        return l;
    };
    // Token bucket of 5 at 1 token per second: 3, then 3 more does not fit and takes nothing.
    auto r = decide({costing(bucket("tb", 1'000'000, 5), 3)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 2);
    const std::int64_t first = r.now_us;
    r = decide({costing(bucket("tb", 1'000'000, 5), 3)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 2);
    CHECK(r.results[0].retry_after.count() == ceil_ms(first + 1'000'000 - r.now_us));  // one more token
    // Cost 0 always fits and takes nothing (a single limit takes the shared path then).
    r = decide({costing(bucket("tb", 1'000'000, 5), 0)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 2);
    CHECK(redis.text({"GET", "tb"}) == std::to_string(first + 3'000'000));
    // Sliding window of 5: 4 units, then 2 waits until the 4 leave (they share one instant).
    r = decide({costing(window("sw", 5, 10'000'000), 4)});
    CHECK(r.results[0].remaining == 1);
    const std::int64_t admitted = r.now_us;
    CHECK(redis.integer({"ZCARD", "sw"}) == 4);
    r = decide({costing(window("sw", 5, 10'000'000), 2)});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].remaining == 1);
    CHECK(r.results[0].retry_after.count() == ceil_ms(admitted + 10'000'000 - r.now_us));
    CHECK(decide({costing(window("sw", 5, 10'000'000), 1)}).results[0].remaining == 0);
    CHECK(redis.integer({"ZCARD", "sw"}) == 5);
    // Two limits: all or nothing with costs too.
    r = decide({costing(bucket("a", 1'000'000, 10), 6), costing(fixed("b", 5, 60'000'000), 6)});
    CHECK(r.results[0].allowed);
    CHECK_FALSE(r.results[1].allowed);
    CHECK(redis.integer({"EXISTS", "a"}) == 0);
    CHECK(redis.integer({"EXISTS", "b"}) == 0);
    r = decide({costing(bucket("a", 1'000'000, 10), 5), costing(fixed("b", 5, 60'000'000), 5)});
    CHECK(r.results[0].allowed);
    CHECK(r.results[1].allowed);
    CHECK(r.results[0].remaining == 5);
    CHECK(r.results[1].remaining == 0);
}

TEST_CASE("decide script: concurrency slots are taken, given back by their owner, renewed and reclaimed", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const bool library = GENERATE(true, false);  // FCALL, EVALSHA
    CAPTURE(library);
    Script decide{redis, false, library};
    const std::string release_sha = redis.text({"SCRIPT", "LOAD", limit::release_script_source()});
    auto release = [&](const std::string& op, const std::string& token, std::vector<std::string> keys,
                        std::int64_t lease_us) {
        std::vector<std::string> args{"EVALSHA", release_sha, std::to_string(keys.size())};
        args.insert(args.end(), keys.begin(), keys.end());
        args.push_back(op);
        args.push_back(token);
        for (std::size_t i = 0; i < keys.size(); ++i) args.push_back(std::to_string(lease_us));
        return redis.run(args);
    };
    const std::int64_t lease = 2'000'000;
    auto r = decide({slots("c", 2, lease, "a")});
    CHECK(r.results[0].allowed);
    CHECK(r.results[0].remaining == 1);
    CHECK(r.results[0].reset.count() == lease / 1000);  // the newest lease ends last
    const std::int64_t first = r.now_us;
    CHECK(decide({slots("c", 2, lease, "b")}).results[0].remaining == 0);
    r = decide({slots("c", 2, lease, "x")});
    CHECK_FALSE(r.results[0].allowed);
    CHECK(r.results[0].retry_after == 1000ms);  // a slot may come back any time: a second at most
    CHECK(redis.integer({"ZCARD", "c"}) == 2);
    CHECK(redis.integer({"EXISTS", "c"}) == 1);
    CHECK(redis.integer({"PTTL", "c"}) > 0);
    // Only the owner's slot goes; a stranger's token releases nothing.
    auto released = release("release", "stranger", {"c"}, lease);
    REQUIRE(released.ok());
    CHECK(released.reply.integer == 0);
    released = release("release", "a", {"c"}, lease);
    REQUIRE(released.ok());
    CHECK(released.reply.integer == 1);
    CHECK(decide({slots("c", 2, lease, "d")}).results[0].allowed);
    // Renewing moves the lease end to TIME + lease, and only for a slot that is still ours.
    const auto renewed = release("renew", "b", {"c"}, 5'000'000);
    REQUIRE(renewed.ok());
    CHECK(renewed.reply.integer == 1);
    const auto score = std::stoll(redis.text({"ZSCORE", "c", "b"}));
    CHECK(score > first + lease);
    CHECK(redis.integer({"PEXPIRETIME", "c"}) == (score + 999) / 1000);
    // A slot whose instance died comes back when its lease ends.
    auto short_lease = decide({slots("s", 1, 300'000, "gone")});
    CHECK(short_lease.results[0].allowed);
    CHECK_FALSE(decide({slots("s", 1, 300'000, "next")}).results[0].allowed);
    while (redis_time_us(redis) < short_lease.now_us + 300'000) std::this_thread::sleep_for(20ms);
    CHECK(release("renew", "gone", {"s"}, 300'000).reply.integer == 0);  // too late: no longer ours
    r = decide({slots("s", 1, 300'000, "next")});
    CHECK(r.results[0].allowed);
    CHECK(redis.integer({"ZCARD", "s"}) == 1);  // the ended slot was trimmed
    // With another limit that refuses, no slot is taken.
    r = decide({slots("c2", 5, lease, "y"), fixed("f", 1, 60'000'000, 1)});
    CHECK(r.results[1].allowed);
    r = decide({slots("c2", 5, lease, "z"), fixed("f", 1, 60'000'000, 1)});
    CHECK(r.results[0].allowed);
    CHECK_FALSE(r.results[1].allowed);
    CHECK(redis.must({"ZSCORE", "c2", "z"}).type == redis::RedisReply::Type::nil);
    CHECK(redis.integer({"ZCARD", "c2"}) == 1);
    // Malformed: a plan with a concurrency limit needs a token; release needs its arguments.
    std::vector<std::string> bad = decide.call();
    bad.insert(bad.end(), {"1", "k", "1", "concurrency 0 1 2 1000000", "1"});
    const auto no_token = redis.run(bad);
    REQUIRE_FALSE(no_token.ok());
    CHECK_THAT(no_token.error->message, Catch::Contains("is not an owner token"));
    const auto odd = redis.run({"EVALSHA", release_sha, "1", "c", "steal", "a", "1"});
    REQUIRE_FALSE(odd.ok());
    CHECK_THAT(odd.error->message, Catch::Contains("expected release|renew"));
}

TEST_CASE("release script: several requests' slots given back in one call, each by its own token", "[lua][redis]") {
    RedisServer server;
    SyncRedis redis(server.port());
    const std::string sha = redis.text({"SCRIPT", "LOAD", limit::release_script_source()});
    auto releases = [&](std::vector<std::string> keys, std::vector<std::string> args) {
        std::vector<std::string> command{"EVALSHA", sha, std::to_string(keys.size())};
        command.insert(command.end(), keys.begin(), keys.end());
        command.push_back("releases");
        command.insert(command.end(), args.begin(), args.end());
        return redis.run(command);
    };
    redis.must({"ZADD", "k1", "9999999999999999", "a", "9999999999999999", "b", "9999999999999999", "c"});
    redis.must({"ZADD", "k2", "9999999999999999", "a", "9999999999999999", "other"});
    redis.must({"SET", "text", "x"});

    SECTION("released: only the tokens' own members, a key of another type skipped") {
        // a: k1 and k2; b: k1 and a string; stranger: k2 (holds no slot there).
        const auto r = releases({"k1", "k2", "k1", "text", "k2"}, {"a", "2", "b", "2", "stranger", "1"});
        REQUIRE(r.ok());
        CHECK(r.reply.integer == 3);
        const auto k1 = redis.must({"ZRANGE", "k1", "0", "-1"});
        REQUIRE(k1.elements.size() == 1);
        CHECK(k1.elements[0].text == "c");
        const auto k2 = redis.must({"ZRANGE", "k2", "0", "-1"});
        REQUIRE(k2.elements.size() == 1);
        CHECK(k2.elements[0].text == "other");
        CHECK(redis.text({"GET", "text"}) == "x");
    }
    SECTION("the cluster form: the keys in ARGV, of any hash slot") {
        const std::string cluster_sha = redis.text({"SCRIPT", "LOAD", limit::release_script_source(true)});
        const auto r = redis.run({"EVALSHA", cluster_sha, "0", "releases", "3", "k1", "k2", "k1", "a", "2", "b", "1"});
        REQUIRE(r.ok());
        CHECK(r.reply.integer == 3);
        CHECK(redis.integer({"ZCARD", "k1"}) == 1);
        CHECK(redis.integer({"ZCARD", "k2"}) == 1);
        for (const std::vector<std::string> bad : {std::vector<std::string>{"releases", "x", "k1", "a", "1"},
                                                   {"releases", "0", "a", "1"},
                                                   {"releases", "2", "k1"},
                                                   {"releases", "1", "k1", "a"},
                                                   {"releases", "1", "k1", "a", "2"},
                                                   {"releases", "1.5", "k1", "a", "1"}}) {
            std::vector<std::string> command{"EVALSHA", cluster_sha, "0"};
            command.insert(command.end(), bad.begin(), bad.end());
            const auto refused = redis.run(command);
            REQUIRE_FALSE(refused.ok());
            CHECK_THAT(refused.error->message, Catch::StartsWith("ERR release:"));
        }
        CHECK(redis.integer({"ZCARD", "k1"}) == 1);
        // Its renewals and single releases keep their KEYS form.
        const auto one = redis.run({"EVALSHA", cluster_sha, "1", "k1", "release", "c", "1000000"});
        REQUIRE(one.ok());
        CHECK(one.reply.integer == 1);
    }
    SECTION("malformed: refused, nothing released") {
        const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> bad{
            {{"k1"}, {}},                                  // no request
            {{"k1"}, {"a"}},                               // a token without its count
            {{"k1", "k2"}, {"a", "1"}},                    // keys left over
            {{"k1"}, {"a", "2"}},                          // more keys named than sent
            {{"k1"}, {"a", "0", "b", "1"}},                // no keys
            {{"k1"}, {"", "1"}},                           // no token
            {{"k1", "k2"}, {"a", "1.5", "b", "0.5"}},      // not whole
            {{"k1"}, {"a", "nan"}},
            {{"k1"}, {"a", "inf"}},
            {{"k1", "k2"}, {"a", "1", "b", "1", "c"}},    // a token without its count at the end
        };
        for (const auto& [keys, args] : bad) {
            INFO(args.size());
            const auto r = releases(keys, args);
            REQUIRE_FALSE(r.ok());
            CHECK_THAT(r.error->message, Catch::StartsWith("ERR release:"));
        }
        CHECK(redis.integer({"ZCARD", "k1"}) == 3);
        CHECK(redis.integer({"ZCARD", "k2"}) == 2);
    }
}

TEST_CASE("decide script: it knows every algorithm by the name the configuration gives it") {
    // config::algorithm_names is the one table of names; decide.lua builds an algorithm when a
    // plan names it (its `makers` table), so each name must be a key there.
    for (const bool cluster : {false, true}) {
        const auto code = limit::decide_code(cluster);
        for (const auto name : config::algorithm_names) {
            INFO(name);
            CHECK(code.script.find("  " + std::string(name) + " = ") != std::string::npos);
        }
    }
}

TEST_CASE("decide script: a bucket of a route with plans keeps what was used under another interval",
          "[lua][redis][plans]") {
    RedisServer server;
    SyncRedis redis(server.port());
    Script decide{redis};
    const std::int64_t second = 1'000'000, tenth = 100'000;
    // Four requests at once from a bucket of 10 refilled a token a second: 4 s used.
    auto use_four = [&](const ScriptLimit& limit) {
        const auto replies = decide.batch(std::vector<std::vector<ScriptLimit>>(4, {limit}));
        REQUIRE(replies.back().results[0].allowed);
        REQUIRE(replies.back().results[0].remaining == 6);
        return replies.back().now_us + 4 * second;  // the tat
    };

    SECTION("its value is the tat, then the interval; a reader that takes one number reads the tat") {
        const std::int64_t tat = use_four(kept_bucket("k", second, 10));
        CHECK(redis.text({"GET", "k"}) == std::to_string(tat) + ".0" + std::to_string(second));
        CHECK(redis.integer({"PEXPIRETIME", "k"}) == ceil_ms(tat));
        // As the script before this one read it (tonumber), during a rolling upgrade.
        CHECK(redis.text({"EVAL",
                          "local v = tonumber(redis.call('GET', KEYS[1])) "
                          "if v % 1 ~= 0 then return 'not whole' end return string.format('%d', v)",
                          "1", "k"}) == std::to_string(tat));
    }
    SECTION("moved to a bigger plan: what was used is counted in the new interval") {
        use_four(kept_bucket("k", second, 10));
        // 4 s of one-a-second tokens are 0.4 s of ten-a-second ones: 96 of 100 left, then 95.
        // (Read as the time until full, 4 s would be 40 tokens used: 59 left.)
        const auto r = decide({kept_bucket("k", tenth, 100)});
        CHECK(r.results[0].allowed);
        CHECK(r.results[0].remaining == 95);
        const std::string value = redis.text({"GET", "k"});
        CHECK(value.substr(value.size() - 8) == ".0100000");
        CHECK(decide({kept_bucket("k", tenth, 100)}).results[0].remaining == 94);
    }
    SECTION("moved to a smaller plan: a bucket is never more than empty") {
        const auto sixty = decide.batch(std::vector<std::vector<ScriptLimit>>(60, {kept_bucket("k", tenth, 100)}));
        REQUIRE(sixty.back().results[0].remaining == 40);
        // 6 s of ten-a-second tokens are 60 one-a-second ones, of a bucket of 10: empty,
        // refilling from now (not 60 s). The refused request takes nothing, but the bucket is
        // written as it was read (empty now, in the new interval): left as it was, every read
        // would find it empty again, and it would refill only when the old tat had passed.
        const auto r = decide({kept_bucket("k", second, 10)});
        CHECK_FALSE(r.results[0].allowed);
        CHECK(r.results[0].remaining == 0);
        CHECK(r.results[0].retry_after.count() == 1000);
        CHECK(r.results[0].reset.count() == 10'000);
        const std::int64_t empty = r.now_us + 10 * second;
        CHECK(redis.text({"GET", "k"}) == std::to_string(empty) + ".0" + std::to_string(second));
        CHECK(redis.integer({"PEXPIRETIME", "k"}) == ceil_ms(empty));
    }
    SECTION("a bucket read beyond empty (a smaller or faster one since) is written as read, though refused") {
        use_four(bucket("plain", second, 10));  // full again in 4 s
        // Now 2 tokens of a tenth of a second: 0.2 s until full at most. Refused (it is
        // empty), and from then it refills at the new rate: its tat is 0.2 s from now, not 4 s.
        const auto r = decide({bucket("plain", tenth, 2)});
        CHECK_FALSE(r.results[0].allowed);
        CHECK(r.results[0].remaining == 0);
        CHECK(r.results[0].reset.count() == 200);
        CHECK(redis.text({"GET", "plain"}) == std::to_string(r.now_us + 2 * tenth));
        CHECK(redis.integer({"PEXPIRETIME", "plain"}) == ceil_ms(r.now_us + 2 * tenth));
        // The same as one of several limits of a request (the check, not the lone limit's way).
        use_four(bucket("one", second, 10));
        use_four(bucket("two", second, 10));
        const auto both = decide({bucket("one", tenth, 2), bucket("two", second, 10)});
        CHECK_FALSE(both.results[0].allowed);
        CHECK(redis.text({"GET", "one"}) == std::to_string(both.now_us + 2 * tenth));
        // A request of cost 0 (a free route, an inspection) writes nothing.
        use_four(bucket("free", second, 10));
        const std::string before = redis.text({"GET", "free"});
        CHECK(decide({flagged(bucket("free", tenth, 2), "0", 0)}).results[0].allowed);
        CHECK(redis.text({"GET", "free"}) == before);
    }
    SECTION("a bucket of a route without plans keeps the time until it is full, also when it reads a kept value") {
        use_four(bucket("plain", second, 10));
        CHECK(redis.text({"GET", "plain"}).find('.') == std::string::npos);
        // The rate changed on reload: 4 s until full are 40 tenths of a second.
        CHECK(decide({bucket("plain", tenth, 100)}).results[0].remaining == 59);
        // A plain value read by a kept limit (plans added on reload): the same.
        use_four(bucket("then_kept", second, 10));
        CHECK(decide({kept_bucket("then_kept", tenth, 100)}).results[0].remaining == 59);
        // A kept value says its interval, whoever reads it (plans taken away on reload).
        use_four(kept_bucket("then_plain", second, 10));
        CHECK(decide({bucket("then_plain", tenth, 100)}).results[0].remaining == 95);
        CHECK(redis.text({"GET", "then_plain"}).find('.') == std::string::npos);
    }
    SECTION("a value that is not a tat sluice wrote reads as a full bucket and is replaced") {
        for (const std::string value : {"nan", "inf", "-inf", "1e400", "-5", "1795738700922926.0nan",
                                        "1795738700922926.0inf", "1795738700922926.00", "1795738700922926.5",
                                        "nan.01000000", "1e300.01000000", "99999999999999999999"}) {
            INFO(value);
            redis.must({"SET", "odd", value});
            const auto r = decide({kept_bucket("odd", second, 10)});
            CHECK(r.results[0].allowed);
            CHECK(r.results[0].remaining == 9);
            CHECK(r.results[0].reset.count() == 1000);
            CHECK(redis.text({"GET", "odd"}) == std::to_string(r.now_us + second) + ".0" + std::to_string(second));
            redis.must({"SET", "odd_plain", value});
            CHECK(decide({bucket("odd_plain", second, 10)}).results[0].remaining == 9);
        }
    }
    SECTION("with another limit (check, commit), and a leaky bucket") {
        auto leaky = [](std::string key, std::int64_t interval, bool kept) {
            return ScriptLimit{std::move(key), "leaky_bucket", false, interval, 0, 1,
                               "10,0,60000000" + std::string(kept ? ",kept" : "")};
        };
        decide.batch(std::vector<std::vector<ScriptLimit>>(4, {kept_bucket("tb", second, 10), leaky("lb", second, true)}));
        const auto r = decide({kept_bucket("tb", tenth, 100), leaky("lb", tenth, true)});
        CHECK(r.results[0].remaining == 95);
        // The leaky bucket's queue: 4 requests of a second each, 0.4 s at a tenth: the fifth
        // waits 0.4 s less what passed since, not 4 s.
        CHECK(r.results[1].allowed);
        CHECK(r.results[1].wait.count() <= 400'000);
        CHECK(r.results[1].wait.count() > 300'000);
    }
}
