// The heads sluice sends on: a table of requests to the head their upstream gets, and of
// upstream responses to the head their client gets.
#include <catch2/catch.hpp>

#include <string>

#include <boost/beast/http/parser.hpp>

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
    http::RequestParser parser;
    observe::AccessRecord rec;
    auto accepted = http::read_request_head(std::span<char>(raw.data(), raw.size()), {}, parser, rec);
    REQUIRE_FALSE(accepted.refusal);
    Onward out;
    out.result = http::request_onward(parser.get(), accepted.body, accepted.length, "app",
                                      {"192.0.2.7", false, parser.get().version(), trusted_tls}, "id-1", out.head);
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
