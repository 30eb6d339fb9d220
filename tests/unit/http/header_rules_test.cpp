#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "http/header_rules.hpp"

using namespace sluice::http;
namespace bhttp = boost::beast::http;

namespace {

Fields make(std::vector<std::pair<std::string, std::string>> list) {
    Fields f;
    for (auto& [name, value] : list) f.insert(name, value);
    return f;
}

std::string get(const Fields& f, std::string_view name) {
    auto it = f.find(name);
    return it == f.end() ? "<none>" : std::string(it->value());
}

}  // namespace

TEST_CASE("check_request_framing") {
    using Body = Framing::Body;
    struct Case {
        std::vector<std::pair<std::string, std::string>> fields;
        unsigned version;
        unsigned status;  // 0: accepted
        Body body = Body::none;
        std::uint64_t length = 0;
    };
    const std::vector<Case> cases = {
        {{{"Host", "a"}}, 11, 0, Body::none},
        {{{"Host", "a"}, {"Content-Length", "5"}}, 11, 0, Body::length, 5},
        {{{"Host", "a"}, {"Content-Length", "0"}}, 11, 0, Body::length, 0},
        {{{"Host", "a"}, {"Content-Length", "9999999999999999999"}}, 11, 0, Body::length, 9999999999999999999u},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked"}}, 11, 0, Body::chunked},
        {{{"Host", "a"}, {"Transfer-Encoding", "Chunked"}}, 11, 0, Body::chunked},
        {{{"Host", "a"}, {"Transfer-Encoding", ",chunked"}}, 11, 0, Body::chunked},
        {{{"Host", "a"}, {"Transfer-Encoding", "gzip, chunked"}}, 11, 501},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked, chunked"}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", ""}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", " , "}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "5"}, {"Content-Length", "5"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "5, 5"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "-1"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "+1"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "0x10"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", "99999999999999999999"}}, 11, 400},
        {{{"Host", "a"}, {"Content-Length", ""}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked, gzip"}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "identity"}}, 11, 400},
        {{{"Host", "a"}, {"Transfer-Encoding", "chunked"}}, 10, 400},
        {{{"Host", "a"}, {"Host", "b"}}, 11, 400},
        {{}, 11, 400},  // HTTP/1.1 without Host
        {{}, 10, 0},    // HTTP/1.0 may omit it
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        INFO("case " << i);
        const auto f = check_request_framing(make(cases[i].fields), cases[i].version);
        CHECK(f.status == cases[i].status);
        CHECK(f.ok() == f.problem.empty());
        if (f.ok()) {
            CHECK(f.body == cases[i].body);
            CHECK(f.length == cases[i].length);
        }
    }
}

