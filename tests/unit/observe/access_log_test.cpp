#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <ctime>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "http/problem.hpp"
#include "observe/access_log.hpp"
#include "observe/json_text.hpp"
#include "observe/log_time.hpp"

using namespace sluice;

namespace {
const config::AccessFormat classic;
constexpr std::string_view t = "2026-11-25T19:40:01.123Z";

config::AccessFormat pattern(std::string_view text) {
    auto parsed = config::parse_access_pattern(text);
    REQUIRE(std::holds_alternative<config::AccessFormat>(parsed));
    return std::get<config::AccessFormat>(parsed);
}
}  // namespace

TEST_CASE("access line in the text form of INTERFACE.md, time first, the added fields last") {
    observe::AccessRecord r;
    r.client = "203.0.113.7";
    r.peer = "127.0.0.1";
    r.method = "GET";
    r.target = "/login";
    r.status = 429;
    r.bytes_sent = 162;
    r.route = "login";
    r.limit = "burst";
    r.decision = observe::AccessDecision::limited;
    r.remaining = 0;
    r.total_ms = 0.42;
    r.request_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    r.host = "example.com";
    r.user_agent = "curl/7.88.1";
    CHECK(observe::format_access_text(r, classic, t) ==
          "2026-11-25T19:40:01.123Z 203.0.113.7 \"GET /login HTTP/1.1\" 429 162 route=login limit=burst "
          "decision=limited remaining=0 upstream_ms=- total_ms=0.4 peer=127.0.0.1 "
          "request_id=4bf92f3577b34da6a3ce929d0e0e4736 host=example.com upstream=- user_agent=\"curl/7.88.1\"");

    observe::AccessRecord n;
    n.client = n.peer = "::1";
    n.method = "POST";
    n.target = "/x";
    n.version = 10;
    n.status = 404;
    n.upstream_ms = 1.25;
    n.upstream = "127.0.0.1:8081";
    CHECK(observe::format_access_text(n, classic, t) ==
          "2026-11-25T19:40:01.123Z ::1 \"POST /x HTTP/1.0\" 404 0 route=- limit=- decision=unlimited remaining=- "
          "upstream_ms=1.2 total_ms=0.0 peer=::1 request_id=- host=- upstream=127.0.0.1:8081 user_agent=\"-\"");
}

TEST_CASE("access line: the limits a request was not counted by (keyed on a header it lacks)") {
    observe::AccessRecord r;
    r.client = r.peer = "127.0.0.1";
    r.method = "GET";
    r.target = "/api";
    r.decision = observe::AccessDecision::allowed;
    r.skipped = "daily,in_flight";
    const auto line = observe::format_access_text(r, classic, t);
    CHECK(line.find(" total_ms=0.0 skipped=daily,in_flight peer=127.0.0.1 ") != std::string::npos);
    CHECK(observe::format_access_json(r, classic, t).find(R"("skipped":"daily,in_flight")") != std::string::npos);
    r.skipped.clear();
    CHECK(observe::format_access_text(r, classic, t).find("skipped") == std::string::npos);
}

TEST_CASE("access line: a value cannot end its quotes or forge a line") {
    observe::AccessRecord r;
    r.client = r.peer = "127.0.0.1";
    r.method = "GET";
    r.target = "/";
    r.user_agent = "evil\" decision=allowed\n2026 x \\ caf\xc3\xa9";
    const auto line = observe::format_access_text(r, classic, t);
    CHECK(line.ends_with(R"(user_agent="evil\x22 decision=allowed\x0A2026 x \x5C caf\xC3\xA9")"));
    CHECK(line.find('\n') == std::string::npos);
}

TEST_CASE("access line in json has the same fields, time first") {
    observe::AccessRecord r;
    r.client = "127.0.0.1";
    r.peer = "127.0.0.1";
    r.method = "GET";
    r.target = "/a\"b";
    r.status = 200;
    r.route = "api";
    r.request_id = "abc";
    CHECK(observe::format_access_json(r, classic, t) ==
          R"({"time":"2026-11-25T19:40:01.123Z","client":"127.0.0.1","request":"GET /a\"b HTTP/1.1","status":200,)"
          R"("bytes":0,"route":"api","limit":null,"decision":"unlimited","remaining":null,"upstream_ms":null,)"
          R"("total_ms":0.0,"peer":"127.0.0.1","request_id":"abc","host":null,"upstream":null,"user_agent":null})");
}

