#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../support/limit_configs.hpp"
#include "config/value_syntax.hpp"
#include "limit/limit_key.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using namespace sluice::test;
using limit::build_limit_keys;
using limit::RequestKeyValues;
using limit::RouteLimits;

namespace {

// The request used by most rows.
struct Request {
    std::string ip = "203.0.113.7";
    std::string method = "GET";
    std::string path = "/login";
    std::map<std::string, std::string> headers{{"x-api-key", "abc123"}, {"x-tenant", "acme"}};

    RequestKeyValues values() const {
        return {ip, method, path, [this](std::string_view name) -> std::optional<std::string_view> {
                    auto found = headers.find(std::string(name));
                    if (found == headers.end()) return std::nullopt;
                    return found->second;
                }};
    }
};

std::vector<std::optional<std::string>> keys_for(const std::vector<config::LimitConfig>& limits,
                                                 const Request& request = {}, std::string_view route = "login",
                                                 std::string_view prefix = "sluice") {
    const auto keys = build_limit_keys(prefix, RouteLimits{route, limits}, request.values());
    return {keys.begin(), keys.end()};
}

// Redis Cluster's rule: the part between the first '{' and the first '}' after it, if not empty.
std::string hash_tag(const std::string& key) {
    const auto open = key.find('{');
    if (open == std::string::npos) return key;
    const auto close = key.find('}', open + 1);
    if (close == std::string::npos || close == open + 1) return key;
    return key.substr(open + 1, close - open - 1);
}

}  // namespace

TEST_CASE("limit keys: format, hash tag and escaping", "[limit_key]") {
    struct Row {
        const char* what;
        std::vector<config::LimitConfig> limits;
        std::vector<std::optional<std::string>> expected;
    };
    const std::vector<Row> rows{
        {"one limit by client",
         {token_bucket("burst", 5, 1s, 10)},
         {"sluice:{login:203.0.113.7}:burst"}},
        {"two limits by client share the client in the tag",
         {token_bucket("burst", 5, 1s, 10), sliding_window("minute", 30, 60s)},
         {"sluice:{login:203.0.113.7}:burst", "sluice:{login:203.0.113.7}:minute"}},
        {"nothing in common: the tag is the route",
         {token_bucket("per_ip", 5, 1s, 10), sliding_window("per_key", 100, 60s, {header("x-api-key")})},
         {"sluice:{login}:per_ip:203.0.113.7", "sluice:{login}:per_key:abc123"}},
        {"common part in the tag, the rest after the limit",
         {token_bucket("a", 5, 1s, 10, {client_ip(), method()}), sliding_window("b", 9, 1s, {client_ip()})},
         {"sluice:{login:203.0.113.7}:a:GET", "sluice:{login:203.0.113.7}:b"}},
        {"parts in canonical order whatever the config order",
         {token_bucket("a", 5, 1s, 10, {path(), header("x-tenant"), method(), client_ip()})},
         {"sluice:{login:203.0.113.7:acme:GET:/login}:a"}},
        {"a limit without key parts is one counter for the route",
         {token_bucket("global", 100, 1s, 100, {}), token_bucket("burst", 5, 1s, 10)},
         {"sluice:{login}:global", "sluice:{login}:burst:203.0.113.7"}},
        {"an absent header: that limit does not apply",
         {token_bucket("burst", 5, 1s, 10), sliding_window("user", 9, 1s, {header("x-user")})},
         {"sluice:{login}:burst:203.0.113.7", std::nullopt}},
        {"an absent header every limit needs: none applies",
         {token_bucket("a", 5, 1s, 10, {header("x-user")}), sliding_window("b", 9, 1s, {header("x-user")})},
         {std::nullopt, std::nullopt}},
    };
    for (const auto& row : rows) {
        INFO(row.what);
        CHECK(keys_for(row.limits) == row.expected);
    }
}

