// sluice's own request ids (new_request_id): the form the access log and X-Request-Id carry.
#include <catch2/catch.hpp>

#include <array>
#include <set>
#include <string>

#include "http/exchange.hpp"

TEST_CASE("new_request_id gives 32 lowercase hexadecimal digits, every digit at every place, no two alike") {
    std::set<std::string> seen;
    std::array<std::array<bool, 16>, 32> digit_at{};
    for (int i = 0; i < 4000; ++i) {
        const auto id = sluice::http::new_request_id();
        REQUIRE(id.size() == 32);
        for (std::size_t at = 0; at < id.size(); ++at) {
            const char c = id[at];
            const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            REQUIRE(hex);
            digit_at[at][static_cast<std::size_t>(c <= '9' ? c - '0' : c - 'a' + 10)] = true;
        }
        seen.insert(id);
    }
    CHECK(seen.size() == 4000);
    for (std::size_t at = 0; at < 32; ++at)
        for (std::size_t d = 0; d < 16; ++d) {
            CAPTURE(at, d);
            CHECK(digit_at[at][d]);  // 4000 ids: a digit missing from a place is a mapping error
        }
}
