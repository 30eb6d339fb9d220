// Proxy-generated responses: application/problem+json bodies (RFC 9457) and the whole
// response around them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http {

// {"type":"about:blank","title":"Not Found","status":404,"detail":"..."} plus any
// extra string members given as (name, value).
std::string problem_json(unsigned status, std::string_view detail,
                         const std::vector<std::pair<std::string_view, std::string_view>>& extra = {});

// What a response sluice answers by itself is made of.
struct ProblemResponse {
    unsigned status = 500;
    unsigned version = 11;    // 10 or 11: HTTP/1.0 or HTTP/1.1
    bool keep_alive = false;  // the connection stays open after it
    bool head = false;        // the request was HEAD: the same headers, no content (RFC 9110 9.3.2)
    const std::vector<std::pair<std::string_view, std::string>>* headers = nullptr;  // names unique
    std::string_view body;    // a problem_json document; empty: no Content-Type is sent
};

// The response, serialized and ready to write: status line; Server, Content-Type and the
// given headers in order; Connection as the version needs it ("close" on HTTP/1.1 when the
// connection ends, "keep-alive" on HTTP/1.0 when it stays); Content-Length of the body;
// then the body, unless the request was HEAD.
std::string serialize(const ProblemResponse& response);

}  // namespace sluice::http