TEST_CASE("limit keys: values are escaped so keys are unambiguous and only the tag is a tag", "[limit_key]") {
    Request request;
    request.ip = "2001:db8::1";
    request.headers["x-api-key"] = "a:b{c}% d";
    const auto keys = keys_for({token_bucket("k", 5, 1s, 10, {client_ip(), header("x-api-key")})}, request,
                               "log:in{x}", "app:rl{");
    REQUIRE(keys[0]);
    CHECK(*keys[0] == "app:rl%7B:{log%3Ain%7Bx%7D:2001%3Adb8%3A%3A1:a%3Ab%7Bc%7D%25%20d}:k");

    // ["a:b", "c"] and ["a", "b:c"] must not be the same counter.
    Request one;
    one.headers = {{"x-user", "a:b"}, {"x-tenant", "c"}};
    Request two;
    two.headers = {{"x-user", "a"}, {"x-tenant", "b:c"}};
    const std::vector<config::LimitConfig> limits{
        token_bucket("k", 5, 1s, 10, {header("x-tenant"), header("x-user")})};
    CHECK(keys_for(limits, one) != keys_for(limits, two));
}

TEST_CASE("limit keys: every byte of a value is escaped or kept as the key format says", "[limit_key]") {
    // The key format's rule, written plainly: '%', '{', '}', ':', space, the control bytes and
    // DEL become %XX (upper-case hex); every other byte, 0x80-0xff included, stays. Each byte
    // value alone, at the start, in the middle and at the end of a value.
    const auto reference = [](const std::string& text) {
        std::string out;
        for (unsigned char c : text) {
            if (c == '%' || c == '{' || c == '}' || c == ':' || c <= 0x20 || c == 0x7f) {
                static constexpr char hex[] = "0123456789ABCDEF";
                out += '%';
                out += hex[c >> 4];
                out += hex[c & 0xf];
            } else {
                out += static_cast<char>(c);
            }
        }
        return out;
    };
    const std::vector<config::LimitConfig> limits{token_bucket("k", 5, 1s, 10, {header("x-api-key")})};
    for (int byte = 0; byte < 256; ++byte) {
        const std::string b(1, static_cast<char>(byte));
        for (const std::string& value : {b, b + "ab", "ab" + b + "cd", "abc" + b}) {
            CAPTURE(byte, value);
            Request request;
            request.headers["x-api-key"] = value;
            const auto keys = keys_for(limits, request);
            REQUIRE(keys[0]);
            CHECK(*keys[0] == "sluice:{login:" + reference(value) + "}:k");
        }
    }
}

TEST_CASE("limit keys: every key of a request has the same cluster hash tag", "[limit_key]") {
    const std::vector<std::vector<config::LimitConfig>> routes{
        {token_bucket("a", 5, 1s, 10), sliding_window("b", 9, 1s), sliding_window("c", 9, 1s, {client_ip(), path()})},
        {token_bucket("a", 5, 1s, 10), sliding_window("b", 9, 1s, {header("x-api-key")})},
        {token_bucket("a", 5, 1s, 10, {}), sliding_window("b", 9, 1s, {method()})},
    };
    Request request;
    request.headers["x-api-key"] = "}{";
    for (const auto& limits : routes) {
        const auto keys = keys_for(limits, request);
        for (const auto& key : keys) {
            REQUIRE(key);
            CHECK(hash_tag(*key) == hash_tag(*keys[0]));
            CHECK(hash_tag(*key) != *key);
        }
    }
}

TEST_CASE("limit keys: stable when rates, algorithms or shadow change", "[limit_key]") {
    const auto before = keys_for({token_bucket("a", 5, 1s, 10), sliding_window("b", 9, 1s)});
    const auto after = keys_for({sliding_window("a", 100, 1h, {client_ip()}, true), token_bucket("b", 1, 3s, 1)});
    CHECK(before == after);
    // Different clients, routes and limits never share a counter.
    Request other;
    other.ip = "198.51.100.2";
    CHECK(keys_for({token_bucket("a", 5, 1s, 10)}) != keys_for({token_bucket("a", 5, 1s, 10)}, other));
    CHECK(keys_for({token_bucket("a", 5, 1s, 10)}) != keys_for({token_bucket("a", 5, 1s, 10)}, {}, "signup"));
}

