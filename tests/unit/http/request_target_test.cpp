#include <catch2/catch.hpp>

#include <string>

#include "http/request_target.hpp"

using sluice::http::normalize_path;
using sluice::http::parse_request_target;
using sluice::http::validate_host;

namespace {
std::string norm(std::string_view raw) {
    std::string_view problem;
    auto out = normalize_path(raw, problem);
    return problem.empty() ? out : "<" + std::string(problem) + ">";
}
std::string host(std::string_view raw) {
    std::string_view problem;
    auto out = validate_host(raw, problem);
    CHECK(sluice::http::host_problem(raw) == problem);  // the check alone agrees
    return problem.empty() ? out : "<invalid>";
}
}  // namespace

TEST_CASE("normalize_path: every spelling of a path reads as one") {
    struct Case {
        std::string raw, want;
    };
    const Case cases[] = {
        {"/", "/"},
        {"/limited/y", "/limited/y"},
        {"/x/../limited/y", "/limited/y"},
        {"//limited/y", "/limited/y"},
        {"/%6cimited/y", "/limited/y"},
        {"/%6Cimited/y", "/limited/y"},
        {"/x/%2e%2E/limited/y", "/limited/y"},
        {"/x/.%2e/limited/y", "/limited/y"},
        {"/a/./b/../c", "/a/c"},
        {"/a/b/..", "/a/"},
        {"/a/b/.", "/a/b/"},
        {"/a/b/", "/a/b/"},
        {"/a//b///c//", "/a/b/c/"},
        {"/a/%2f/b", "/a/%2F/b"},
        {"/a%2Fb", "/a%2Fb"},
        {"/%7e%41%5f", "/~A_"},
        {"/%00", "/%00"},
        {"/%e2%82%ac", "/%E2%82%AC"},
        // A byte a path may not hold as it is reads as its escape: one spelling of each.
        {"/caf\xc3\xa9", "/caf%C3%A9"},
        {"/caf\xc3%a9", "/caf%C3%A9"},
        {"/caf%C3\xa9/x", "/caf%C3%A9/x"},
        {"/a\"b<c>d^e`f{g|h}i[j]", "/a%22b%3Cc%3Ed%5Ee%60f%7Bg%7Ch%7Di%5Bj%5D"},
        {"/%22%7b", "/%22%7B"},
        // Reserved characters keep their spelling: an upstream may read `;` and `%3B` apart.
        {"/a!b;c=d", "/a!b;c=d"},
        {"/a%21b%3Bc", "/a%21b%3Bc"},
        {"/..a/b..", "/..a/b.."},
        {"/...", "/..."},
        {"/.", "/"},
        {"/./", "/"},
        {"/a/..", "/"},
        {"/a/../..", "<request target path goes above the root>"},
        {"/..", "<request target path goes above the root>"},
        {"/../x", "<request target path goes above the root>"},
        {"/%2e%2e/x", "<request target path goes above the root>"},
        {"/%", "<invalid percent-encoding in request target>"},
        {"/%4", "<invalid percent-encoding in request target>"},
        {"/%zz", "<invalid percent-encoding in request target>"},
        {"/%%41", "<invalid percent-encoding in request target>"},
        {"/a b", "<invalid character in request target>"},
        {"/a\\..\\b", "<invalid character in request target>"},
        {"/a#b", "<invalid character in request target>"},
        {std::string("/a\0b", 4), "<invalid character in request target>"},
        {"x", "<request target path must start with />"},
    };
    for (const auto& c : cases) {
        INFO(c.raw);
        CHECK(norm(c.raw) == c.want);
        if (c.want.front() == '/') CHECK(norm(c.want) == c.want);  // idempotent
    }
}

TEST_CASE("normalize_path stays linear on long inputs") {
    std::string deep = "/";
    for (int i = 0; i < 4000; ++i) deep += "a/";
    for (int i = 0; i < 4000; ++i) deep += "../";
    CHECK(norm(deep) == "/");
    std::string slashes(16384, '/');
    CHECK(norm(slashes) == "/");
    CHECK(norm("/" + std::string(16384, 'x')).size() == 16385);
}

