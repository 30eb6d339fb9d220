// The heads sluice sends on: a table of requests to the head their upstream gets, and of
// upstream responses to the head their client gets.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>

#include "../support/beast_request.hpp"
#include "http/onward_heads.hpp"
#include "http/request_head.hpp"

using namespace sluice;
namespace bhttp = boost::beast::http;

namespace {

struct Onward {
    http::RequestOnward result;
    std::string head;
};

// A raw request head accepted by read_request_head, sent on by request_onward.
Onward request(std::string raw, bool trusted_tls = false) {
    http::ClientRequest req;
    observe::AccessRecord rec;
    auto accepted = http::read_request_head(std::span<char>(raw.data(), raw.size()), {}, req, rec);
    REQUIRE_FALSE(accepted.refusal);
    Onward out;
    out.result = http::request_onward(req, accepted.body, accepted.length, "app",
                                      {"192.0.2.7", false, req.version(), trusted_tls}, "id-1", out.head);
    return out;
}

struct Back {
    http::ResponseOnward result;
    std::string head;
};

Back response(std::string raw, unsigned client_version, bool keep_alive = true, bool head_request = false,
              const limit::HeaderList& rate = {}) {
    http::UpstreamResponse res;
    REQUIRE(http::parse_response_head(raw, res).empty());
    const auto framing = http::check_response_framing(res.fields, res.version, res.status, head_request);
    REQUIRE(framing.ok());
    Back out;
    out.result = http::response_onward(res, framing, client_version, keep_alive, rate, out.head);
    return out;
}

const std::string forwarded = "X-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\nVia: 1.1 sluice\r\n";

}  // namespace

TEST_CASE("a table of requests and the head their upstream gets") {
    using Mode = http::BodyWriter::Mode;
    struct Row {
        const char* what;
        std::string raw;
        std::string head;
        Mode body = Mode::as_is;
        bool expect_continue = false;
        bool websocket = false;
    };
    const Row rows[] = {
        {"hop-by-hop fields go, ours come",
         "GET /a?b HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n"
         "TE: trailers\r\nX-Request-Id: theirs\r\nAccept: */*\r\n\r\n",
         "GET /a?b HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n" + forwarded + "X-Request-Id: id-1\r\n\r\n"},
        {"a Content-Length body",
         "POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n",
         "POST /u HTTP/1.1\r\nHost: h\r\n" + forwarded + "X-Request-Id: id-1\r\nContent-Length: 5\r\n\r\n"},
        {"a chunked body is chunked again by us",
         "POST /u HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
         "POST /u HTTP/1.1\r\nHost: h\r\n" + forwarded + "X-Request-Id: id-1\r\nTransfer-Encoding: chunked\r\n\r\n",
         Mode::chunked},
        {"100-continue is answered by sluice, not passed on",
         "PUT /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
         "PUT /u HTTP/1.1\r\nHost: h\r\n" + forwarded + "X-Request-Id: id-1\r\nContent-Length: 1\r\n\r\n",
         Mode::as_is, true},
        {"an HTTP/1.0 request goes on as 1.1 with the upstream's name as Host",
         "GET / HTTP/1.0\r\n\r\n",
         "GET / HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-Proto: http\r\n"
         "Via: 1.0 sluice\r\nX-Request-Id: id-1\r\n\r\n"},
        {"a WebSocket handshake keeps its upgrade",
         "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n",
         "GET /ws HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Version: 13\r\nConnection: upgrade\r\n"
         "Upgrade: websocket\r\n" + forwarded + "X-Request-Id: id-1\r\n\r\n",
         Mode::as_is, false, true},
        {"a peer that is not trusted: its claims of the client are not passed on, nor HTTP2-Settings",
         "GET / HTTP/1.1\r\nHost: h\r\nForwarded: for=1.2.3.4;proto=https\r\nX-Real-IP: 6.6.6.6\r\n"
         "X-Forwarded-Host: evil.test\r\nx-forwarded-port: 1\r\nX-Forwarded-Prefix: /a\r\nX-Realm: kept\r\n"
         "HTTP2-Settings: AA\r\n\r\n",
         "GET / HTTP/1.1\r\nHost: h\r\nX-Realm: kept\r\n" + forwarded + "X-Request-Id: id-1\r\n\r\n"},
        {"any other upgrade is dropped",
         "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\n\r\n",
         "GET / HTTP/1.1\r\nHost: h\r\n" + forwarded + "X-Request-Id: id-1\r\n\r\n"},
    };
    for (const auto& row : rows) {
        SECTION(row.what) {
            const auto out = request(row.raw);
            CHECK_FALSE(out.result.refusal);
            CHECK(out.head == row.head);
            CHECK(out.result.body == row.body);
            CHECK(out.result.expect_continue == row.expect_continue);
            CHECK(out.result.websocket == row.websocket);
        }
    }
}