TEST_CASE("limit keys: one plan per route serves every request", "[limit_key]") {
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10, {client_ip(), header("x-tenant")}),
                                                  sliding_window("minute", 100, 60s, {header("x-tenant"), client_ip()})};
    const auto plan = limit::make_key_plan("log:in", limits);
    CHECK(plan.route == "log%3Ain");
    REQUIRE(plan.limits.size() == 2);
    CHECK(plan.limits[0].args == std::vector<std::string>{"token_bucket", "0", "1", "200000", "10"});
    CHECK(plan.limits[1].args == std::vector<std::string>{"sliding_window", "0", "1", "100", "60000000"});
    const std::vector<std::pair<std::string, std::string>> cases{
        {"203.0.113.7", "app:rl:{log%3Ain:203.0.113.7:acme}:"},
        {"2001:db8::1", "app:rl:{log%3Ain:2001%3Adb8%3A%3A1:acme}:"},
    };
    for (const auto& [ip, head] : cases) {
        Request request;
        request.ip = ip;
        const auto made = build_limit_keys("app:rl", RouteLimits{"log:in", limits, &plan}, request.values());
        const std::vector<std::optional<std::string>> planned(made.begin(), made.end());
        CHECK(planned == keys_for(limits, request, "log:in", "app:rl"));
        CHECK(planned == std::vector<std::optional<std::string>>{head + "burst", head + "minute"});
    }
    CHECK(plan.longest_name == 6);
}

TEST_CASE("limit keys: a prefix escaped once makes the keys the prefix as given makes", "[limit_key]") {
    const std::vector<config::LimitConfig> limits{token_bucket("burst", 5, 1s, 10),
                                                  sliding_window("a much longer name", 9, 1s, {header("x-user")})};
    const auto plan = limit::make_key_plan("login", limits);
    CHECK(plan.longest_name == 24);  // escaped: "a%20much%20longer%20name"
    Request request;
    request.headers["x-user"] = "u 1";
    for (const std::string_view given : {"sluice", "app:rl", "my app{1}%", ""}) {
        INFO(given);
        const limit::KeyPrefix prefix(given);
        const auto made = build_limit_keys(prefix, RouteLimits{"login", limits, &plan}, request.values());
        const std::vector<std::optional<std::string>> once(made.begin(), made.end());
        CHECK(once == keys_for(limits, request, "login", given));
    }
    CHECK(limit::KeyPrefix("my app{1}%:x").escaped == "my%20app%7B1%7D%25:x");
    const limit::KeyPrefix prefix("my app{1}%:x");
    const auto made = build_limit_keys(prefix, RouteLimits{"login", limits, &plan}, request.values());
    REQUIRE(made.size() == 2);
    CHECK(made[0] == std::optional<std::string>("my%20app%7B1%7D%25:x:{login}:burst:203.0.113.7"));
    CHECK(made[1] == std::optional<std::string>("my%20app%7B1%7D%25:x:{login}:a%20much%20longer%20name:u%201"));
}

