#include <catch2/catch.hpp>

#include "http/problem.hpp"

using namespace sluice;

namespace {

const std::string body = "{\"status\":429}\n";  // 15 bytes

}  // namespace

TEST_CASE("problem response: HTTP/1.1 kept open, with the given headers in order") {
    const limit::HeaderList headers{{"RateLimit", "\"b\";r=0;t=9"},
                                                                        {"Retry-After", "9"}};
    http::ProblemResponse r;
    r.status = 429;
    r.version = 11;
    r.keep_alive = true;
    r.headers = &headers;
    r.body = body;
    CHECK(http::serialize(r) ==
          "HTTP/1.1 429 Too Many Requests\r\n"
          "Server: sluice\r\n"
          "Content-Type: application/problem+json\r\n"
          "RateLimit: \"b\";r=0;t=9\r\n"
          "Retry-After: 9\r\n"
          "Content-Length: 15\r\n"
          "\r\n" + body);
}

TEST_CASE("problem response: Connection as each version needs it") {
    http::ProblemResponse r;
    r.status = 404;
    r.body = body;
    const std::string tail = "Content-Length: 15\r\n\r\n" + body;
    const std::string head11 = "HTTP/1.1 404 Not Found\r\nServer: sluice\r\nContent-Type: application/problem+json\r\n";
    const std::string head10 = "HTTP/1.0 404 Not Found\r\nServer: sluice\r\nContent-Type: application/problem+json\r\n";
    r.version = 11;
    r.keep_alive = false;
    CHECK(http::serialize(r) == head11 + "Connection: close\r\n" + tail);
    r.version = 10;
    r.keep_alive = true;
    CHECK(http::serialize(r) == head10 + "Connection: keep-alive\r\n" + tail);
    r.keep_alive = false;  // HTTP/1.0 closes by default
    CHECK(http::serialize(r) == head10 + tail);
}

TEST_CASE("problem response: an answer to HEAD has the Content-Length of the body, not the body") {
    http::ProblemResponse r;
    r.status = 503;
    r.keep_alive = true;
    r.head = true;
    r.body = body;
    CHECK(http::serialize(r) ==
          "HTTP/1.1 503 Service Unavailable\r\n"
          "Server: sluice\r\n"
          "Content-Type: application/problem+json\r\n"
          "Content-Length: 15\r\n"
          "\r\n");
}

TEST_CASE("problem response: a status without a standard reason (responses.limited_status: 420)") {
    http::ProblemResponse r;
    r.status = 420;
    r.keep_alive = true;
    r.body = body;
    const auto text = http::serialize(r);
    CHECK(text.starts_with("HTTP/1.1 420 "));
    CHECK(text.find("\r\n") > 13);  // a reason phrase (Beast's), as before
    CHECK(text.ends_with("Content-Length: 15\r\n\r\n" + body));
}