TEST_CASE("check_response_framing") {
    using Body = Framing::Body;
    struct Case {
        std::vector<std::pair<std::string, std::string>> fields;
        unsigned status;
        bool head_request;
        unsigned refused;  // 0: accepted
        Body body = Body::none;
        std::uint64_t length = 0;
        bool announced = false;  // Framing::announced_body: not reused
    };
    const std::vector<Case> cases = {
        {{{"Content-Length", "5"}}, 200, false, 0, Body::length, 5},
        {{{"Content-Length", "0"}}, 200, false, 0, Body::length, 0},
        {{{"Transfer-Encoding", "chunked"}}, 200, false, 0, Body::chunked},
        {{}, 200, false, 0, Body::until_close},
        {{{"Content-Length", "5"}}, 200, true, 0, Body::none, 0, true},  // HEAD: the length of the GET
        {{{"Content-Length", "0"}}, 200, true, 0, Body::none, 0, false},
        {{}, 200, true, 0, Body::none, 0, false},
        {{{"Transfer-Encoding", "chunked"}}, 200, true, 0, Body::none, 0, true},
        {{{"Content-Length", "5"}}, 304, false, 0, Body::none, 0, true},
        {{}, 304, false, 0, Body::none, 0, false},
        {{}, 204, false, 0, Body::none},
        {{{"Content-Length", "0"}}, 204, false, 0, Body::none, 0, false},
        {{{"Content-Length", "7"}}, 204, false, 0, Body::none, 0, true},
        {{}, 100, false, 0, Body::none},
        {{{"Content-Length", "5"}, {"Content-Length", "5"}}, 200, false, 502},
        {{{"Content-Length", "5"}, {"Content-Length", "5"}}, 200, true, 502},
        {{{"Content-Length", "x"}}, 304, false, 502},
        {{{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, 200, false, 502},
        {{{"Transfer-Encoding", "gzip, chunked"}}, 200, false, 502},
        {{{"Transfer-Encoding", "gzip"}}, 200, false, 502},
        {{{"Transfer-Encoding", "chunked, chunked"}}, 200, false, 502},
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        INFO("case " << i);
        const auto f = check_response_framing(make(cases[i].fields), 11, cases[i].status, cases[i].head_request);
        CHECK(f.status == cases[i].refused);
        if (f.ok()) {
            CHECK(f.body == cases[i].body);
            CHECK(f.length == cases[i].length);
            CHECK(f.announced_body == cases[i].announced);
        }
    }
    CHECK(check_response_framing(make({{"Transfer-Encoding", "chunked"}}), 10, 200, false).status == 502);
}

TEST_CASE("a Connection option cannot remove framing, Host or the proxy's own fields") {
    auto f = make({{"Host", "a"},
                   {"Connection", "close, Content-Length, transfer-encoding, HOST, Via, X-Forwarded-Proto, X-Gone"},
                   {"Content-Length", "5"},
                   {"Via", "1.1 other"},
                   {"X-Forwarded-Proto", "https"},
                   {"X-Gone", "1"}});
    strip_hop_by_hop(f);
    std::vector<std::string> left;
    for (const auto& field : f) left.emplace_back(field.name_string());
    CHECK(left == std::vector<std::string>{"Host", "Content-Length", "Via", "X-Forwarded-Proto"});
    strip_framing(f);
    CHECK(get(f, "Content-Length") == "<none>");
}

TEST_CASE("strip_hop_by_hop removes fixed hop-by-hop fields and those named in Connection") {
    auto f = make({{"Host", "a"},
                   {"Connection", "keep-alive, X-Secret"},
                   {"connection", "x-other"},
                   {"Keep-Alive", "timeout=5"},
                   {"Proxy-Connection", "keep-alive"},
                   {"TE", "trailers"},
                   {"Trailer", "X-T"},
                   {"Transfer-Encoding", "chunked"},
                   {"Upgrade", "websocket"},
                   {"Proxy-Authenticate", "Basic"},
                   {"Proxy-Authorization", "Basic eA=="},
                   {"HTTP2-Settings", "AAMAAABkAAQAAP__"},
                   {"x-secret", "1"},
                   {"X-Other", "2"},
                   {"X-Kept", "3"}});
    strip_hop_by_hop(f);
    std::vector<std::string> left;
    for (const auto& field : f) left.emplace_back(field.name_string());
    CHECK(left == std::vector<std::string>{"Host", "X-Kept"});
}

TEST_CASE("Connection naming X-Forwarded-For cannot remove the proxy's own header") {
    auto f = make({{"Host", "a"}, {"Connection", "X-Forwarded-For"}, {"X-Forwarded-For", "6.6.6.6"}});
    strip_hop_by_hop(f);
    add_forwarding_headers(f, {"10.0.0.1", false, 11});
    CHECK(get(f, "X-Forwarded-For") == "10.0.0.1");
}

TEST_CASE("add_forwarding_headers") {
    SECTION("untrusted peer: incoming X-Forwarded-For and X-Forwarded-Proto are replaced") {
        auto f = make({{"X-Forwarded-For", "1.2.3.4"}, {"X-Forwarded-Proto", "https"}});
        add_forwarding_headers(f, {"10.0.0.1", false, 11});
        CHECK(get(f, "X-Forwarded-For") == "10.0.0.1");
        CHECK(get(f, "X-Forwarded-Proto") == "http");
        CHECK(get(f, "Via") == "1.1 sluice");
    }
    SECTION("trusted peer: the chain is kept and the peer appended; several fields are one list") {
        auto f = make({{"X-Forwarded-For", "1.2.3.4"}, {"X-Other", "x"}, {"x-forwarded-for", "5.6.7.8"},
                       {"X-Forwarded-Proto", "https"}});
        add_forwarding_headers(f, {"10.0.0.1", true, 11});
        CHECK(get(f, "X-Forwarded-For") == "1.2.3.4, 5.6.7.8, 10.0.0.1");
        CHECK(get(f, "X-Forwarded-Proto") == "https");
    }
    SECTION("Via is appended, with the client's protocol version") {
        auto f = make({{"Via", "1.1 edge"}});
        add_forwarding_headers(f, {"10.0.0.1", false, 10});
        CHECK(get(f, "Via") == "1.1 edge, 1.0 sluice");
    }
}

TEST_CASE("has_token") {
    CHECK(has_token("keep-alive, Upgrade", "upgrade"));
    CHECK_FALSE(has_token("keep-alive, Upgraded", "upgrade"));
    CHECK_FALSE(has_token("", "close"));
}

// Our head writers against Beast's own serializer, on the same messages.
#include <sstream>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/write.hpp>

namespace {

template <bool isRequest>
bhttp::message<isRequest, bhttp::empty_body> parse_head(std::string raw) {
    bhttp::parser<isRequest, bhttp::empty_body> parser;
    if constexpr (!isRequest) parser.skip(true);
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(raw), ec);
    REQUIRE_FALSE(ec);
    REQUIRE(parser.is_header_done());
    return parser.release();
}

template <class Message>
std::string beast_bytes(const Message& message) {
    std::ostringstream out;
    out << message;
    return out.str();
}

}  // namespace

TEST_CASE("write_request_head writes the bytes Beast's serializer writes") {
    auto req = parse_head<true>(
        "GET /a/b?x=1&y=%20 HTTP/1.1\r\nHost: example.com\r\nX-Odd-Case: v1\r\nx-odd-case: v2\r\nEmpty:\r\n"
        "Accept: */*\r\nVia: 1.1 a, 1.0 b\r\n\r\n");
    strip_hop_by_hop(req.base());
    add_forwarding_headers(req.base(), {"203.0.113.7", false, 11});
    std::string ours = "stale";  // appends
    write_request_head(req.method_string(), req.target(), 11, req.base(), ours);
    CHECK(ours == "stale" + beast_bytes(req));
    CHECK(ours.ends_with("\r\n\r\n"));

    auto post = parse_head<true>("POST /p HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    std::string head;
    write_request_head(post.method_string(), post.target(), 10, post.base(), head);
    CHECK(head == beast_bytes(post));
}

TEST_CASE("write_response_head writes the bytes Beast's serializer writes") {
    SECTION("the upstream's own reason phrase, fields in order") {
        auto res = parse_head<false>(
            "HTTP/1.1 200 Fine Thanks\r\nContent-Length: 3\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\n\r\n");
        append_via(res.base(), res.version());
        res.set("RateLimit", "\"burst\";r=3;t=1");
        res.keep_alive(false);
        std::string head;
        write_response_head(11, 200, res.reason(), res.base(), head);
        CHECK(head == beast_bytes(res));
        CHECK(head.starts_with("HTTP/1.1 200 Fine Thanks\r\nContent-Length: 3\r\n"));
    }
    SECTION("no reason phrase: the standard one") {
        auto res = parse_head<false>("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n");
        res.version(10);
        std::string head;
        write_response_head(10, 404, res.reason(), res.base(), head);
        CHECK(head == beast_bytes(res));
        CHECK(head.starts_with("HTTP/1.0 404 Not Found\r\n"));
    }
}
