#include <catch2/catch.hpp>

#include <string>

#include "http/head_scan.hpp"

using sluice::http::check_request_head;
using sluice::http::HeadScan;
using sluice::http::scan_request_head;

namespace {
HeadScan scan(std::string_view data) {
    std::size_t scanned = 0;
    return scan_request_head(data, scanned);
}
}  // namespace

TEST_CASE("scan_request_head finds the end of the head") {
    struct Case {
        std::string data;
        HeadScan::State state;
        std::size_t head_size;
    };
    const Case cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", HeadScan::State::complete, 27},
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY", HeadScan::State::complete, 27},
        {"GET / HTTP/1.1\r\nHost: a\r\n", HeadScan::State::incomplete, 0},
        {"GET / HTTP/1.1\r\nHost: a\r\n\r", HeadScan::State::incomplete, 0},
        {"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", HeadScan::State::complete, 27},
        {"GET / HTTP/1.1\nHost: a\n\n", HeadScan::State::malformed, 0},
        {"GET / HTTP/1.1\r\nHost: a\n\r\n", HeadScan::State::malformed, 0},
        {std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 27), HeadScan::State::malformed, 0},
    };
    for (const auto& c : cases) {
        INFO(c.data);
        auto result = scan(c.data);
        CHECK(result.state == c.state);
        if (c.state == HeadScan::State::complete) CHECK(result.head_size == c.head_size);
    }
}

TEST_CASE("scan_request_head reports leading empty lines") {
    auto result = scan("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK(result.leading_crlf == 4);
}

TEST_CASE("scan_request_head resumes where it stopped, byte by byte") {
    const std::string head = "GET /x HTTP/1.1\r\nHost: example\r\nA: b\r\n\r\n";
    std::size_t scanned = 0;
    HeadScan result;
    for (std::size_t n = 1; n <= head.size(); ++n) {
        result = scan_request_head(std::string_view(head).substr(0, n), scanned);
        if (n < head.size()) REQUIRE(result.state == HeadScan::State::incomplete);
    }
    CHECK(result.state == HeadScan::State::complete);
    CHECK(result.head_size == head.size());
}

TEST_CASE("check_request_head refuses smuggling material") {
    struct Case {
        std::string head;
        bool ok;
    };
    const Case cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b c\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\tc\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", false},     // obs-fold (space)
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", false},    // obs-fold (tab)
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", false},        // bare CR in a value
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", false},          // space before colon
        {"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n\r\n", false},           // space in a name
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01\r\n\r\n", false},       // control byte
        {"GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n", true},  // obs-text is allowed
    };
    for (const auto& c : cases) {
        INFO(c.head);
        CHECK(check_request_head(c.head).empty() == c.ok);
    }
}

TEST_CASE("request_version_offset finds the version digits of the request line") {
    using sluice::http::request_version_offset;
    constexpr auto npos = std::string_view::npos;
    CHECK(request_version_offset("GET / HTTP/1.1\r\nHost: a\r\n\r\n") == 11);
    CHECK(request_version_offset("GET /x HTTP/1.2\r\n\r\n") == 12);
    CHECK(request_version_offset("GET /x HTTP/2.0\r\n\r\n") == 12);
    CHECK(request_version_offset("GET /x HTTP/1\r\n\r\n") == npos);
    CHECK(request_version_offset("GET /x HTTP/1.10\r\n\r\n") == npos);
    CHECK(request_version_offset("GET /xHTTP/1.1\r\n\r\n") == npos);
    CHECK(request_version_offset("HTTP/1.1\r\n\r\n") == npos);
    CHECK(request_version_offset("GET /x http/1.1\r\n\r\n") == npos);
    CHECK(request_version_offset("") == npos);
}

TEST_CASE("count_field_lines counts the lines between the start line and the blank line") {
    using sluice::http::count_field_lines;
    CHECK(count_field_lines("GET / HTTP/1.1\r\n\r\n") == 0);
    CHECK(count_field_lines("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\n") == 2);
}

TEST_CASE("check_request_line refuses a complete request line without a version at once") {
    using sluice::http::check_request_line;
    // Not complete yet: nothing to say.
    CHECK(check_request_line("").empty());
    CHECK(check_request_line("GET /").empty());
    CHECK(check_request_line("GET / HTTP/1.1").empty());
    CHECK(check_request_line("GET / HTTP/1.1\r").empty());
    // Complete, with a version: fine (the rest of the head may still be on its way).
    CHECK(check_request_line("GET / HTTP/1.1\r\n").empty());
    CHECK(check_request_line("GET / HTTP/1.0\r\nHost: a\r\n").empty());
    CHECK(check_request_line("GET / HTTP/2.0\r\n").empty());  // a version: 505 comes later
    // HTTP/0.9 and other lines that cannot be HTTP/1.x: refused as soon as the CRLF is there.
    CHECK_FALSE(check_request_line("GET /\r\n").empty());
    CHECK_FALSE(check_request_line("GET\r\n").empty());
    CHECK_FALSE(check_request_line("\r\n").empty());
    CHECK_FALSE(check_request_line("GET / HTTP/1.1 \r\n").empty());
    CHECK_FALSE(check_request_line("GET / HTTP/1\r\nHost: a\r\n\r\n").empty());
    CHECK_FALSE(check_request_line("GET /HTTP/1.1\r\n").empty());
}
