#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "config/route_shadowing.hpp"

using sluice::config::route_shadows;
using sluice::config::RouteMatch;

namespace {

struct ShadowCase {
    std::string description;
    RouteMatch earlier;
    RouteMatch later;
    bool shadows;
};

RouteMatch prefix(std::string path, std::vector<std::string> methods = {}, std::optional<std::string> host = {}) {
    return RouteMatch{std::nullopt, std::move(path), std::move(methods), std::move(host)};
}

RouteMatch exact(std::string path, std::vector<std::string> methods = {}, std::optional<std::string> host = {}) {
    return RouteMatch{std::move(path), std::nullopt, std::move(methods), std::move(host)};
}

}  // namespace

TEST_CASE("route shadowing: an earlier route that takes every request of a later one", "[config][routes]") {
    const std::vector<ShadowCase> cases{
        {"catch-all before anything", prefix("/"), prefix("/api"), true},
        {"prefix before a longer prefix", prefix("/api"), prefix("/api/v2"), true},
        {"prefix before an exact path under it", prefix("/api"), exact("/api/x"), true},
        {"same prefix", prefix("/api"), prefix("/api"), true},
        {"same exact path", exact("/a"), exact("/a"), true},
        {"string prefix, not segment", prefix("/api"), prefix("/apix"), true},
        {"longer prefix before a shorter one", prefix("/api/v2"), prefix("/api"), false},
        {"exact path before a prefix", exact("/api"), prefix("/api"), false},
        {"different exact paths", exact("/a"), exact("/b"), false},
        {"unrelated prefixes", prefix("/api"), prefix("/static"), false},
        {"any method covers some", prefix("/"), prefix("/a", {"GET"}), true},
        {"methods superset", prefix("/", {"GET", "POST"}), prefix("/a", {"POST"}), true},
        {"methods equal", prefix("/", {"GET"}), prefix("/a", {"GET"}), true},
        {"methods not a superset", prefix("/", {"GET"}), prefix("/a", {"GET", "POST"}), false},
        {"some methods do not cover any", prefix("/", {"GET"}), prefix("/a"), false},
        {"no host covers a host", prefix("/"), prefix("/a", {}, "a.com"), true},
        {"same host", prefix("/", {}, "a.com"), prefix("/a", {}, "a.com"), true},
        {"other host", prefix("/", {}, "a.com"), prefix("/a", {}, "b.com"), false},
        {"a host does not cover any host", prefix("/", {}, "a.com"), prefix("/a"), false},
    };
    for (const auto& c : cases) {
        CAPTURE(c.description);
        CHECK(route_shadows(c.earlier, c.later) == c.shadows);
    }
}