TEST_CASE("an Expect sluice does not know is refused with 417, and nothing is written") {
    std::string raw = "GET / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n";
    const auto out = request(raw);
    REQUIRE(out.result.refusal);
    CHECK(out.result.refusal->status == 417);
    CHECK(out.head.empty());
}

TEST_CASE("a table of upstream responses and the head their client gets") {
    using Mode = http::BodyWriter::Mode;
    SECTION("a Content-Length body, hop-by-hop fields gone, Via added") {
        auto out = response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                            "Server: up\r\n\r\n", 11);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nServer: up\r\nVia: 1.1 sluice\r\nContent-Length: 2\r\n\r\n");
        CHECK(out.result.keep_alive);
        CHECK(out.result.body == Mode::as_is);
    }
    SECTION("chunked to an HTTP/1.1 client: chunked again by us") {
        auto out = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 11);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nVia: 1.1 sluice\r\nTransfer-Encoding: chunked\r\n\r\n");
        CHECK(out.result.body == Mode::chunked);
        CHECK(out.result.keep_alive);
    }
    SECTION("until the upstream closes, to an HTTP/1.1 client: chunked, the connection kept") {
        auto out = response("HTTP/1.0 200 OK\r\n\r\n", 11);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nVia: 1.0 sluice\r\nTransfer-Encoding: chunked\r\n\r\n");
        CHECK(out.result.body == Mode::chunked);
        CHECK(out.result.keep_alive);
    }
    SECTION("chunked to an HTTP/1.0 client: the body ends with the connection") {
        auto out = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 10);
        CHECK(out.head == "HTTP/1.0 200 OK\r\nVia: 1.1 sluice\r\n\r\n");
        CHECK(out.result.body == Mode::as_is);
        CHECK_FALSE(out.result.keep_alive);
    }
    SECTION("an HTTP/1.0 client that keeps its connection is told so") {
        auto out = response("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 10);
        CHECK(out.head == "HTTP/1.0 200 OK\r\nVia: 1.1 sluice\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n");
        CHECK(out.result.keep_alive);
    }
    SECTION("closing an HTTP/1.1 client's connection says close") {
        auto out = response("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 11, false);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nVia: 1.1 sluice\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        CHECK_FALSE(out.result.keep_alive);
    }
    SECTION("HEAD: the Content-Length describing the resource stays") {
        auto out = response("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", 11, true, true);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nVia: 1.1 sluice\r\n\r\n");
        CHECK(out.result.body == Mode::as_is);
    }
    SECTION("204: no framing at all") {
        auto out = response("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", 11);
        CHECK(out.head == "HTTP/1.1 204 No Content\r\nVia: 1.1 sluice\r\n\r\n");
    }
    SECTION("the rate-limit headers replace any of the same name") {
        const limit::HeaderList rate{{"RateLimit", "\"burst\";r=3;t=2"}};
        auto out = response("HTTP/1.1 200 OK\r\nRateLimit: forged\r\nContent-Length: 0\r\n\r\n", 11, true, false, rate);
        CHECK(out.head == "HTTP/1.1 200 OK\r\nVia: 1.1 sluice\r\nContent-Length: 0\r\nRateLimit: \"burst\";r=3;t=2\r\n\r\n");
    }
}

namespace {

// What request_onward wrote before it wrote the head directly: the same edits on a copy of
// the message (Beast's field container), then write_request_head. The oracle for the test below.
std::string edited_head(bhttp::request<bhttp::empty_body> req, const http::BodyReader& body, std::uint64_t length,
                        const http::ForwardingInfo& forwarding, bool websocket) {
    http::erase_all(req, bhttp::field::expect);
    http::strip_hop_by_hop(req);
    http::strip_framing(req);
    if (websocket) {
        req.insert(bhttp::field::connection, "upgrade");
        req.insert(bhttp::field::upgrade, "websocket");
    }
    bool has_host = false;
    for (const auto& f : req) has_host = has_host || f.name() == bhttp::field::host;
    if (!has_host) req.insert(bhttp::field::host, "app");
    http::add_forwarding_headers(req, forwarding);
    http::replace_field(req, "X-Request-Id", "id-1");
    if (body.mode() == http::BodyReader::Mode::length)
        req.insert(bhttp::field::content_length, std::to_string(length));
    else if (body.mode() == http::BodyReader::Mode::chunked)
        req.insert(bhttp::field::transfer_encoding, "chunked");
    std::string head;
    http::write_request_head(http::sv(req.method_string()), http::sv(req.target()), 11, req, head);
    return head;
}

// A head's field lines in the order Beast's container would keep them (testing::beast_order):
// the edits above ran on Beast's container, which moved a repeated field up to the others of
// its name; request_onward keeps the order received.
std::string in_beast_order(const std::string& head) {
    std::vector<std::string> lines;
    std::size_t at = 0;
    while (at < head.size()) {
        const auto end = head.find("\r\n", at);
        lines.push_back(head.substr(at, end + 2 - at));
        at = end + 2;
    }
    REQUIRE(lines.size() >= 2);
    const std::vector<std::string> fields(lines.begin() + 1, lines.end() - 1);
    std::string out = lines.front();
    for (const auto& line : testing::beast_order<std::string>(
             fields, [](const std::string& l) { return std::string_view(l).substr(0, l.find(':')); }))
        out += line;
    return out + lines.back();
}

}  // namespace

// Generated requests (hop-by-hop fields, Connection naming others, repeated forwarding
// fields, bodies, WebSocket handshakes, HTTP/1.0), trusted peers and not, over TLS and not:
// the head written directly is byte for byte the head the field edits wrote (in Beast's order).
TEST_CASE("request_onward writes the bytes the field edits wrote") {
    const std::vector<std::string> starts = {"GET / HTTP/1.1", "GET /ws HTTP/1.1", "POST /u?x=1 HTTP/1.1",
                                             "GET / HTTP/1.0", "PUT /p HTTP/1.1", "OPTIONS * HTTP/1.1"};
    const std::vector<std::string> fields = {
        "Host: h",
        "host: other",
        "Connection: keep-alive",
        "Connection: Upgrade",
        "Connection: close, X-Hop",
        "connection: X-Request-Id, Via, X-Forwarded-For",
        "Connection: x-forwarded-proto, Host, Content-Length",
        "Upgrade: websocket",
        "Upgrade: h2c",
        "X-Hop: 1",
        "Keep-Alive: timeout=5",
        "TE: trailers",
        "Proxy-Connection: keep-alive",
        "Expect: 100-continue",
        "Content-Length: 5",
        "Transfer-Encoding: chunked",
        "X-Forwarded-For: 1.2.3.4",
        "x-forwarded-for:  5.6.7.8 , 9.9.9.9 ",
        "X-Forwarded-For:",
        "X-Forwarded-Proto: https",
        "Forwarded: for=1.2.3.4;proto=https",
        "forwarded: for=5.6.7.8",
        "HTTP2-Settings: AA",
        "X-Real-IP: 6.6.6.6",
        "x-forwarded-host: evil.test",
        "X-Forwarded-Port: 443",
        "X-Forwarded-Prefix: /admin",
        "X-Forwarded-Hostname: kept",
        "Via: 1.1 edge",
        "via: 1.0 other",
        "X-Request-Id: theirs",
        "Accept: */*",
        "X-Odd-Case: v1",
        "x-odd-case: v2",
        "Sec-WebSocket-Version: 13",
        "Cookie: a=1",
    };
    std::mt19937 rng(27);
    std::size_t compared = 0;
    for (int round = 0; round < 20000; ++round) {
        std::string raw = starts[rng() % starts.size()] + "\r\n";
        const std::size_t n = rng() % 8;
        for (std::size_t i = 0; i < n; ++i) raw += fields[rng() % fields.size()] + "\r\n";
        raw += "\r\n";
        http::ClientRequest req;
        observe::AccessRecord rec;
        auto accepted = http::read_request_head(std::span<char>(raw.data(), raw.size()), {}, req, rec);
        if (accepted.refusal) continue;
        const http::ForwardingInfo forwarding{"192.0.2.7", (rng() & 1) != 0, req.version(), (rng() & 1) != 0};
        // The same request in Beast's container, for the edits.
        bhttp::request<bhttp::empty_body> original;
        original.method_string(req.method_string());
        original.target(req.target());
        original.version(req.version());
        for (const auto& f : req) original.insert(f.name_string(), f.value());
        std::string head = "stale";
        const auto out = http::request_onward(req, accepted.body, accepted.length, "app", forwarding, "id-1", head);
        INFO(raw);
        if (out.refusal) continue;
        REQUIRE(head.starts_with("stale"));
        CHECK(in_beast_order(head.substr(5)) == edited_head(original, accepted.body, accepted.length, forwarding, out.websocket));
        ++compared;
    }
    CHECK(compared > 5000);
}

namespace {

// response_onward as it was written before its single walk: the field edits one after the
// other on the parsed fields, then the head written from them. The reference the walk must
// match byte for byte.
http::ResponseOnward edited_response_onward(http::UpstreamResponse& response, const http::Framing& framing,
                                            unsigned client_version, bool keep_alive,
                                            const limit::HeaderList& rate_headers, std::string& head) {
    using Body = http::Framing::Body;
    http::ResponseOnward out;
    out.keep_alive = keep_alive;
    auto& res = response.fields;
    http::strip_hop_by_hop(res);
    if (framing.body != Body::none || response.status == 204)
        http::strip_framing(res);
    else
        http::erase_all(res, bhttp::field::transfer_encoding);
    http::append_via(res, response.version);
    if (framing.body == Body::length) {
        http::replace_field(res, bhttp::field::content_length, std::to_string(framing.length));
    } else if (framing.body == Body::chunked || framing.body == Body::until_close) {
        if (client_version >= 11) {
            res.insert(bhttp::field::transfer_encoding, "chunked");
            out.body = http::BodyWriter::Mode::chunked;
        } else {
            out.keep_alive = false;
        }
    }
    for (const auto& [name, value] : rate_headers) http::replace_field(res, name, value);
    http::erase_all(res, bhttp::field::connection);
    if (client_version >= 11 && !out.keep_alive)
        res.insert(bhttp::field::connection, "close");
    else if (client_version < 11 && out.keep_alive)
        res.insert(bhttp::field::connection, "keep-alive");
    http::write_response_head(client_version, response.status, response.reason, res, head);
    return out;
}

}  // namespace

TEST_CASE("response_onward writes the bytes the field edits wrote, over generated responses") {
    const std::vector<std::string> lines = {
        "Server: up",           "Date: today",          "Content-Type: text/plain", "Content-Length: 5",
        "content-length: 5",    "Transfer-Encoding: chunked", "Connection: keep-alive", "Connection: close",
        "connection: X-Foo, close", "Connection: Upgrade, Via, Content-Length", "Connection: ratelimit",
        "Keep-Alive: timeout=5", "Proxy-Connection: keep-alive", "TE: trailers", "Trailer: X-T",
        "Upgrade: h2c",         "Via: 1.1 a",           "via: 1.0 b",               "X-Foo: 1",
        "x-foo: 2",             "X-Bar: 3",             "RateLimit: old",           "ratelimit-policy: old",
        "Retry-After: 3",       "retry-after: 4",       "Proxy-Authenticate: x",    "Set-Cookie: a=b",
        "Close: x",             "X-RateLimit-Limit: 9", "Content-Length: 7",
    };
    const std::vector<std::string> starts = {"HTTP/1.1 200 OK", "HTTP/1.0 200 OK", "HTTP/1.1 204 No Content",
                                             "HTTP/1.1 304 Not Modified", "HTTP/1.1 404 ", "HTTP/1.0 500 Oops"};
    const std::vector<limit::HeaderList> rates = {
        {},
        {{"RateLimit-Policy", "\"l\";q=10;w=1"}, {"RateLimit", "\"l\";r=9;t=1"}},
        {{"X-RateLimit-Limit", "10"}, {"X-RateLimit-Remaining", "9"}, {"X-RateLimit-Reset", "1"}},
        {{"Retry-After", "2"}, {"RateLimit", "\"l\";r=0;t=2"}},
    };
    std::mt19937 rng(20261127);
    std::size_t compared = 0;
    for (int i = 0; i < 20000; ++i) {
        std::string raw = starts[rng() % starts.size()] + "\r\n";
        const std::size_t n = rng() % 8;
        for (std::size_t k = 0; k < n; ++k) raw += lines[rng() % lines.size()] + "\r\n";
        raw += "\r\n";
        const bool head_request = rng() % 4 == 0;
        const unsigned client_version = rng() % 2 ? 11 : 10;
        const bool keep_alive = rng() % 3 != 0;
        const auto& rate = rates[rng() % rates.size()];
        http::UpstreamResponse a;
        http::UpstreamResponse b;
        if (!http::parse_response_head(raw, a).empty()) continue;
        REQUIRE(http::parse_response_head(raw, b).empty());
        const auto framing = http::check_response_framing(a.fields, a.version, a.status, head_request);
        if (!framing.ok()) continue;
        std::string walked = "prefix|";
        std::string edited = "prefix|";
        const auto got = http::response_onward(a, framing, client_version, keep_alive, rate, walked);
        const auto want = edited_response_onward(b, framing, client_version, keep_alive, rate, edited);
        CAPTURE(raw, head_request, client_version, keep_alive, rate.size());
        REQUIRE(walked == edited);
        CHECK(got.keep_alive == want.keep_alive);
        CHECK(got.body == want.body);
        ++compared;
    }
    CHECK(compared > 5000);
}

TEST_CASE("a request's fields go upstream in the order they came, repeated ones where they were") {
    const auto out = request("GET / HTTP/1.1\r\nX-A: 1\r\nHost: h\r\nx-a: 2\r\nAccept: */*\r\nX-A: 3\r\n\r\n");
    CHECK(out.head ==
          "GET / HTTP/1.1\r\nX-A: 1\r\nHost: h\r\nx-a: 2\r\nAccept: */*\r\nX-A: 3\r\n" + forwarded + "X-Request-Id: id-1\r\n\r\n");
}

TEST_CASE("an upstream response's fields as an HTTP/2 client gets them") {
    // Names in lower case (a field Beast knows, from its own spelling; any other, from the
    // bytes received), no connection-specific field, Content-Length where the length is
    // known, the rate-limit fields; the list is reused from one response to the next.
    auto h2 = [](std::string raw, const limit::HeaderList& rate, http::H2Fields& out) {
        http::UpstreamResponse res;
        REQUIRE(http::parse_response_head(raw, res).empty());
        const auto framing = http::check_response_framing(res.fields, res.version, res.status, false);
        REQUIRE(framing.ok());
        http::response_onward_h2(res, framing, rate, out);
    };
    limit::HeaderList rate;
    rate.emplace_back("RateLimit", "\"api\";r=4;t=1");
    http::H2Fields out;
    h2("HTTP/1.1 200 OK\r\nCONTENT-TYPE: text/plain\r\nConnection: keep-alive, X-Hop\r\nX-Hop: a\r\n"
       "Keep-Alive: timeout=5\r\nX-Custom-Name: Mixed Value\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
       "Transfer-Encoding: chunked\r\n\r\n",
       rate, out);
    const http::H2Fields want{{"content-type", "text/plain"},
                              {"x-custom-name", "Mixed Value"},
                              {"set-cookie", "a=1"},
                              {"set-cookie", "b=2"},
                              {"via", "1.1 sluice"},
                              {"ratelimit", "\"api\";r=4;t=1"}};
    CHECK(out == want);
    // A smaller response next: nothing of the first is left.
    h2("HTTP/1.1 204 No Content\r\nETag: \"x\"\r\n\r\n", {}, out);
    CHECK(out == http::H2Fields{{"etag", "\"x\""}, {"via", "1.1 sluice"}});
    h2("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", {}, out);
    CHECK(out == http::H2Fields{{"via", "1.0 sluice"}, {"content-length", "3"}});  // (set again: last)
}
