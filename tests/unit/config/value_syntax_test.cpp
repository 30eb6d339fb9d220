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
          "unknown key part 'Client_IP' (allowed: client_ip, client_ip/N, method, path, path_segment:N, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM)");
    CHECK(parse_key_part("ip").error == "unknown key part 'ip' (allowed: client_ip, client_ip/N, method, path, path_segment:N, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM)");
    CHECK(parse_key_part("header:").error == "invalid header name '' in key part 'header:'");
    // The parts issue 27 adds, and the text each is written back as.
    struct NewPart {
        const char* input;
        KeyPart::Kind kind;
        std::string name;
        unsigned v4, v6, segment;
        const char* text;
    };
    for (const auto& c : std::vector<NewPart>{
             {"client_ip/24", KeyPart::Kind::client_net, "", 24, 24, 0, "client_ip/24"},
             {"client_ip/64", KeyPart::Kind::client_net, "", 32, 64, 0, "client_ip/64"},
             {"client_ip/24/48", KeyPart::Kind::client_net, "", 24, 48, 0, "client_ip/24/48"},
             {"client_ip/32/128", KeyPart::Kind::client_ip, "", 32, 128, 0, "client_ip"},
             {"client_ip/128", KeyPart::Kind::client_ip, "", 32, 128, 0, "client_ip"},
             {"query:api_key", KeyPart::Kind::query, "api_key", 32, 128, 0, "query:api_key"},
             {"query:Page", KeyPart::Kind::query, "Page", 32, 128, 0, "query:Page"},
             {"cookie:session", KeyPart::Kind::cookie, "session", 32, 128, 0, "cookie:session"},
             {"path_segment:2", KeyPart::Kind::path_segment, "", 32, 128, 2, "path_segment:2"},
         }) {
        CAPTURE(c.input);
        const auto parsed = parse_key_part(c.input);
        REQUIRE(parsed.part);
        CHECK(parsed.part->kind == c.kind);
        CHECK(parsed.part->header_name == c.name);
        CHECK(parsed.part->v4_prefix == c.v4);
        CHECK(parsed.part->v6_prefix == c.v6);
        CHECK(parsed.part->segment == c.segment);
        CHECK(key_part_text(*parsed.part) == c.text);
    }
    for (const char* bad : {"client_ip/0", "client_ip/129", "client_ip/", "client_ip/x", "client_ip/-1", "client_ip/0024"})
        CHECK(parse_key_part(bad).error.find("invalid prefix length in key part") == 0);
    for (const char* bad : {"client_ip/33/64", "client_ip/24/0", "client_ip/24/", "client_ip/24/64/1"})
        CHECK(parse_key_part(bad).error.find("invalid prefix lengths in key part") == 0);
    CHECK(parse_key_part("query:").error ==
          "invalid name '' in key part 'query:' (printable, without spaces, & = ; , \" % + #)");
    CHECK(parse_key_part("cookie:a=b").error.find("invalid name 'a=b' in key part 'cookie:a=b'") == 0);
    CHECK(parse_key_part("query:a b").error.find("invalid name 'a b'") == 0);
    for (const char* bad : {"path_segment:0", "path_segment:65", "path_segment:", "path_segment:x"})
        CHECK(parse_key_part(bad).error == std::string("invalid segment in key part '") + bad + "' (path_segment:N, N 1..64)");
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
