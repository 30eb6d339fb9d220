#include <cstdio>

#include <catch2/catch.hpp>

#include "http/problem.hpp"
#include "observe/access_log.hpp"
#include "observe/json_text.hpp"

using namespace sluice;

TEST_CASE("access line in the text form of INTERFACE.md") {
    observe::AccessRecord r;
    r.client_ip = "127.0.0.1";
    r.method = "GET";
    r.target = "/login";
    r.status = 429;
    r.bytes_sent = 162;
    r.route = "login";
    r.limit = "burst";
    r.decision = "limited";
    r.remaining = 0;
    r.total_ms = 0.42;
    CHECK(observe::format_access_text(r) ==
          "127.0.0.1 \"GET /login HTTP/1.1\" 429 162 route=login limit=burst decision=limited remaining=0 "
          "upstream_ms=- total_ms=0.4");

    observe::AccessRecord n;
    n.client_ip = "::1";
    n.method = "POST";
    n.target = "/x";
    n.version = 10;
    n.status = 404;
    n.upstream_ms = 1.25;
    CHECK(observe::format_access_text(n) ==
          "::1 \"POST /x HTTP/1.0\" 404 0 route=- limit=- decision=unlimited remaining=- upstream_ms=1.2 total_ms=0.0");
}

TEST_CASE("access line in json has the same fields") {
    observe::AccessRecord r;
    r.client_ip = "127.0.0.1";
    r.method = "GET";
    r.target = "/a\"b";
    r.status = 200;
    r.route = "api";
    CHECK(observe::format_access_json(r) ==
          R"({"client_ip":"127.0.0.1","request":"GET /a\"b HTTP/1.1","status":200,"bytes":0,"route":"api",)"
          R"("limit":null,"decision":"unlimited","remaining":null,"upstream_ms":null,"total_ms":0.0})");
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

TEST_CASE("json_string: every byte below 0x20 and 0x7f escaped, everything else as itself") {
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
            } else {
                want = std::string(1, ch);
            }
        }
        INFO("byte " << c);
        CHECK(observe::json_string(std::string("ab") + ch + "cd") == "\"ab" + want + "cd\"");
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