TEST_CASE("access line with an operator's fields or pattern") {
    observe::AccessRecord r;
    r.client = "203.0.113.7";
    r.peer = "10.0.0.2";
    r.method = "GET";
    r.target = "/api/x?y=1";
    r.status = 200;
    r.bytes_sent = 12;
    r.decision = observe::AccessDecision::allowed;
    r.upstream_ms = 2.0;
    r.total_ms = 2.5;
    r.user_agent = "Mozilla/5.0 (X11)";

    config::AccessFormat fields;
    fields.kind = config::AccessFormat::Kind::fields;
    fields.fields = {config::AccessField::client, config::AccessField::request, config::AccessField::status,
                     config::AccessField::user_agent, config::AccessField::wait_ms};
    CHECK(observe::format_access_text(r, fields, t) ==
          "2026-11-25T19:40:01.123Z client=203.0.113.7 request=\"GET /api/x?y=1 HTTP/1.1\" status=200 "
          "user_agent=\"Mozilla/5.0 (X11)\" wait_ms=-");
    CHECK(observe::format_access_json(r, fields, t) ==
          R"J({"time":"2026-11-25T19:40:01.123Z","client":"203.0.113.7","request":"GET /api/x?y=1 HTTP/1.1",)J"
          R"J("status":200,"user_agent":"Mozilla/5.0 (X11)","wait_ms":null})J");

    const auto nginx_like = pattern(R"J($client - $peer "$method ${uri}" $status $bytes "$user_agent" rt=$total_ms $$)J");
    CHECK(observe::format_access_text(r, nginx_like, t) ==
          "2026-11-25T19:40:01.123Z 203.0.113.7 - 10.0.0.2 \"GET /api/x?y=1\" 200 12 \"Mozilla/5.0 (X11)\" rt=2.5 $");
    CHECK(observe::format_access_json(r, nginx_like, t) ==
          R"J({"time":"2026-11-25T19:40:01.123Z","client":"203.0.113.7","peer":"10.0.0.2","method":"GET",)J"
          R"J("uri":"/api/x?y=1","status":200,"bytes":12,"user_agent":"Mozilla/5.0 (X11)","total_ms":2.5})J");
}

TEST_CASE("access patterns: what is refused, and where") {
    struct Case {
        std::string_view pattern;
        std::size_t offset;
    };
    for (const auto& c : {Case{"$nope", 0}, Case{"a $", 2}, Case{"x ${client", 2}, Case{"${}", 0},
                          Case{"no fields at all", 0}, Case{"$client $stauts", 8}, Case{"$client\n$status", 7},
                          Case{"$client\t$status", 7}}) {
        INFO(c.pattern);
        auto parsed = config::parse_access_pattern(c.pattern);
        REQUIRE(std::holds_alternative<config::AccessPatternError>(parsed));
        CHECK(std::get<config::AccessPatternError>(parsed).offset == c.offset);
    }
    // $name ends at the first character that cannot be in a name.
    const auto p = pattern("[$status]$bytes.");
    REQUIRE(p.pieces.size() == 3);
    CHECK(p.pieces[0].literal == "[");
    CHECK(p.pieces[1].literal == "]");
    CHECK(p.pieces[2].literal == ".");
    CHECK_FALSE(p.pieces[2].field);
}

TEST_CASE("log times: RFC 3339 with milliseconds, UTC or local with its offset") {
    using namespace std::chrono;
    const system_clock::time_point at{milliseconds(1795635601123)};  // 2026-11-25T19:40:01.123Z
    CHECK(observe::log_time(at, false) == "2026-11-25T19:40:01.123Z");
    CHECK(observe::log_time(at + milliseconds(877), false) == "2026-11-25T19:40:02.000Z");
    CHECK(observe::log_time(system_clock::time_point{milliseconds(5)}, false) == "1970-01-01T00:00:00.005Z");
    // Local: the zone's offset (TZ set for this test, then put back).
    const char* before = std::getenv("TZ");
    const std::string saved = before ? before : "";
    setenv("TZ", "Asia/Kolkata", 1);
    tzset();
    CHECK(observe::log_time(at, true) == "2026-11-26T01:10:01.123+05:30");
    setenv("TZ", "America/New_York", 1);
    tzset();
    CHECK(observe::log_time(at + seconds(1), true) == "2026-11-25T14:40:02.123-05:00");
    if (before) setenv("TZ", saved.c_str(), 1); else unsetenv("TZ");
    tzset();
}

