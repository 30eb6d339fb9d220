// Proxy-generated responses: application/problem+json bodies (RFC 9457) and the whole
// response around them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "limit/header_list.hpp"

namespace sluice::http {

// {"type":"about:blank","title":"Not Found","status":404,"detail":"..."} plus any
// extra string members given as (name, value).
std::string problem_json(unsigned status, std::string_view detail,
                         const std::vector<std::pair<std::string_view, std::string_view>>& extra = {});

// An answer sluice gives by itself instead of forwarding: what a phase of the request path
// that ends the request returns (one writer, the session's, turns it into bytes).
// Passed to a coroutine by value, it must come from a named object (std::move) or a
// function's return value, never a braced temporary in the call: GCC 12 destroys such a
// temporary twice (seen under ASan as a double free).
struct LocalReply {
    enum class Body : std::uint8_t {
        problem,             // problem+json: type, title, status and detail
        problem_with_limit,  // the same, naming the route and the limit (a refused request)
        none,                // no content (a check route's 200)
    };
    unsigned status = 500;
    std::string detail;
    Body body = Body::problem;
    limit::HeaderList headers;  // names unique; values owned
};

// A problem+json answer with no extra headers.
inline LocalReply local_problem(unsigned status, std::string_view detail) {
    return LocalReply{status, std::string(detail), LocalReply::Body::problem, {}};
}

// What a response sluice answers by itself is made of.
struct ProblemResponse {
    unsigned status = 500;
    unsigned version = 11;    // 10 or 11: HTTP/1.0 or HTTP/1.1
    bool keep_alive = false;  // the connection stays open after it
    bool head = false;        // the request was HEAD: the same headers, no content (RFC 9110 9.3.2)
    const limit::HeaderList* headers = nullptr;  // names unique
    std::string_view body;    // a problem_json document; empty: no Content-Type is sent
};

// The response, serialized and ready to write: status line; Server, Content-Type and the
// given headers in order; Connection as the version needs it ("close" on HTTP/1.1 when the
// connection ends, "keep-alive" on HTTP/1.0 when it stays); Content-Length of the body;
// then the body, unless the request was HEAD.
std::string serialize(const ProblemResponse& response);

}  // namespace sluice::http
