// The request head phase: a table of raw heads to what becomes of them.
#include <catch2/catch.hpp>

#include <string>

#include "http/request_head.hpp"

using namespace sluice;

namespace {

struct Outcome {
    unsigned status = 0;  // 0: accepted
    http::RequestHead head;
    observe::AccessRecord rec;
    std::string host;    // the parsed request's Host
    std::string target;  // ... and target, as they go upstream
    unsigned version = 0;
};

Outcome read(std::string raw, const config::ServerConfig& server = {}) {
    Outcome out;
    http::ClientRequest req;
    out.head = http::read_request_head(std::span<char>(raw.data(), raw.size()), server, req, out.rec);
    if (out.head.refusal) {
        out.status = out.head.refusal->status;
        CHECK(out.head.refusal->body == http::LocalReply::Body::problem);
        CHECK_FALSE(out.head.refusal->detail.empty());
    }
    if (out.head.parsed) {
        out.host = std::string(req.find(boost::beast::http::field::host).value_or(""));
        out.target = std::string(req.target());
        out.version = req.version();
    }
    return out;
}

std::string many_fields(int n) {
    std::string raw = "GET / HTTP/1.1\r\nHost: a\r\n";
    for (int i = 1; i < n; ++i) raw += "X-F" + std::to_string(i) + ": v\r\n";
    return raw + "\r\n";
}

}  // namespace

