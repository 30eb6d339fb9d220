#include <catch2/catch.hpp>

#include <string_view>
#include <vector>

#include "config/spelling_suggestion.hpp"

using sluice::config::closest_spelling;
using sluice::config::spelling_distance;

TEST_CASE("spelling: close typos get a suggestion, far ones none", "[config][spelling]") {
    const std::vector<std::string_view> keys{"name", "algorithm", "rate", "per", "burst", "limit", "window", "key", "shadow"};
    CHECK(closest_spelling("burts", keys) == std::optional<std::string_view>("burst"));
    CHECK(closest_spelling("Burst", keys) == std::optional<std::string_view>("burst"));
    CHECK(closest_spelling("algoritm", keys) == std::optional<std::string_view>("algorithm"));
    CHECK(closest_spelling("windwo", keys) == std::optional<std::string_view>("window"));
    CHECK(closest_spelling("keys", keys) == std::optional<std::string_view>("key"));
    CHECK(closest_spelling("rates", keys) == std::optional<std::string_view>("rate"));
    CHECK(closest_spelling("trusted_proxy", {"trusted_proxies"}) == std::optional<std::string_view>("trusted_proxies"));
    CHECK_FALSE(closest_spelling("frobnicate", keys));
    CHECK_FALSE(closest_spelling("shadowing", keys));  // 3 edits from "shadow" is too many for 9 letters
    CHECK_FALSE(closest_spelling("xy", keys));     // 2 edits from "key" is too many for a short word
    CHECK_FALSE(closest_spelling("", keys));
    CHECK(spelling_distance("abc", "acb") == 1);
    CHECK(spelling_distance("kitten", "sitting") == 3);
}
