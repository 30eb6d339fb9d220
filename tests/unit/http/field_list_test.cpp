// An upstream's response head read by parse_response_head: a table of heads, hostile ones,
// a differential run against Beast's parser (which read every response head before), and
// FieldList's storage.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/field_list.hpp"
#include "http/head_scan.hpp"
#include "http/header_rules.hpp"

using namespace sluice;
namespace bhttp = boost::beast::http;

namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

Lines lines_of(const http::FieldList& fields) {
    Lines out;
    for (const auto& f : fields) out.emplace_back(std::string(f.name_string()), std::string(f.value()));
    return out;
}

}  // namespace

TEST_CASE("parse_response_head reads the status line and the fields in order") {
    http::UpstreamResponse res;
    REQUIRE(http::parse_response_head("HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length:  3 \r\n"
                                      "X-Empty:\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\nX-Tab:\tv w\t\r\n\r\n",
                                      res)
                .empty());
    CHECK(res.version == 11);
    CHECK(res.status == 200);
    CHECK(res.reason == "OK");
    CHECK(res.keep_alive);
    CHECK(lines_of(res.fields) == Lines{{"Server", "nginx"},
                                        {"Content-Length", "3"},
                                        {"X-Empty", ""},
                                        {"set-cookie", "a=1"},
                                        {"Set-Cookie", "b=2"},
                                        {"X-Tab", "v w"}});
    auto it = res.fields.begin();
    CHECK(it->name() == bhttp::field::server);
    CHECK((++it)->name() == bhttp::field::content_length);
    CHECK((++it)->name() == bhttp::field::unknown);
    CHECK((++it)->name() == bhttp::field::set_cookie);  // case-insensitively

    SECTION("an empty reason, HTTP/1.0 and its keep-alive") {
        REQUIRE(http::parse_response_head("HTTP/1.0 404 \r\nConnection: Keep-Alive\r\n\r\n", res).empty());
        CHECK(res.version == 10);
        CHECK(res.status == 404);
        CHECK(res.reason.empty());
        CHECK(res.keep_alive);
        REQUIRE(http::parse_response_head("HTTP/1.0 200 OK\r\n\r\n", res).empty());
        CHECK_FALSE(res.keep_alive);
        CHECK(res.fields.empty());
    }
    SECTION("Connection: close, in any of the Connection fields") {
        REQUIRE(http::parse_response_head("HTTP/1.1 200 OK\r\nConnection: x\r\nconnection: foo, CLOSE\r\n\r\n", res)
                    .empty());
        CHECK_FALSE(res.keep_alive);
        // Contradictory: the connection closes.
        REQUIRE(http::parse_response_head("HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\n\r\n", res).empty());
        CHECK_FALSE(res.keep_alive);
    }
    SECTION("Proxy-Connection counts as Connection for the upstream connection's reuse, as in Beast's parser") {
        REQUIRE(http::parse_response_head("HTTP/1.1 200 OK\r\nProxy-Connection: close\r\n\r\n", res).empty());
        CHECK_FALSE(res.keep_alive);
        REQUIRE(http::parse_response_head("HTTP/1.0 200 OK\r\nProxy-Connection: keep-alive\r\n\r\n", res).empty());
        CHECK(res.keep_alive);
    }
    SECTION("an empty Transfer-Encoding beside chunked is refused as Beast's parser refused it") {
        REQUIRE(http::parse_response_head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n", res)
                    .empty());
        const auto framing = http::check_response_framing(res.fields, res.version, res.status, false);
        CHECK(framing.status == 502);
        CHECK(framing.problem == "upstream sent an empty Transfer-Encoding");
    }
    SECTION("HTTP/1.x above 1 is read as HTTP/1.1") {
        REQUIRE(http::parse_response_head("HTTP/1.7 200 OK\r\n\r\n", res).empty());
        CHECK(res.version == 11);
    }
    SECTION("a reused response forgets the last head") {
        REQUIRE(http::parse_response_head("HTTP/1.1 100 Continue\r\nX-A: 1\r\n\r\n", res).empty());
        REQUIRE(http::parse_response_head("HTTP/1.1 201 Created\r\nX-B: 2\r\n\r\n", res).empty());
        CHECK(res.status == 201);
        CHECK(lines_of(res.fields) == Lines{{"X-B", "2"}});
    }
}

