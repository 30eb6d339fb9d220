// parse_request_head: a client's request head into a ClientRequest, accepting exactly what
// Beast's request parser accepted before it (Beast is the reference: support/beast_request.hpp).
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "http/field_list.hpp"
#include "http/head_scan.hpp"
#include "../support/beast_request.hpp"

using namespace sluice;
namespace bhttp = boost::beast::http;

namespace {

std::string parse_problem(const std::string& raw) {
    http::ClientRequest req;
    return std::string(http::parse_request_head(raw, req));
}

}  // namespace

TEST_CASE("parse_request_head reads the request line and the fields in order") {
    std::string raw =
        "PATCH /a/b?c=d HTTP/1.0\r\nHost: example.com\r\nX-Custom:  v  1 \t\r\ncontent-length: 3\r\n"
        "Accept:\r\nX-Obs: caf\xc3\xa9\r\nConnection: keep-alive\r\n\r\n";
    http::ClientRequest req;
    REQUIRE(http::parse_request_head(raw, req).empty());
    raw.assign(raw.size(), 'x');  // the request has a copy
    CHECK(req.method() == bhttp::verb::patch);
    CHECK(req.method_string() == "PATCH");
    CHECK(req.target() == "/a/b?c=d");
    CHECK(req.version() == 10);
    CHECK(req.keep_alive());
    REQUIRE(req.fields().size() == 6);
    const std::vector<std::tuple<bhttp::field, std::string, std::string>> want = {
        {bhttp::field::host, "Host", "example.com"},
        {bhttp::field::unknown, "X-Custom", "v  1"},
        {bhttp::field::content_length, "content-length", "3"},
        {bhttp::field::accept, "Accept", ""},
        {bhttp::field::unknown, "X-Obs", "caf\xc3\xa9"},
        {bhttp::field::connection, "Connection", "keep-alive"},
    };
    std::size_t i = 0;
    for (const auto& f : req) {
        CHECK(f.name() == std::get<0>(want[i]));
        CHECK(f.name_string() == std::get<1>(want[i]));
        CHECK(f.value() == std::get<2>(want[i]));
        ++i;
    }
    req.target("/other");
    CHECK(req.target() == "/other");

    // A second head into the same request replaces the first.
    REQUIRE(http::parse_request_head("FOO * HTTP/1.1\r\n\r\n", req).empty());
    CHECK(req.method() == bhttp::verb::unknown);
    CHECK(req.method_string() == "FOO");
    CHECK(req.target() == "*");
    CHECK(req.fields().size() == 0);
    CHECK(req.keep_alive());
}

