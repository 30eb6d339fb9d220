#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/endpoint.hpp"

using sluice::config::Endpoint;
using sluice::config::is_valid_host_name;
using sluice::config::parse_endpoint;

namespace {

struct GoodCase {
    std::string input;
    std::string host;
    unsigned port;
    std::string printed;
};

struct BadCase {
    std::string input;
    std::string error;
};

}  // namespace

TEST_CASE("endpoint: host:port and [v6]:port parse", "[config][endpoint]") {
    const std::vector<GoodCase> cases{
        {"127.0.0.1:8080", "127.0.0.1", 8080, "127.0.0.1:8080"},
        {"0.0.0.0:1", "0.0.0.0", 1, "0.0.0.0:1"},
        {"[::]:8080", "::", 8080, "[::]:8080"},
        {"[::1]:6379", "::1", 6379, "[::1]:6379"},
        {"[2001:db8::1]:443", "2001:db8::1", 443, "[2001:db8::1]:443"},
        {"[::ffff:1.2.3.4]:80", "::ffff:1.2.3.4", 80, "[::ffff:1.2.3.4]:80"},
        {"redis:6379", "redis", 6379, "redis:6379"},
        {"my_redis.internal:65535", "my_redis.internal", 65535, "my_redis.internal:65535"},
        {"Example.COM:80", "Example.COM", 80, "Example.COM:80"},  // kept as written
        {"localhost:08080", "localhost", 8080, "localhost:8080"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.input);
        const auto parsed = parse_endpoint(c.input);
        REQUIRE(parsed.endpoint);
        CHECK(parsed.error.empty());
        CHECK(parsed.endpoint->host == c.host);
        CHECK(parsed.endpoint->port == c.port);
        CHECK(parsed.endpoint->str() == c.printed);
    }
}

TEST_CASE("endpoint: malformed endpoints say why", "[config][endpoint]") {
    const std::vector<BadCase> cases{
        {"", "empty address (expected host:port)"},
        {"localhost", "missing port in 'localhost' (expected host:port)"},
        {"8080", "missing port in '8080' (expected host:port)"},
        {"host:", "missing port in 'host:' (expected host:port)"},
        {":8080", "missing host in ':8080' (use 0.0.0.0 or [::] for every interface)"},
        {"host:0", "invalid port '0' in 'host:0' (expected 1..65535)"},
        {"host:65536", "invalid port '65536' in 'host:65536' (expected 1..65535)"},
        {"host:123456", "invalid port '123456' in 'host:123456' (expected 1..65535)"},
        {"host:80a", "invalid port '80a' in 'host:80a' (expected 1..65535)"},
        {"host:-1", "invalid port '-1' in 'host:-1' (expected 1..65535)"},
        {"host:+80", "invalid port '+80' in 'host:+80' (expected 1..65535)"},
        {"::1:80", "an IPv6 address needs brackets, as in [::1]:8080, got '::1:80'"},
        {"[::1", "missing ']' in '[::1'"},
        {"[::1]", "missing port in '[::1]' (expected [address]:port)"},
        {"[::1]8080", "missing port in '[::1]8080' (expected [address]:port)"},
        {"[1.2.3.4]:80", "'1.2.3.4' is not an IPv6 address in '[1.2.3.4]:80'"},
        {"[zz]:80", "'zz' is not an IPv6 address in '[zz]:80'"},
        {"[]:80", "missing host in '[]:80' (use 0.0.0.0 or [::] for every interface)"},
        {"256.0.0.1:80", "invalid IPv4 address '256.0.0.1' in '256.0.0.1:80'"},
        {"1.2.3:80", "invalid IPv4 address '1.2.3' in '1.2.3:80'"},
        {"bad host:80", "invalid host name 'bad host' in 'bad host:80'"},
        {"-a.com:80", "invalid host name '-a.com' in '-a.com:80'"},
        {"a..b:80", "invalid host name 'a..b' in 'a..b:80'"},
        {"a.com.:80", "invalid host name 'a.com.' in 'a.com.:80'"},
        {"http://a:80", "expected host:port, not a URL: 'http://a:80'"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.input);
        const auto parsed = parse_endpoint(c.input);
        CHECK_FALSE(parsed.endpoint);
        CHECK(parsed.error == c.error);
    }
}

TEST_CASE("endpoint: port 0 only when the caller allows it", "[config][endpoint]") {
    CHECK_FALSE(parse_endpoint("127.0.0.1:0").endpoint);
    const auto listener = parse_endpoint("127.0.0.1:0", true);
    REQUIRE(listener.endpoint);
    CHECK(listener.endpoint->port == 0);
    CHECK(parse_endpoint("[::]:0", true).endpoint);
    CHECK(parse_endpoint("h:99999", true).error == "invalid port '99999' in 'h:99999' (expected 0..65535)");
}

TEST_CASE("endpoint: str brackets only IPv6 hosts", "[config][endpoint]") {
    CHECK(Endpoint{"::1", 80}.str() == "[::1]:80");
    CHECK(Endpoint{"fe80::1", 9901}.str() == "[fe80::1]:9901");
    CHECK(Endpoint{"10.0.0.1", 80}.str() == "10.0.0.1:80");
    CHECK(Endpoint{"backend", 8081}.str() == "backend:8081");
}

TEST_CASE("endpoint: host name rules", "[config][endpoint]") {
    CHECK(is_valid_host_name("a"));
    CHECK(is_valid_host_name("a-b.example.com"));
    CHECK(is_valid_host_name("redis_1"));
    CHECK(is_valid_host_name(std::string(63, 'a') + ".com"));
    CHECK_FALSE(is_valid_host_name(std::string(64, 'a') + ".com"));
    CHECK_FALSE(is_valid_host_name(""));
    CHECK_FALSE(is_valid_host_name("a-"));
    CHECK_FALSE(is_valid_host_name(".a"));
    CHECK_FALSE(is_valid_host_name("a b"));
    CHECK_FALSE(is_valid_host_name("*.a.com"));
}
