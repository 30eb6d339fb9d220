// The limiter's answer to the request's fate: one table row per outcome.
#include <catch2/catch.hpp>

#include "http/limit_verdict.hpp"
#include "../support/limit_configs.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using observe::AccessDecision;

namespace {

limit::LimitResult result(bool allowed, std::uint64_t remaining, std::chrono::milliseconds retry = 0ms,
                          bool shadow = false, std::chrono::microseconds wait = 0us) {
    limit::LimitResult r;
    r.applies = true;
    r.allowed = allowed;
    r.remaining = remaining;
    r.reset = 2000ms;
    r.retry_after = retry;
    r.shadow = shadow;
    r.wait = wait;
    return r;
}

std::string header(const limit::HeaderList& h, std::string_view name) {
    std::string found = "<none>";
    int count = 0;
    for (const auto& [n, v] : h)
        if (n == name) {
            found = v;
            ++count;
        }
    REQUIRE(count <= 1);  // names are unique
    return found;
}

struct Row {
    const char* what;
    // The setting
    config::OnError store_on_error = config::OnError::allow;
    std::optional<config::OnError> route_on_error;
    std::optional<unsigned> route_status;
    config::HeaderStyle style = config::HeaderStyle::ietf;
    // The limiter's answer: per limit of the route (burst, minute, audit, drip), or a store error.
    bool store_error = false;
    std::vector<limit::LimitResult> results;
    // The verdict
    AccessDecision decision;
    unsigned refused_with = 0;  // 0: admitted
    std::string retry_after = "<none>";
    std::string rate_limit = "<none>";  // the ietf RateLimit header, on the refusal or the admitted response
    std::string limit;                  // the access line's limit
    std::optional<std::uint64_t> remaining;
    std::chrono::microseconds wait{0};
};

}  // namespace

TEST_CASE("the verdict for each answer of the limiter") {
    config::Config cfg;
    config::RouteConfig route;
    route.name = "login";
    route.limits = {test::token_bucket("burst", 5, 1s, 10), test::sliding_window("minute", 30, 60s),
                    test::sliding_window("audit", 1, 60s, {test::client_ip()}, true),
                    test::leaky_bucket("drip", 10, 1s, 5)};
    const auto ok = result(true, 7);
    const std::vector<Row> rows{
        {"every limit admits", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(true, 20), result(true, 0, 0ms, true), ok},
         AccessDecision::allowed, 0, "<none>", "\"burst\";r=3;t=2", "burst", 3},
        {"the minute refuses", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(false, 0, 2500ms), result(true, 0, 0ms, true), ok},
         AccessDecision::limited, 429, "3", "\"minute\";r=0;t=3", "minute", 0},
        {"the route's own status", {}, {}, 503, config::HeaderStyle::ietf, false,
         {result(false, 0, 400ms), result(true, 9), result(true, 0, 0ms, true), ok},
         AccessDecision::limited, 503, "1", "\"burst\";r=0;t=1", "burst", 0},
        {"no rate-limit headers, but Retry-After", {}, {}, {}, config::HeaderStyle::none, false,
         {result(false, 0, 61000ms), result(true, 9), result(true, 0, 0ms, true), ok},
         AccessDecision::limited, 429, "61", "<none>", "burst", 0},
        {"only a shadow limit refuses", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(true, 20), result(false, 0, 9000ms, true), ok},
         AccessDecision::shadow_limited, 0, "<none>", "\"burst\";r=3;t=2", "audit", 0},
        {"the leaky bucket holds it back", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(true, 20), result(true, 0, 0ms, true), result(true, 4, 0ms, false, 1500us)},
         AccessDecision::delayed, 0, "<none>", "\"burst\";r=3;t=2", "burst", 3, 1500us},
        {"a shadow limit's wait holds nothing back", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(true, 20), result(true, 0, 0ms, true, 9000us), ok},
         AccessDecision::allowed, 0, "<none>", "\"burst\";r=3;t=2", "burst", 3},
        // A store's answer is held to what the limits can ask: only a leaky bucket makes a
        // request wait, for its max_wait at most (burst x interval here: 500 ms).
        {"a token bucket's wait holds nothing back", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3, 0ms, false, 5'000'000us), result(true, 20, 0ms, false, 7'000'000us),
          result(true, 0, 0ms, true), ok},
         AccessDecision::allowed, 0, "<none>", "\"burst\";r=3;t=2", "burst", 3},
        {"a leaky bucket's wait is held to its max_wait", {}, {}, {}, config::HeaderStyle::ietf, false,
         {result(true, 3), result(true, 20), result(true, 0, 0ms, true),
          result(true, 4, 0ms, false, std::chrono::hours(1))},
         AccessDecision::delayed, 0, "<none>", "\"burst\";r=3;t=2", "burst", 3, 500'000us},
        {"store down, allow", config::OnError::allow, {}, {}, config::HeaderStyle::ietf, true, {},
         AccessDecision::store_error_allowed, 0, "<none>", "<none>", "", std::nullopt},
        {"store down, deny", config::OnError::deny, {}, {}, config::HeaderStyle::ietf, true, {},
         AccessDecision::store_error_denied, 503, "1", "<none>", "", std::nullopt},
        {"store down, the route allows what the store denies", config::OnError::deny, config::OnError::allow, {},
         config::HeaderStyle::ietf, true, {}, AccessDecision::store_error_allowed, 0, "<none>", "<none>", "",
         std::nullopt},
        {"store down, the route denies; its limited status is for limits only", config::OnError::allow,
         config::OnError::deny, 418, config::HeaderStyle::ietf, true, {}, AccessDecision::store_error_denied, 503,
         "1", "<none>", "", std::nullopt},
    };
    for (const auto& row : rows) {
        SECTION(row.what) {
            cfg.store.on_error = row.store_on_error;
            cfg.responses.headers = row.style;
            route.on_error = row.route_on_error;
            route.limited_status = row.route_status;
            const auto decision = row.store_error ? limit::Decision::store_failure("down")
                                                  : limit::Decision::from_results(row.results, 1);
            const auto verdict = http::limit_verdict(cfg, route, decision);
            CHECK(verdict.decision == row.decision);
            CHECK(verdict.limit == row.limit);
            CHECK(verdict.remaining == row.remaining);
            CHECK(verdict.wait == row.wait);
            if (row.refused_with == 0) {
                REQUIRE_FALSE(verdict.refusal);
                CHECK(header(verdict.headers, "Retry-After") == "<none>");
                CHECK(header(verdict.headers, "RateLimit") == row.rate_limit);
            } else {
                REQUIRE(verdict.refusal);
                const auto& reply = *verdict.refusal;
                CHECK(reply.status == row.refused_with);
                CHECK(verdict.headers.empty());  // they travel with the refusal
                CHECK(header(reply.headers, "Retry-After") == row.retry_after);
                CHECK(header(reply.headers, "RateLimit") == row.rate_limit);
                if (row.decision == AccessDecision::limited) {
                    CHECK(reply.body == http::LocalReply::Body::problem_with_limit);
                    CHECK(reply.detail == "rate limit '" + row.limit + "' of route 'login' exceeded");
                } else {
                    CHECK(reply.body == http::LocalReply::Body::problem);
                    CHECK(reply.detail == "the rate-limit store is unavailable");
                }
            }
        }
    }
}