TEST_CASE("a table of request heads and the status that refuses them") {
    struct Row {
        const char* raw;
        unsigned status;
    };
    const Row rows[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\n\r\n", 0},                                    // 1.0 needs no Host
        {"GET / HTTP/1.1\r\n\r\n", 400},                                  // 1.1 does
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},            // two
        {"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", 400},                 // bare LF
        {"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", 400},         // obs-fold
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},                      // space before the colon
        {"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", 400},          // a control byte
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 0},                          // read as 1.1
        {"G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},                        // not a token
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3x\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 400},           // not chunked last
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10485761\r\n\r\n", 413},  // over max_body_bytes
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10485760\r\n\r\n", 0},
        {"GET foo HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET /a/../../b HTTP/1.1\r\nHost: a\r\n\r\n", 400},               // above the root
        {"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400},              // every form of target
        {"CONNECT http://a/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},                         // asterisk: OPTIONS only
        {"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n", 400},
        {"GET http://a:99999/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},           // the authority's port
        {"GET http://a_b.example:8080/ HTTP/1.1\r\nHost: a\r\n\r\n", 0},
    };
    for (const auto& row : rows) {
        INFO(row.raw);
        CHECK(read(row.raw).status == row.status);
    }
    CHECK(read(many_fields(100)).status == 0);
    CHECK(read(many_fields(101)).status == 431);
}

TEST_CASE("an accepted head: its target, Host, body and version as they go on") {
    SECTION("an absolute-form target names the Host and goes upstream in origin form") {
        auto out = read("GET http://Example.COM:8080/a/./b/../c?q=1 HTTP/1.1\r\nHost: other\r\n\r\n");
        REQUIRE(out.status == 0);
        CHECK(out.host == "example.com:8080");
        CHECK(out.target == "/a/c?q=1");
        CHECK(out.head.target.path == "/a/c");
        CHECK(out.rec.host == "example.com:8080");
        CHECK(out.rec.target == "http://Example.COM:8080/a/./b/../c?q=1");  // the line names what came
    }
    SECTION("a path is normalised once, for routing and upstream alike") {
        auto out = read("GET //a/%7euser/%2F? HTTP/1.1\r\nHost: a\r\n\r\n");
        REQUIRE(out.status == 0);
        CHECK(out.head.target.path == "/a/~user/%2F");
        CHECK(out.target == "/a/~user/%2F?");
    }
    SECTION("HTTP/1.2 is read as 1.1, in the bytes too") {
        std::string raw = "GET / HTTP/1.2\r\nHost: a\r\n\r\n";
        http::ClientRequest req;
        observe::AccessRecord rec;
        auto head = http::read_request_head(std::span<char>(raw.data(), raw.size()), {}, req, rec);
        CHECK_FALSE(head.refusal);
        CHECK(raw.substr(0, 14) == "GET / HTTP/1.1");
        CHECK(rec.version == 11);
    }
    SECTION("a Content-Length body") {
        auto out = read("POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n");
        REQUIRE(out.status == 0);
        CHECK(out.head.length == 12);
        CHECK(out.head.expects);
        CHECK(out.head.body.state() == http::BodyReader::State::reading);
    }
    SECTION("a chunked body") {
        auto out = read("POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        REQUIRE(out.status == 0);
        CHECK_FALSE(out.head.expects);
        CHECK(out.head.body.state() == http::BodyReader::State::reading);
    }
    SECTION("no body") {
        auto out = read("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        REQUIRE(out.status == 0);
        CHECK(out.head.body.done());
        CHECK(out.version == 11);
        CHECK(out.rec.method == "GET");
    }
    SECTION("a smaller max_body_bytes") {
        config::ServerConfig server;
        server.max_body_bytes = 10;
        CHECK(read("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n", server).status == 413);
        CHECK(read("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n", server).status == 0);
    }
}

TEST_CASE("a refused head is named on the access line as it came, printable") {
    SECTION("not parsed: from the raw request line") {
        auto out = read("GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n");
        CHECK(out.status == 400);
        CHECK_FALSE(out.head.parsed);
        CHECK(out.rec.method == "GET");
        CHECK(out.rec.target == "/a?");
    }
    SECTION("parsed, then refused: from the parsed head") {
        auto out = read("POST /up HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
        CHECK(out.status == 400);
        CHECK(out.head.parsed);
        CHECK(out.rec.method == "POST");
        CHECK(out.rec.target == "/up");
        CHECK(out.rec.version == 10);
    }
    SECTION("another major version") {
        auto out = read("GET / HTTP/3.0\r\n\r\n");
        CHECK(out.status == 505);
        CHECK(out.rec.version == 11);
        CHECK(out.rec.target == "/");
    }
}

TEST_CASE("a request line with nothing to name is named '-'") {
    // Found by the request_head fuzz target: a line starting with a bare CR named no method.
    auto out = read("\rAAA x\r\nHost: a\r\n\r\n");
    CHECK(out.status == 400);
    CHECK(out.rec.method == "-");
    CHECK(out.rec.target == "-");
    out = read("GET\r\nHost: a\r\n\r\n");
    CHECK(out.status == 400);
    CHECK(out.rec.method == "GET");
    CHECK(out.rec.target == "-");
}

TEST_CASE("ClientRequest::find: the first field of a name, in the order received, whatever its case") {
    namespace bhttp = boost::beast::http;
    std::string raw = "GET / HTTP/1.1\r\nX-Other: 1\r\nuser-agent: first\r\nAccept: */*\r\nUser-Agent: second\r\n"
                      "x-odd: a\r\nX-ODD: b\r\n\r\n";
    http::ClientRequest req;
    REQUIRE(http::parse_request_head(raw, req).empty());
    CHECK(req.find(bhttp::field::user_agent) == std::optional<std::string_view>("first"));
    CHECK(req.find(bhttp::field::accept) == std::optional<std::string_view>("*/*"));
    CHECK_FALSE(req.find(bhttp::field::host).has_value());
    CHECK(req.find("USER-AGENT") == std::optional<std::string_view>("first"));
    CHECK(req.find("X-Odd") == std::optional<std::string_view>("a"));
    CHECK(req.find("x-other") == std::optional<std::string_view>("1"));
    CHECK_FALSE(req.find("x-absent").has_value());
    CHECK_FALSE(req.find("x-othe").has_value());
}

TEST_CASE("request head: the access record's host is the Host field, or the absolute-form authority") {
    CHECK(read("GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n").rec.host == "example.com:8080");
    const auto absolute = read("GET http://other.example/x HTTP/1.1\r\nHost: example.com\r\n\r\n");
    CHECK(absolute.status == 0);
    CHECK(absolute.rec.host == "other.example");
    CHECK(absolute.host == "other.example");
    CHECK(read("GET / HTTP/1.0\r\n\r\n").rec.host.empty());
    CHECK(read("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").head.expects);
    CHECK_FALSE(read("GET / HTTP/1.1\r\nHost: a\r\n\r\n").head.expects);
}