TEST_CASE("validate_host") {
    struct Case {
        std::string raw, want;
    };
    const Case cases[] = {
        {"a.test", "a.test"},
        {"A.Test", "a.test"},
        {"a.test:8080", "a.test:8080"},
        {"a.test:", "a.test:"},
        {"a.test:65535", "a.test:65535"},
        {"my_host-1.example", "my_host-1.example"},
        {"127.0.0.1:80", "127.0.0.1:80"},
        {"[::1]", "[::1]"},
        {"[::1]:8080", "[::1]:8080"},
        {"[2001:DB8::1]", "[2001:db8::1]"},
        {"", "<invalid>"},
        {":80", "<invalid>"},
        {"a.test:99999", "<invalid>"},
        {"a.test:65536", "<invalid>"},
        {"a.test:8a", "<invalid>"},
        {"a.test::", "<invalid>"},
        {"a.test?q=1", "<invalid>"},
        {"a.test/x", "<invalid>"},
        {"a.test#x", "<invalid>"},
        {"user@a.test", "<invalid>"},
        {"a test", "<invalid>"},
        {"a,b", "<invalid>"},
        {"a..test", "<invalid>"},
        {"[::1", "<invalid>"},
        {"[::g]", "<invalid>"},
        {"[]", "<invalid>"},
        {"[::1]x", "<invalid>"},
        {"::1", "<invalid>"},
        {std::string(256, 'a'), "<invalid>"},
    };
    for (const auto& c : cases) {
        INFO(c.raw);
        CHECK(host(c.raw) == c.want);
    }
}

TEST_CASE("parse_request_target") {
    SECTION("origin-form keeps the query as it came") {
        auto t = parse_request_target("GET", "/x/../a?q=%2e&x=/../");
        REQUIRE(t.ok());
        CHECK(t.path == "/a");
        CHECK(t.query == "q=%2e&x=/../");
        CHECK(t.origin_form() == "/a?q=%2e&x=/../");
        CHECK(t.authority.empty());
    }
    SECTION("absolute-form, any case of http or https") {
        auto t = parse_request_target("GET", "http://a.test?q=1");
        REQUIRE(t.ok());
        CHECK(t.authority == "a.test");
        CHECK(t.origin_form() == "/?q=1");
        t = parse_request_target("GET", "HTTP://A.test:8080/x");
        REQUIRE(t.ok());
        CHECK(t.authority == "a.test:8080");
        CHECK(t.origin_form() == "/x");
        t = parse_request_target("GET", "https://[::1]:8443/%6cimited");
        REQUIRE(t.ok());
        CHECK(t.authority == "[::1]:8443");
        CHECK(t.path == "/limited");
    }
    SECTION("refused") {
        for (const char* bad : {"http://u:p@a.test/", "http://a.test:99999/", "http://a.test#frag", "ftp://a.test/",
                                "a.test:443", "http://", "http:///x", "/a#b", "/a?b c", "*", "x"}) {
            INFO(bad);
            CHECK_FALSE(parse_request_target("GET", bad).ok());
        }
        // CONNECT in any form: an upstream's 2xx to it is a tunnel, never a pooled response.
        for (const char* target : {"a.test:443", "/x", "http://a.test/x", "*"}) {
            INFO(target);
            CHECK(parse_request_target("CONNECT", target).problem == "CONNECT is not supported");
            CHECK(parse_request_target("connect", target).problem == "CONNECT is not supported");
        }
        CHECK(parse_request_target("CONNECTS", "/x").ok());  // another method
        // Methods of upper-case letters, '-' and '_' only (as nginx): an upstream may read
        // `post` as POST where routes and `method` keys would not.
        for (const char* method : {"post", "Get", "GET1", "G.T", "GET/", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG"}) {
            INFO(method);
            CHECK_FALSE(parse_request_target(method, "/x").ok());
        }
        for (const char* method : {"GET", "PROPFIND", "M-SEARCH", "VERSION-CONTROL", "X_Y", "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEF"}) {
            INFO(method);
            CHECK(parse_request_target(method, "/x").ok());
        }
    }
    SECTION("asterisk-form for OPTIONS") {
        auto t = parse_request_target("OPTIONS", "*");
        REQUIRE(t.ok());
        CHECK(t.origin_form() == "*");
    }
}

TEST_CASE("validate_host names the first problem in the host, reading left to right") {
    const auto problem = [](std::string_view raw) { return std::string(sluice::http::host_problem(raw)); };
    CHECK(problem("a..b@") == "invalid Host: empty label");
    CHECK(problem("a@b..c") == "invalid Host: character not allowed in a host name");
    CHECK(problem("a..b:99999") == "invalid Host: empty label");
    CHECK(problem("ab:99999") == "invalid Host: bad port");
    CHECK(problem("example.com:8080").empty());
}