TEST_CASE("a request without a waiting place is not held back, whatever the store answers") {
    config::Config cfg;
    config::RouteConfig route;
    route.name = "drip";
    route.limits = {test::leaky_bucket("drip", 10, 1s, 5)};
    const auto decision = limit::Decision::from_results({result(true, 4, 0ms, false, 300'000us)}, 1);
    CHECK(http::limit_verdict(cfg, route, route.limits, decision, {}, true).wait == 300'000us);
    const auto verdict = http::limit_verdict(cfg, route, route.limits, decision, {}, false);
    CHECK(verdict.wait == 0us);
    CHECK(verdict.decision == AccessDecision::allowed);
}

TEST_CASE("a limit that does not apply is never the one named") {
    config::Config cfg;
    config::RouteConfig route;
    route.name = "api";
    route.limits = {test::token_bucket("per_key", 5, 1s, 10, {test::header("X-Api-Key")}),
                    test::token_bucket("per_ip", 5, 1s, 10)};
    limit::LimitResult skipped;  // applies = false: the request has no X-Api-Key
    const auto verdict =
        http::limit_verdict(cfg, route, limit::Decision::from_results({skipped, result(true, 6)}, 1));
    CHECK(verdict.decision == AccessDecision::allowed);
    CHECK(verdict.limit == "per_ip");
    CHECK(verdict.remaining == 6);
}

TEST_CASE("a decision shorter than the route is read as far as it goes") {
    config::Config cfg;
    config::RouteConfig route;
    route.name = "api";
    route.limits = {test::token_bucket("a", 5, 1s, 10), test::token_bucket("b", 5, 1s, 10)};
    auto decision = limit::Decision::from_results({result(true, 1)}, 1);
    decision.outcome = limit::Decision::Outcome::limited;
    decision.limited_by = 5;  // out of range: the reply still names something and waits a second
    const auto verdict = http::limit_verdict(cfg, route, decision);
    REQUIRE(verdict.refusal);
    CHECK(verdict.refusal->status == 429);
    CHECK(header(verdict.refusal->headers, "Retry-After") == "1");
}