TEST_CASE("json_string escapes") {
    CHECK(observe::json_string("a\"b\\c\n\x01") == R"("a\"b\\c\n\u0001")");
    CHECK(observe::json_string("") == R"("")");
    CHECK(observe::json_string("plain text, no escapes") == R"("plain text, no escapes")");
    // Escapes at either end, back to back, and every control character kind.
    CHECK(observe::json_string("\"x\"") == R"("\"x\"")");
    CHECK(observe::json_string("\\\\") == R"("\\\\")");
    CHECK(observe::json_string("\r\t\x7f\x1f.") == R"("\r\t\u007f\u001f.")");
    CHECK(observe::json_string(std::string_view("a\0b", 3)) == R"("a\u0000b")");
    // Bytes above 0x7f (UTF-8) pass unchanged.
    CHECK(observe::json_string("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
}

TEST_CASE("json_string: every byte below 0x20 and 0x7f escaped, a lone byte above 0x7f is U+FFFD, the rest as itself") {
    for (int c = 0; c < 256; ++c) {
        const char ch = static_cast<char>(c);
        std::string want;
        switch (c) {
        case '"': want = "\\\""; break;
        case '\\': want = "\\\\"; break;
        case '\n': want = "\\n"; break;
        case '\r': want = "\\r"; break;
        case '\t': want = "\\t"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                want = buf;
            } else if (c > 0x7f) {
                want = "\\ufffd";  // alone, never well-formed UTF-8
            } else {
                want = std::string(1, ch);
            }
        }
        INFO("byte " << c);
        CHECK(observe::json_string(std::string("ab") + ch + "cd") == "\"ab" + want + "cd\"");
    }
}

TEST_CASE("json_string: well-formed UTF-8 passes, anything else becomes U+FFFD (RFC 3629)") {
    struct Case {
        std::string in, out;
    };
    const Case cases[] = {
        {"\xc3\xa9", "\xc3\xa9"},                    // é
        {"\xe2\x82\xac", "\xe2\x82\xac"},            // €
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},    // an emoji
        {"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},    // U+10FFFF
        {"\xe9t\xe9", "\\ufffdt\\ufffd"},             // Latin-1 "été"
        {"\xc3", "\\ufffd"},                         // cut short
        {"\xe2\x82", "\\ufffd\\ufffd"},               // cut short: each byte alone
        {"\xc0\xaf", "\\ufffd\\ufffd"},               // overlong '/'
        {"\xe0\x80\xaf", "\\ufffd\\ufffd\\ufffd"},     // overlong
        {"\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd"},     // a surrogate
        {"\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd"},  // above U+10FFFF
        {"\xf5\x80", "\\ufffd\\ufffd"},
        {"a\x80\"b", "a\\ufffd\\\"b"},
    };
    for (const auto& c : cases) {
        INFO(c.in);
        CHECK(observe::json_string(c.in) == "\"" + c.out + "\"");
    }
}

TEST_CASE("append_json_string appends to what is there") {
    std::string out = "{\"a\":";
    observe::append_json_string(out, "x\ny");
    observe::append_json_string(out, "");
    CHECK(out == R"({"a":"x\ny""")");
}

TEST_CASE("problem_json") {
    CHECK(http::problem_json(404, "no route") ==
          "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,\"detail\":\"no route\"}\n");
    CHECK(http::problem_json(429, "limited", {{"route", "login"}, {"limit", "burst"}}) ==
          "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"detail\":\"limited\","
          "\"route\":\"login\",\"limit\":\"burst\"}\n");
}

TEST_CASE("access line milliseconds: one decimal, rounded as printf's %.1f rounds") {
    std::mt19937_64 rng(24);
    std::vector<double> values{0.0, -0.0, 0.05, 0.15, 0.25, 0.35, 0.45, 1.25, 2.5, 0.95, 9.95, 99.95, 999.95,
                               1e-9, 0.049999999, 1234567.85, 1e15, 1e30, 1e300, -3.25,
                               std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
    std::uniform_real_distribution<double> ms(0, 100000);
    for (int i = 0; i < 20000; ++i) values.push_back(ms(rng));
    for (int i = 0; i < 2000; ++i) values.push_back(static_cast<double>(rng() % 100000) / 20.0);  // x.x5 and x.x0
    for (const double v : values) {
        std::string ours;
        sluice::observe::append_ms(ours, v);
        char expected[400];
        std::snprintf(expected, sizeof expected, "%.1f", v);
        INFO(v);
        CHECK(ours == expected);
    }
}
