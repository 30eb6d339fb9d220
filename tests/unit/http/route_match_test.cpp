#include <catch2/catch.hpp>

#include "http/route_match.hpp"

using namespace sluice;

namespace {

config::RouteConfig route(std::string name, std::optional<std::string> path, std::optional<std::string> prefix,
                          std::vector<std::string> methods = {}, std::optional<std::string> host = {}) {
    config::RouteConfig r;
    r.name = std::move(name);
    r.match.path = std::move(path);
    r.match.path_prefix = std::move(prefix);
    r.match.methods = std::move(methods);
    r.match.host = std::move(host);
    return r;
}

}  // namespace

TEST_CASE("match_route: first match in file order") {
    const std::vector<config::RouteConfig> routes = {
        route("exact", "/health", {}),
        route("login-post", {}, "/login", {"POST"}),
        route("admin-host", {}, "/", {}, "admin.example.com"),
        route("wild", {}, "/w", {}, "*.example.org"),
        route("api", {}, "/api/"),
        route("all", {}, "/"),
    };
    struct Case {
        std::string method, path, host, expected;
    };
    const Case cases[] = {
        {"GET", "/health", "a", "exact"},
        {"GET", "/health/x", "a", "all"},
        {"POST", "/login", "a", "login-post"},
        {"GET", "/login", "a", "all"},
        {"POST", "/loginx", "a", "login-post"},  // a prefix is a string prefix, as in nginx
        {"GET", "/x", "Admin.Example.COM:8080", "admin-host"},
        {"GET", "/x", "admin.example.com.evil", "all"},
        {"GET", "/w", "a.example.org", "wild"},
        {"GET", "/w", "example.org", "all"},
        {"GET", "/api/v1", "a", "api"},
        {"GET", "/api", "a", "all"},
    };
    for (const auto& c : cases) {
        INFO(c.method << " " << c.path << " host " << c.host);
        const auto* r = http::match_route(routes, c.method, c.path, c.host);
        REQUIRE(r != nullptr);
        CHECK(r->name == c.expected);
    }
}

TEST_CASE("match_route: no match") {
    const std::vector<config::RouteConfig> routes = {route("api", {}, "/api")};
    CHECK(http::match_route(routes, "GET", "/other", "a") == nullptr);
    CHECK(http::match_route({}, "GET", "/", "a") == nullptr);
}

TEST_CASE("normalize_host") {
    CHECK(http::normalize_host("Example.COM:8080") == "example.com");
    CHECK(http::normalize_host("example.com") == "example.com");
    CHECK(http::normalize_host("[::1]:8080") == "[::1]");
    CHECK(http::normalize_host("") == "");
}