TEST_CASE("parse_response_head refuses what is not one valid response head") {
    const std::vector<std::pair<std::string, std::string_view>> cases = {
        {"", "invalid response head"},
        {"HTTP/1.1 200 OK\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX: 1\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", "invalid response head"},  // two heads
        {"HTTP/1.1 200 OK\r\n\r\nX: 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200\r\n\r\n", "invalid response head"},  // no space after the code (as Beast)
        {"HTTP/1.1  200 OK\r\n\r\n", "invalid response head"},
        {"http/1.1 200 OK\r\n\r\n", "invalid response head"},
        {"HTTP/11 200 OK\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 20 OK\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 2000 OK\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 2x0 OK\r\n\r\n", "invalid response head"},
        {"ICY 200 OK\r\n\r\n", "invalid response head"},
        {"HTTP/2.0 200 OK\r\n\r\n", "other than 1.x"},
        {"HTTP/0.9 200 OK\r\n\r\n", "other than 1.x"},
        {"HTTP/1.1 099 Early\r\n\r\n", "invalid status code"},
        {"HTTP/1.1 600 Late\r\n\r\n", "invalid status code"},
        {"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX@Y: 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX(Y): 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX Y: 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX-\xc3\xa9: 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\n X: folded\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX : 1\r\n\r\n", "invalid response head"},
        {"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "malformed response head"},
        {"HTTP/1.1 200 OK\r\nX: a\nb\r\n\r\n", "invalid response head"},  // a bare LF
        {"HTTP/1.1 200 O\x01K\r\n\r\n", "malformed response head"},
        {std::string("HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n", 27), "malformed response head"},
        {"HTTP/1.1 200 OK\r\nX: \x7f\r\n\r\n", "malformed response head"},
    };
    for (const auto& [head, problem] : cases) {
        INFO(head);
        http::UpstreamResponse res;
        const auto got = http::parse_response_head(head, res);
        CHECK(got.find(problem) != std::string_view::npos);
    }
}

// Generated heads, read as before (check_request_head, then Beast's parser) and by ours: the
// same verdict, status, version, reason, fields and keep-alive (where Beast read a valid 1.x).
TEST_CASE("parse_response_head checks every byte of a value and a reason, at every place in a word") {
    // Values are checked eight bytes at a time: each byte value at each offset of a value long
    // enough for whole words and a tail, in a field and in the reason phrase. Allowed: tab,
    // space to '~', and obs-text (0x80-0xff); refused: the other control bytes and DEL.
    // Every length from 1 to 25: shorter than a word, whole words, and tails that the last
    // word (read again where it overlaps) covers.
    for (int byte = 0; byte < 256; ++byte) {
        if (byte == '\r' || byte == '\n') continue;  // line ends: their own checks
        const bool allowed = byte == '\t' || (byte >= 0x20 && byte != 0x7f);
        for (std::size_t size = 1; size <= 25; ++size)
        for (std::size_t at = 0; at < size; ++at) {
            std::string value(size, 'v');
            value[at] = static_cast<char>(byte);
            if (at == 0 || at == size - 1) {
                if (byte == ' ' || byte == '\t') continue;  // trimmed: not part of the value
            }
            CAPTURE(byte, size, at);
            http::UpstreamResponse res;
            const std::string head = "HTTP/1.1 200 OK\r\nX-Value: " + value + "\r\nContent-Length: 0\r\n\r\n";
            CHECK(parse_response_head(head, res).empty() == allowed);
            if (allowed) CHECK(lines_of(res.fields) == Lines{{"X-Value", value}, {"Content-Length", "0"}});
            const std::string reason = "HTTP/1.1 200 " + value + "\r\nContent-Length: 0\r\n\r\n";
            CHECK(parse_response_head(reason, res).empty() == allowed);
            if (allowed) CHECK(res.reason == value);
        }
    }
}

TEST_CASE("parse_response_head agrees with Beast's parser over generated heads") {
    const std::vector<std::string> starts = {
        "HTTP/1.1 200 OK",        "HTTP/1.0 404 Not Found", "HTTP/1.1 204 ",       "HTTP/1.1 200",
        "HTTP/2.0 200 OK",        "HTTP/1.1 99 X",          "HTTP/1.1 600 X",      "HTTP/1.1 2000 OK",
        "HTTP/1.1  200 OK",       "http/1.1 200 OK",        "HTTP/1.1 200 OK\xff", "HTTP/1.1 abc OK",
        "HTTP/11 200 OK",         "HTTP/1.1 101 Switching", "HTTP/1.0 304 ",       "HTTP/1.1 100 Continue",
        "HTTP/1.1 200 a:b c  d ", "HTTP/1.1 503 \t",
    };
    const std::vector<std::string> fields = {
        "Content-Length: 3",   "Connection: close",    "Connection: keep-alive", "Connection: Keep-Alive, Upgrade",
        "X-Empty:",            "X-Spaces:   a b  ",    "X-Tab:\tv\t",            "Set-Cookie: a=b; Path=/",
        ":noname",             "NoColon",              "X@Bad: 1",               "X Bad: 1",
        "X-Obs: \x80\xff",     "X-(: 1",               "Transfer-Encoding: chunked", "Via: 1.0 a",
        "Upgrade: websocket",  "x-lower: v",           "X-Colons: a:b:c",        "X-Trail: v \t ",
        "Content-Length:",     "Date: Thu, 26 Nov 2026 15:00:00 GMT", "!#$%&'*+-.^_`|~09azAZ: token",
        "X-Q: \"quoted, value\"",
    };
    std::mt19937 rng(26);
    std::size_t accepted = 0;
    for (int round = 0; round < 20000; ++round) {
        std::string head = starts[rng() % starts.size()] + "\r\n";
        const std::size_t n = rng() % 7;
        for (std::size_t i = 0; i < n; ++i) head += fields[rng() % fields.size()] + "\r\n";
        head += "\r\n";
        INFO(head);

        bhttp::response_parser<bhttp::empty_body> parser;
        boost::beast::error_code ec;
        parser.put(boost::asio::buffer(head.data(), head.size()), ec);
        const auto& b = parser.get();
        // What the response's reading ends in: accepted, framing checked (a Content-Length
        // Beast's parser refused is refused by check_response_framing now: 502 either way).
        // Before, read_upstream_head refused what check_request_head refuses, then asked Beast.
        const bool beast_ok = http::check_request_head(head).empty() && !ec && parser.is_header_done() && b.version() / 10 == 1 && b.result_int() >= 100 &&
                              b.result_int() <= 599 &&
                              http::check_response_framing(b.base(), b.version(), b.result_int(), false).ok();

        http::UpstreamResponse ours;
        http::Framing framing;
        const bool ours_ok = http::parse_response_head(head, ours).empty() &&
                             (framing = http::check_response_framing(ours.fields, ours.version, ours.status, false)).ok();
        REQUIRE(ours_ok == beast_ok);
        if (!ours_ok) continue;
        ++accepted;
        CHECK(ours.status == b.result_int());
        CHECK(ours.version == (b.version() == 10 ? 10u : 11u));
        // Beast's reason() is the standard phrase when none came; write_response_head does the same.
        CHECK((ours.reason.empty() ? http::sv(bhttp::obsolete_reason(b.result())) : ours.reason) == http::sv(b.reason()));
        // Beast's list puts a field after the earlier ones of its name; ours keeps the order
        // received. Fields of one name keep their order in both.
        using Named = std::tuple<std::string, std::string, bhttp::field>;
        auto by_name = [](std::vector<Named> v) {
            for (auto& [name, value, id] : v)
                for (auto& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
            std::stable_sort(v.begin(), v.end(), [](const Named& a, const Named& b) { return std::get<0>(a) < std::get<0>(b); });
            return v;
        };
        std::vector<Named> theirs, mine;
        for (const auto& f : b)
            theirs.emplace_back(std::string(http::sv(f.name_string())), std::string(http::sv(f.value())), f.name());
        for (const auto& f : ours.fields)
            mine.emplace_back(std::string(f.name_string()), std::string(f.value()), f.name());
        CHECK(by_name(mine) == by_name(theirs));
        // The parser's keep-alive: every Connection field read, and false for a body that
        // ends with the connection (sluice checks that from the framing).
        const bool contradictory = b.version() == 10 && ours.keep_alive != parser.keep_alive() &&
                                   framing.body != http::Framing::Body::until_close;
        if (!contradictory)
            CHECK((ours.keep_alive && framing.body != http::Framing::Body::until_close) == parser.keep_alive());
    }
    CHECK(accepted > 2000);
}

// The names of a browser's request, of an upstream's response and sluice's own all stay
// remembered together: none of them pushes another out (found again without a look-up).
TEST_CASE("field_id remembers a browser's, an upstream's and sluice's names at once") {
    const std::vector<std::string> names = {
        "Host", "User-Agent", "Accept", "Accept-Language", "Accept-Encoding", "Referer", "Cookie",
        "Upgrade-Insecure-Requests", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User",
        "Cache-Control", "Connection", "Origin", "Content-Type", "Content-Length", "Authorization", "Pragma",
        "sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform", "Priority", "If-None-Match", "If-Modified-Since",
        "Server", "Date", "ETag", "Last-Modified", "Vary", "Set-Cookie", "Transfer-Encoding", "Keep-Alive",
        "X-Forwarded-For", "X-Forwarded-Proto", "Via", "X-Request-Id", "RateLimit-Policy", "RateLimit",
        "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"};
    for (const auto& name : names) http::field_id(name);
    const auto before = http::field_ids_looked_up();
    for (int round = 0; round < 3; ++round)
        for (const auto& name : names) http::field_id(name);
    CHECK(http::field_ids_looked_up() == before);
}

TEST_CASE("field_id gives Beast's code for every name, remembered or not") {
    auto beast = [](std::string_view name) {
        return bhttp::string_to_field(boost::beast::string_view(name.data(), name.size()));
    };
    std::vector<std::string> names = {"Content-Length", "content-length", "CONTENT-LENGTH", "Connection",
                                      "Server", "Date", "ETag", "Via", "X-Custom", "RateLimit-Policy",
                                      "RateLimit", "Retry-After", "a", "ab", "abc", "abcd", "Content-Lengtg",
                                      "Content-Lxngth", "Cxntent-Length", std::string(27, 'x'),
                                      std::string(28, 'x'), "Access-Control-Allow-Credentials",
                                      "Access-Control-Allow-Credential"};
    // Names of every length up to 40 that share their length, first, middle and last bytes
    // but differ elsewhere; names that share their first and last eight bytes (and so their
    // place) but differ between; and random ones.
    std::mt19937 rng(24);
    for (std::size_t n = 1; n <= 40; ++n) {
        for (int k = 0; k < 8; ++k) {
            std::string s(n, 'a');
            for (std::size_t i = 0; i < n; ++i)
                if (i != 0 && i != n / 2 && i != n - 1) s[i] = static_cast<char>('a' + rng() % 26);
            names.push_back(s);
        }
    }
    for (std::size_t n = 17; n <= 27; ++n) {
        for (int k = 0; k < 4; ++k) {
            std::string s(n, 'a');
            for (std::size_t i = 8; i + 8 < n; ++i) s[i] = static_cast<char>('a' + rng() % 26);
            names.push_back(s);
        }
    }
    for (int k = 0; k < 2000; ++k) {
        std::string s(1 + rng() % 30, 'a');
        for (auto& c : s) c = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-"[rng() % 53];
        names.push_back(s);
    }
    // Every known name, in both cases.
    for (int f = 1; f <= static_cast<int>(bhttp::field::xref); ++f) {
        const auto spelled = bhttp::to_string(static_cast<bhttp::field>(f));
        std::string name(spelled.data(), spelled.size());
        names.push_back(name);
        for (auto& c : name) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
        names.push_back(name);
    }
    for (int round = 0; round < 3; ++round) {
        std::shuffle(names.begin(), names.end(), rng);
        for (const auto& name : names) {
            CAPTURE(name, round);
            CHECK(http::field_id(name) == beast(name));
            CHECK(http::field_id(name) == beast(name));  // just remembered
        }
    }
    CHECK(http::field_id("") == bhttp::field::unknown);
    http::FieldList list;
    list.insert("content-type", "text/plain");
    list.insert("X-Mine", "1");
    CHECK(list.begin()->name() == bhttp::field::content_type);
    CHECK(std::next(list.begin())->name() == bhttp::field::unknown);
}

TEST_CASE("Connection: close also removes a field named Close, as any field Connection names") {
    http::UpstreamResponse res;
    REQUIRE(http::parse_response_head("HTTP/1.1 200 OK\r\nConnection: close\r\nClose: x\r\nX-Keep: 1\r\n"
                                      "Connection: Keep-Alive, X-Hop\r\nX-Hop: 2\r\nKeep-Alive: timeout=5\r\n\r\n",
                                      res)
                .empty());
    http::strip_hop_by_hop(res.fields);
    CHECK(lines_of(res.fields) == Lines{{"X-Keep", "1"}});
}

TEST_CASE("FieldList keeps every name and value in place while fields come and go") {
    http::FieldList list;
    std::vector<std::string> expected;
    for (int i = 0; i < 500; ++i) {
        // Values of every size, some larger than a block: earlier views must stay valid.
        const std::string value(static_cast<std::size_t>(i * 7 % 3000), static_cast<char>('a' + i % 26));
        list.insert("X-F" + std::to_string(i), value);
        expected.push_back(value);
    }
    REQUIRE(list.size() == 500);
    std::size_t i = 0;
    for (const auto& f : list) {
        CHECK(f.name_string() == "X-F" + std::to_string(i));
        CHECK(f.value() == expected[i]);
        ++i;
    }
    http::erase_all(list, "x-f7");
    CHECK(list.size() == 499);
    http::replace_field(list, bhttp::field::content_length, "12");
    CHECK(list.size() == 500);
    CHECK((list.end() - 1)->name_string() == "Content-Length");
    CHECK((list.end() - 1)->name() == bhttp::field::content_length);
    http::erase_all(list, bhttp::field::content_length);
    CHECK(list.size() == 499);
    list.clear();
    CHECK(list.empty());
    list.insert(bhttp::field::via, "1.1 sluice");
    CHECK(lines_of(list) == Lines{{"Via", "1.1 sluice"}});
}

TEST_CASE("erase_all and replace_field by name remove every field of that name, in any case, and no other") {
    auto fill = [](auto& fields) {
        fields.insert("Content-Type", "a");
        fields.insert("RateLimit", "b");
        fields.insert("content-type", "c");
        fields.insert("ratelimit", "d");
        fields.insert("RateLimit-Policy", "e");
        fields.insert("X-Other", "f");
    };
    auto names = [](const auto& fields) {
        std::vector<std::string> out;
        for (const auto& f : fields) out.emplace_back(http::sv(f.name_string()));
        return out;
    };
    using Names = std::vector<std::string>;
    http::FieldList list;
    bhttp::fields beast;
    fill(list);
    fill(beast);
    SECTION("a name Beast knows, spelled in another case") {
        http::erase_all(list, "CONTENT-TYPE");
        http::erase_all(beast, "CONTENT-TYPE");
        const Names left{"RateLimit", "ratelimit", "RateLimit-Policy", "X-Other"};
        CHECK(names(list) == left);
        CHECK(names(beast) == left);
    }
    SECTION("a name Beast does not know") {
        http::replace_field(list, "RATELIMIT", "z");
        http::replace_field(beast, "RATELIMIT", "z");
        const Names left{"Content-Type", "content-type", "RateLimit-Policy", "X-Other", "RATELIMIT"};
        CHECK(names(list) == left);
        CHECK(names(beast) == left);
    }
}

TEST_CASE("parse_response_head refuses more field lines than max_fields") {
    http::UpstreamResponse res;
    std::string head = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 3; ++i) head += "X-A: " + std::to_string(i) + "\r\n";
    head += "\r\n";
    CHECK(http::parse_response_head(head, res, 3).empty());
    CHECK(res.fields.size() == 3);
    CHECK(http::parse_response_head(head, res, 2) == "upstream response has too many header fields");
    CHECK(http::parse_response_head("HTTP/1.1 204 No Content\r\n\r\n", res, 0).empty());
}