TEST_CASE("parse_request_head: keep-alive from every Connection field") {
    const auto keep = [](std::string raw) {
        http::ClientRequest req;
        REQUIRE(http::parse_request_head(raw, req).empty());
        return req.keep_alive();
    };
    CHECK(keep("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    CHECK_FALSE(keep("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
    CHECK_FALSE(keep("GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: x, close\r\n\r\n"));
    CHECK(keep("GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n"));  // (not the client's to this hop)
    CHECK_FALSE(keep("GET / HTTP/1.0\r\n\r\n"));
    CHECK(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    CHECK_FALSE(keep("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));
}

TEST_CASE("parse_request_head refuses what Beast's parser refused") {
    const std::vector<std::string> refused = {
        "GET  / HTTP/1.1\r\n\r\n",                        // empty target
        " GET / HTTP/1.1\r\n\r\n",                        // empty method
        "G(T / HTTP/1.1\r\n\r\n",                         // not a token
        "GET /\x7f HTTP/1.1\r\n\r\n",                     // DEL in the target
        "GET / HTTP/1.2\r\n\r\n",                         // (read_request_head rewrites it first)
        "GET / HTTP/2.0\r\n\r\n",
        "GET / HTTP/1.1 \r\n\r\n",
        "GET / HTTP/1.1\r\n",                             // no blank line
        "GET / HTTP/1.1\r\nBad Name: a\r\n\r\n",
        "GET / HTTP/1.1\r\n: a\r\n\r\n",
        "GET / HTTP/1.1\r\nNa\xc3\xa9me: a\r\n\r\n",
        "GET / HTTP/1.1\r\nNo-Colon\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\n\r\n",                   // bare LF
        "GET / HTTP/1.1\r\nConnection: close x\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: close;x\r\n\r\n",
        "GET / HTTP/1.1\r\nProxy-Connection: a/b\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1a\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5,,5\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n",
    };
    for (const auto& raw : refused) {
        INFO(raw);
        http::ClientRequest req;
        const auto problem = http::parse_request_head(raw, req);
        CHECK_FALSE(problem.empty());
        CHECK_FALSE(testing::beast_request(raw).ok);
    }
    // Accepted by both (the framing checks after the parse refuse some of them).
    const std::vector<std::string> accepted = {
        "GET http://a.example:80/x?y HTTP/1.1\r\n\r\n",
        "OPTIONS * HTTP/1.0\r\n\r\n",
        "GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: ,, close ,\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection:\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 00018446744073709551615\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip;q=1, chunked\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked;x\r\nX: 1\r\n\r\n",
    };
    for (const auto& raw : accepted) {
        INFO(raw);
        http::ClientRequest req;
        const auto problem = http::parse_request_head(raw, req);
        CHECK(problem.empty());
        CHECK(testing::same_as_beast(testing::beast_request(raw), problem, req));
    }
    CHECK(parse_problem("POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n") == "Content-Length values differ");
    // Obs-fold, which Beast unfolded (check_request_head refuses it before the parse).
    CHECK(parse_problem("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n") == "obs-fold (line folding) in header field");
    // Bytes after the blank line are not part of one head (Beast left them unread).
    CHECK_FALSE(parse_problem("GET / HTTP/1.1\r\nHost: a\r\n\r\nX").empty());
    CHECK(parse_problem("GET / HTTP/1.1\r\nConnection: a b\r\n\r\n") == "invalid Connection value");
}

TEST_CASE("parse_request_head takes values Beast could not hold") {
    // Beast's container threw for a name or value over 64 KiB (its offsets are 16 bits).
    const std::string big(70000, 'v');
    http::ClientRequest req;
    REQUIRE(http::parse_request_head("GET / HTTP/1.1\r\nX-Big: " + big + "\r\n\r\n", req).empty());
    CHECK(req.find("x-big") == std::optional<std::string_view>(big));
    REQUIRE(http::parse_request_head("GET /" + big + " HTTP/1.1\r\n\r\n", req).empty());
    CHECK(req.target().size() == big.size() + 1);
}

// Generated heads: request lines and fields drawn from odd and hostile pieces, and bytes
// changed at random. Wherever our byte checks (check_request_head) let a head through,
// parse_request_head and Beast's parser agree on it, field by field; where they do not, the
// parse refuses it too.
TEST_CASE("parse_request_head agrees with Beast's parser on generated heads") {
    const std::vector<std::string> starts = {
        "GET / HTTP/1.1", "GET / HTTP/1.0", "POST /u?x=1 HTTP/1.1", "OPTIONS * HTTP/1.1", "CONNECT a:443 HTTP/1.1",
        "get /lower HTTP/1.1", "M-SEARCH * HTTP/1.1", "GET http://h/p HTTP/1.1", "GET / HTTP/1.2", "GET / HTTP/0.9",
        "GET  / HTTP/1.1", "GET / HTTP/1.1 ", "GET /a b HTTP/1.1", "GET /\xff HTTP/1.1", "G\"T / HTTP/1.1",
        "GET / http/1.1", "GET / HTTP/11", "GET", "GET /",
    };
    const std::vector<std::string> fields = {
        "Host: h",
        "host:h",
        "Host:   spaced\t ",
        "X-Empty:",
        "X-Tab:\tv",
        "Connection: keep-alive",
        "Connection: close",
        "Connection: Keep-Alive, Upgrade",
        "Connection: ,,",
        "Connection: a b",
        "Connection: close;x",
        "connection: x-hop,close",
        "Proxy-Connection: keep-alive",
        "Proxy-Connection: a@b",
        "Content-Length: 5",
        "Content-Length: 0",
        "Content-Length: 5, 5",
        "Content-Length: 5,5,",
        "Content-Length: 6",
        "Content-Length: x",
        "Content-Length:",
        "Content-Length: 99999999999999999999",
        "Transfer-Encoding: chunked",
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, gzip",
        "Transfer-Encoding: chunked;q=1",
        "Transfer-Encoding: ,chunked",
        "Transfer-Encoding: chunked, chunked",
        "Transfer-Encoding:",
        "Upgrade: websocket",
        "X-Obs: \x80\xfe",
        "X~Odd!Name#$%&'*+-.^_`|: v",
        "X(Bad: v",
        "X Bad: v",
        "X\xc3\xa9: v",
        ": v",
        "NoColon",
        "Cookie: a=1; b=2",
        "User-Agent: Mozilla/5.0 (X11; Linux x86_64)",
        "Accept-Language: en-US,en;q=0.5",
    };
    std::mt19937 rng(2026);
    std::size_t both_accepted = 0, both_refused = 0;
    for (int round = 0; round < 40000; ++round) {
        std::string raw = starts[rng() % starts.size()] + "\r\n";
        const std::size_t n = rng() % 7;
        for (std::size_t i = 0; i < n; ++i) raw += fields[rng() % fields.size()] + "\r\n";
        raw += "\r\n";
        if (rng() % 4 == 0) {  // a few bytes changed
            const std::size_t changes = 1 + rng() % 3;
            for (std::size_t c = 0; c < changes; ++c) raw[rng() % raw.size()] = static_cast<char>(rng() % 256);
        }
        http::ClientRequest req;
        const auto problem = http::parse_request_head(raw, req);
        INFO(raw);
        if (!http::check_request_head(raw).empty()) {
            // What the parse accepts, our byte rules accept (they are looked at only when it refuses).
            REQUIRE_FALSE(problem.empty());
            continue;
        }
        const auto beast = testing::beast_request(raw);
        INFO(problem);
        REQUIRE(testing::same_as_beast(beast, problem, req));
        (beast.ok ? both_accepted : both_refused) += 1;
    }
    CHECK(both_accepted > 5000);
    CHECK(both_refused > 5000);
}