TEST_CASE("limit keys: client networks, query parameters, cookies and path segments", "[limit_key]") {
    using limit::client_network;
    using limit::cookie_value;
    using limit::path_segment;
    using limit::query_value;
    CHECK(client_network("203.0.113.77", 24, 64) == "203.0.113.0/24");
    CHECK(client_network("203.0.113.77", 32, 64) == "203.0.113.77/32");
    CHECK(client_network("::ffff:203.0.113.77", 16, 64) == "203.0.0.0/16");
    CHECK(client_network("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 24, 64) == "2001:db8:1:2::/64");
    CHECK(client_network("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 24, 48) == "2001:db8:1::/48");
    CHECK(client_network("2001:db8:1:ffff:aaaa:bbbb:cccc:dddd", 24, 57) == "2001:db8:1:ff80::/57");
    CHECK_FALSE(client_network("not-an-ip", 24, 64));

    bool ambiguous = false;
    CHECK(query_value("a=1&api_key=k%2B1&b=2", "api_key", ambiguous) == "k+1");
    CHECK_FALSE(ambiguous);
    CHECK(query_value("api_key=a+b", "api_key", ambiguous) == "a b");
    CHECK(query_value("api%5Fkey=x", "api_key", ambiguous) == "x");  // the name is decoded too
    CHECK(query_value("api_key", "api_key", ambiguous) == "");
    CHECK(query_value("api_key=x&api_key=x", "api_key", ambiguous) == "x");
    CHECK_FALSE(ambiguous);
    CHECK_FALSE(query_value("api_key=x&api_key=%78%79", "api_key", ambiguous));
    CHECK(ambiguous);
    CHECK_FALSE(query_value("API_KEY=x", "api_key", ambiguous));
    CHECK_FALSE(ambiguous);
    CHECK(query_value("k=%zz%4", "k", ambiguous) == "%zz%4");  // bad escapes stay as written
    CHECK_FALSE(query_value("", "k", ambiguous));

    CHECK(cookie_value("a=1; session=s1;b=2", "session", ambiguous) == "s1");
    CHECK(cookie_value("session=\"quoted\"", "session", ambiguous) == "quoted");
    CHECK(cookie_value("session=%61bc%2x", "session", ambiguous) == "abc%2x");
    CHECK(cookie_value("session=abc; session=%61bc", "session", ambiguous) == "abc");  // one value, two spellings
    CHECK_FALSE(ambiguous);
    CHECK(cookie_value("session=s1; session=s1", "session", ambiguous) == "s1");
    CHECK_FALSE(ambiguous);
    CHECK_FALSE(cookie_value("session=s1; session=s2", "session", ambiguous));
    CHECK(ambiguous);
    CHECK_FALSE(cookie_value("sessionx=1; xsession=2; session", "session", ambiguous));
    CHECK_FALSE(ambiguous);

    CHECK(path_segment("/v1/users/42", 1) == "v1");
    CHECK(path_segment("/v1/users/42", 3) == "42");
    CHECK_FALSE(path_segment("/v1/users/42", 4));
    CHECK_FALSE(path_segment("/", 1));

    // Keys: the values are escaped like any other; a missing one means the limit does not apply.
    auto part = [](const char* text) { return *config::parse_key_part(text).part; };
    auto limit_keyed = [](const char* name, std::vector<config::KeyPart> key) {
        return token_bucket(name, 10, 1000ms, 10, std::move(key));
    };
    const std::vector<config::LimitConfig> limits{limit_keyed("net", {part("client_ip/24/64")}),
                                                  limit_keyed("key", {part("query:api_key")}),
                                                  limit_keyed("sess", {part("cookie:sid")}),
                                                  limit_keyed("tenant", {part("path_segment:2")})};
    Request r;
    r.path = "/t/ac%21me/items";
    auto values = r.values();
    values.query = "api_key=a%3Ab";
    values.cookies = "sid=xyz";
    auto keys = build_limit_keys("sluice", RouteLimits{"api", limits}, values);
    CHECK(keys[0] == "sluice:{api}:net:203.0.113.0/24");
    CHECK(keys[1] == "sluice:{api}:key:a%3Ab");
    CHECK(keys[2] == "sluice:{api}:sess:xyz");
    CHECK(keys[3] == "sluice:{api}:tenant:ac!me");  // the segment decoded
    values.query = "other=1";
    values.cookies = "";
    values.path = "/t";
    keys = build_limit_keys("sluice", RouteLimits{"api", limits}, values);
    CHECK(keys[0].has_value());
    CHECK_FALSE(keys[1]);
    CHECK_FALSE(keys[2]);
    CHECK_FALSE(keys[3]);
    values.query = "api_key=1&api_key=2";
    CHECK(limit::ambiguous_key_value(limits, values) ==
          "query parameter 'api_key' is given more than once with different values; limit 'key' is keyed on it, so "
          "which one counts would be a guess");
}
