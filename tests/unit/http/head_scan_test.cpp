#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include "http/head_scan.hpp"

using sluice::http::check_request_head;
using sluice::http::HeadScan;
using sluice::http::scan_request_head;

namespace {
// The generated heads' bytes: xorshift64, the same sequence on every run.
struct Xorshift {
    std::uint64_t state;
    std::uint64_t operator()() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state;
    }
};

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

namespace {
// The rules of check_request_head read one byte at a time, as they are written in
// head_scan.hpp: the reference its table-driven loops must agree with, problem for problem.
std::string_view reference_check(std::string_view head) {
    bool line_start = true, first_line = true, in_name = false;
    for (std::size_t i = 0; i < head.size(); ++i) {
        const auto c = static_cast<unsigned char>(head[i]);
        if (c == '\r') {
            if (i + 1 >= head.size() || head[i + 1] != '\n') return "bare CR in request head";
            continue;
        }
        if (c == '\n') {
            line_start = true;
            first_line = false;
            continue;
        }
        if (line_start) {
            line_start = false;
            if (!first_line && (c == ' ' || c == '\t')) return "obs-fold (line folding) in header field";
            in_name = !first_line;
        }
        if (c == 0 || (c < 0x20 && c != '\t') || c == 0x7f) return "control character in request head";
        if (in_name) {
            if (c == ':') {
                if (i > 0 && (head[i - 1] == ' ' || head[i - 1] == '\t'))
                    return "whitespace between header field name and colon";
                in_name = false;
            } else if (c == ' ' || c == '\t') {
                std::size_t j = i;
                while (j < head.size() && (head[j] == ' ' || head[j] == '\t')) ++j;
                if (j < head.size() && head[j] == ':') return "whitespace between header field name and colon";
                return "whitespace in header field name";
            }
        }
    }
    return {};
}
}  // namespace

TEST_CASE("check_request_head agrees with the byte-at-a-time reading of its rules") {
    // Heads built from the bytes the rules care about, mixed with ordinary ones: every
    // problem, at every place in a line, on the first line and the others.
    const std::string alphabet{'\r', '\n', '\r', '\n', ' ', ':', '\t', '\x01', '\x7f', '\x80', '\xff', 'a', 'Z', '-', '/', '\0'};
    Xorshift next{0x9e3779b97f4a7c15ULL};
    std::size_t ok = 0, refused = 0;
    for (int round = 0; round < 200000; ++round) {
        std::string head = "GET / HTTP/1.1\r\nHost: a\r\n";
        const std::size_t len = next() % 24;
        for (std::size_t i = 0; i < len; ++i) head += alphabet[next() % alphabet.size()];
        if (next() % 2) head += "\r\n\r\n";
        if (next() % 8 == 0) head = head.substr(next() % head.size());  // the first line too
        INFO(head);
        const auto expected = reference_check(head);
        REQUIRE(check_request_head(head) == expected);
        (expected.empty() ? ok : refused) += 1;
    }
    CHECK(ok > 1000);
    CHECK(refused > 1000);
}

namespace {
// scan_request_head's rules read a byte at a time, from `scanned` on.
HeadScan reference_scan(std::string_view data, std::size_t& scanned) {
    HeadScan result;
    std::size_t start = 0;
    while (start + 1 < data.size() && data[start] == '\r' && data[start + 1] == '\n') start += 2;
    result.leading_crlf = start;
    if (scanned < start) scanned = start;
    for (std::size_t i = scanned; i < data.size(); ++i) {
        const char c = data[i];
        if (c == '\n') {
            if (i == 0 || data[i - 1] != '\r') {
                result.state = HeadScan::State::malformed;
                result.problem = "bare LF in request head";
                return result;
            }
            if (i >= start + 3 && data[i - 2] == '\n' && data[i - 3] == '\r') {
                result.state = HeadScan::State::complete;
                result.head_size = i + 1 - start;
                scanned = i + 1;
                return result;
            }
        } else if (c == '\0') {
            result.state = HeadScan::State::malformed;
            result.problem = "NUL in request head";
            return result;
        }
    }
    scanned = data.size() > start + 3 ? data.size() - 3 : start;
    return result;
}
}  // namespace

TEST_CASE("scan_request_head and count_field_lines agree with the byte-at-a-time reading", "[head_scan]") {
    // Heads of the bytes the scan cares about, read whole and in pieces of every size, with
    // `scanned` carried from call to call as the sessions do.
    const std::string alphabet{'\r', '\n', '\r', '\n', '\0', 'a', ':', ' '};
    Xorshift next{0x243f6a8885a308d3ULL};
    std::size_t complete = 0, malformed = 0;
    for (int round = 0; round < 200000; ++round) {
        std::string data = next() % 4 ? "GET / HTTP/1.1\r\nHost: a\r\n" : "\r\n";
        const std::size_t len = next() % 20;
        for (std::size_t i = 0; i < len; ++i) data += alphabet[next() % alphabet.size()];
        if (next() % 2) data += "\r\n\r\nbody\0\n";
        INFO(data);
        std::size_t lines = 0;
        for (char c : data) lines += c == '\n';
        CHECK(sluice::http::count_field_lines(data) == (lines >= 2 ? lines - 2 : 0));
        const std::size_t piece = 1 + next() % 8;
        std::size_t scanned = 0, reference_scanned = 0;
        for (std::size_t have = std::min(piece, data.size());; have = std::min(have + piece, data.size())) {
            const std::string_view seen(data.data(), have);
            const auto got = scan_request_head(seen, scanned);
            const auto expected = reference_scan(seen, reference_scanned);
            REQUIRE(got.state == expected.state);
            REQUIRE(got.head_size == expected.head_size);
            REQUIRE(got.leading_crlf == expected.leading_crlf);
            REQUIRE(got.problem == expected.problem);
            REQUIRE(scanned == reference_scanned);
            if (got.state != HeadScan::State::incomplete || have == data.size()) {
                (got.state == HeadScan::State::complete ? complete : malformed) +=
                    got.state == HeadScan::State::incomplete ? 0 : 1;
                break;
            }
        }
    }
    CHECK(complete > 1000);
    CHECK(malformed > 1000);
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
