#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/value_syntax.hpp"

using namespace sluice::config;

namespace {

struct KeyPartCase {
    std::string input;
    KeyPart::Kind kind;
    std::string header;
};

}  // namespace

TEST_CASE("value syntax: key parts", "[config][value_syntax]") {
    const std::vector<KeyPartCase> good{
        {"client_ip", KeyPart::Kind::client_ip, ""},
        {"method", KeyPart::Kind::method, ""},
        {"path", KeyPart::Kind::path, ""},
        {"header:X-Api-Key", KeyPart::Kind::header, "x-api-key"},
        {"header:authorization", KeyPart::Kind::header, "authorization"},
    };
    for (const auto& c : good) {
        CAPTURE(c.input);
        const auto parsed = parse_key_part(c.input);
        REQUIRE(parsed.part);
        CHECK(parsed.part->kind == c.kind);
        CHECK(parsed.part->header_name == c.header);
    }
    CHECK(parse_key_part("Client_IP").error ==
          "unknown key part 'Client_IP' (allowed: client_ip, method, path, header:NAME)");
    CHECK(parse_key_part("ip").error == "unknown key part 'ip' (allowed: client_ip, method, path, header:NAME)");
    CHECK(parse_key_part("header:").error == "invalid header name '' in key part 'header:'");
    CHECK(parse_key_part("header:a b").error == "invalid header name 'a b' in key part 'header:a b'");
    CHECK(parse_key_part("header:a:b").error == "invalid header name 'a:b' in key part 'header:a:b'");
}

TEST_CASE("value syntax: names, tokens, hosts, paths", "[config][value_syntax]") {
    CHECK(is_valid_name("login"));
    CHECK(is_valid_name("api-v2.read_only"));
    CHECK(is_valid_name(std::string(64, 'n')));
    CHECK_FALSE(is_valid_name(std::string(65, 'n')));
    CHECK_FALSE(is_valid_name(""));
    CHECK_FALSE(is_valid_name("a b"));
    CHECK_FALSE(is_valid_name("a:b"));  // ':' separates the parts of a rate-limit key

    CHECK(is_http_token("GET"));
    CHECK(is_http_token("M-SEARCH"));
    CHECK_FALSE(is_http_token("G T"));
    CHECK_FALSE(is_http_token(""));
    CHECK_FALSE(is_http_token("a(b)"));

    CHECK(normalized_route_host("Example.COM") == "example.com");
    CHECK(normalized_route_host("*.Example.com") == "*.example.com");
    CHECK_FALSE(normalized_route_host("*"));
    CHECK_FALSE(normalized_route_host("a.*.com"));
    CHECK_FALSE(normalized_route_host("example.com:8080"));

    CHECK(route_path_error("path", "/a/b").empty());
    CHECK(route_path_error("path_prefix", "api") == "'path_prefix' must start with '/', got 'api'");
    CHECK(route_path_error("path", "/a b") == "'path' must not contain spaces or control characters");
}

TEST_CASE("value syntax: redis address, tcp or unix socket", "[config][value_syntax]") {
    RedisConfig redis;
    CHECK(apply_redis_address("unix:/run/redis.sock", redis).empty());
    CHECK_FALSE(redis.tcp);
    CHECK(redis.unix_path == "/run/redis.sock");
    CHECK(apply_redis_address("[::1]:6380", redis).empty());
    REQUIRE(redis.tcp);
    CHECK(redis.tcp->str() == "[::1]:6380");
    CHECK(redis.unix_path.empty());
    CHECK(apply_redis_address("unix:run/redis.sock", redis) ==
          "the unix socket path must be absolute, got 'unix:run/redis.sock'");
    CHECK(apply_redis_address("redis", redis) == "missing port in 'redis' (expected host:port) (or unix:/path/to/socket)");
}

TEST_CASE("value syntax: CIDR errors name the problem", "[config][value_syntax]") {
    CHECK(cidr_error("10.0.0.0/33") == "invalid CIDR '10.0.0.0/33' (the prefix length must be 0..32 for IPv4)");
    CHECK(cidr_error("::/200") == "invalid CIDR '::/200' (the prefix length must be 0..128 for IPv6)");
    CHECK(cidr_error("10.0.0/8") ==
          "invalid CIDR '10.0.0/8' (expected an address or address/prefix, e.g. 10.0.0.0/8)");
}
