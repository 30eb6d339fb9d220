// /limits: which route, limit and key a query names, and the JSON answers.
#include <catch2/catch.hpp>

#include <string>

#include "config/loader.hpp"
#include "limit/key_values.hpp"
#include "server/limits_api.hpp"

using namespace sluice;

namespace {

std::shared_ptr<const config::Config> api_config() {
    auto result = config::load_string(R"(upstreams:
  app: {servers: ["127.0.0.1:8081"]}
routes:
  - name: api
    match: {path_prefix: /api}
    upstream: app
    limits:
      - {name: per_ip, algorithm: token_bucket, rate: 10, per: 1s, burst: 20}
      - {name: per_key, algorithm: fixed_window, limit: 1000, window: day, key: ["header:x-api-key"]}
      - {name: slots, algorithm: concurrency, limit: 5, key: ["header:x-api-key"]}
  - name: by_method
    match: {path_prefix: /m}
    upstream: app
    limits:
      - {name: m, algorithm: sliding_window, limit: 5, window: 1m, key: [method, path]}
)",
                                      "t.yaml");
    REQUIRE(result.ok());
    return result.config;
}

std::optional<server::LimitsQuery> read(const config::Config& config, const std::string& query,
                                        server::LimitsProblem& problem) {
    std::string error;
    auto params = observe::parse_query(query, error);
    REQUIRE(params);
    return server::read_limits_query(config, *params, problem);
}

}  // namespace

TEST_CASE("limits api: queries", "[admin]") {
    const auto config = api_config();
    server::LimitsProblem problem;
    auto q = read(*config, "route=api&client=::ffff:203.0.113.7&header.X-Api-Key=k1", problem);
    REQUIRE(q);
    CHECK(q->route == 0);
    CHECK_FALSE(q->limit);
    CHECK(q->values.client_ip == "203.0.113.7");  // as keys write it
    REQUIRE(q->values.headers.size() == 1);
    CHECK(q->values.headers[0] == std::pair<std::string, std::string>{"x-api-key", "k1"});
    q = read(*config, "route=api&limit=per_key&header.x-api-key=k1", problem);  // no client needed for it
    REQUIRE(q);
    CHECK(q->limit == 1u);
    // Query parameters and cookies, as a request would carry them (a value percent-encoded).
    q = read(*config, "route=api&client=1.2.3.4&query.api_key=a%20b%26c&cookie.sid=s1&cookie.t=2", problem);
    REQUIRE(q);
    CHECK(q->values.query == "api_key=a%20b%26c");
    CHECK(q->values.cookies == "sid=s1; t=2");
    bool ambiguous = false;
    CHECK(limit::query_value(q->values.query, "api_key", ambiguous) == "a b&c");
    CHECK(limit::cookie_value(q->values.cookies, "t", ambiguous) == "2");
    q = read(*config, "route=api&client=1.2.3.4&cookie.sid=a%3Bb", problem);  // a ';' in the value stays in it
    REQUIRE(q);
    CHECK(limit::cookie_value(q->values.cookies, "sid", ambiguous) == "a;b");

    struct Bad {
        std::string query;
        unsigned status;
        std::string message;
    };
    for (const Bad& bad : std::vector<Bad>{
             {"client=1.2.3.4", 400, "'route' is needed"},
             {"route=nope", 404, "no route named 'nope'"},
             {"route=api&limit=nope&client=1.2.3.4", 404, "route 'api' has no limit named 'nope'"},
             {"route=api", 400, "'client' is needed: limit 'per_ip' is keyed on client_ip"},
             {"route=api&client=not-an-ip", 400, "'client' is not an IP address"},
             {"route=api&client=1.2.3.4&client=1.2.3.5", 400, "'client' is given twice"},
             {"route=api&client=1.2.3.4&header.a=1&header.A=2", 400, "'header.A' is given twice"},
             {"route=api&client=1.2.3.4&colour=red", 400,
              "unknown parameter 'colour' (route, client, method, path, header.NAME, query.NAME, cookie.NAME, jwt.CLAIM, limit, plan)"},
             {"route=by_method&path=/m", 400, "'method' is needed: limit 'm' is keyed on method"},
             {"route=by_method&method=GET", 400, "'path' is needed: limit 'm' is keyed on path"},
             {"route=api&client=1.2.3.4&query.k=1&query.k=2", 400, "'query.k' is given twice"},
             {"route=api&client=1.2.3.4&cookie.s=1&cookie.s=1", 400, "'cookie.s' is given twice"},
         }) {
        INFO(bad.query);
        server::LimitsProblem p;
        CHECK_FALSE(read(*config, bad.query, p));
        CHECK(p.status == bad.status);
        CHECK(p.message == bad.message);
    }
}

TEST_CASE("limits api: answers", "[admin]") {
    const auto config = api_config();
    server::LimitsProblem problem;
    auto q = read(*config, "route=api&client=203.0.113.7&header.x-api-key=k%221", problem);
    REQUIRE(q);
    limit::Decision d;
    d.limits.resize(3);
    d.limits[0] = {true, false, true, 17, {}, std::chrono::milliseconds(300)};
    d.limits[1] = {true, false, true, 990, {}, std::chrono::milliseconds(3600000)};
    d.limits[2] = {true, false, true, 3, {}, std::chrono::milliseconds(59000)};
    CHECK(server::limits_state_json(*config, *q, d) ==
          "{\"route\":\"api\",\"key\":{\"client\":\"203.0.113.7\",\"header.x-api-key\":\"k\\\"1\"},\"limits\":["
          "{\"name\":\"per_ip\",\"algorithm\":\"token_bucket\",\"shadow\":false,\"capacity\":20,\"applies\":true,"
          "\"remaining\":17,\"reset_ms\":300},"
          "{\"name\":\"per_key\",\"algorithm\":\"fixed_window\",\"shadow\":false,\"capacity\":1000,\"applies\":true,"
          "\"remaining\":990,\"reset_ms\":3600000},"
          "{\"name\":\"slots\",\"algorithm\":\"concurrency\",\"shadow\":false,\"capacity\":5,\"applies\":true,"
          "\"remaining\":3,\"in_flight\":2,\"reset_ms\":59000}]}\n");
    d.limits[1].applies = false;
    q->limit = 1;
    CHECK(server::limits_state_json(*config, *q, d).find("\"limits\":[{\"name\":\"per_key\",\"algorithm\":"
                                                         "\"fixed_window\",\"shadow\":false,\"capacity\":1000,"
                                                         "\"applies\":false}]") != std::string::npos);
    CHECK(server::limits_reset_json(*config, *q, {0, 2}, 1) ==
          "{\"route\":\"api\",\"key\":{\"client\":\"203.0.113.7\",\"header.x-api-key\":\"k\\\"1\"},"
          "\"reset\":[\"per_ip\",\"slots\"],\"keys_deleted\":1}\n");
    CHECK(server::limits_error_json("a \"b\"") == "{\"error\":\"a \\\"b\\\"\"}\n");
}
