// libFuzzer target: an upstream's response head (parse_response_head), over what
// scan_request_head frames as a complete head, against Beast's parser, which read every
// response head before.
// Sources: src/http/field_list.cpp src/http/head_scan.cpp src/http/header_rules.cpp
//          (Beast header-only)
//
// Checked: an accepted head has a status of 100-599, version 1.0 or 1.1, token field names
// and values without CR, LF or surrounding whitespace; Beast's parser gives the same verdict
// once the framing is checked (but for HTTP/1.2 and later minors, which Beast refuses and
// sluice reads as 1.1, a Connection that is not a token list, which Beast refuses and
// sluice removes as any other, and Transfer-Encoding lists Beast misread where no body
// follows), with the same status, fields of each name in the same order and keep-alive
// (where the body does not run to the connection's end); each field's code is Beast's for its
// name (field_id remembers names per thread); the head sluice writes from it
// (hop-by-hop fields gone, Via added) reads back the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/field_list.hpp"
#include "http/head_scan.hpp"
#include "http/header_rules.hpp"

using namespace sluice;
namespace bhttp = boost::beast::http;

namespace {

using Named = std::tuple<std::string, std::string>;

std::vector<Named> by_name(std::vector<Named> v) {
    for (auto& [name, value] : v)
        for (auto& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    std::stable_sort(v.begin(), v.end(), [](const Named& a, const Named& b) { return std::get<0>(a) < std::get<0>(b); });
    return v;
}

bool token_char(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// A comma-separated list of tokens (empty elements allowed).
bool token_list(std::string_view v) {
    for (char c : v)
        if (!token_char(static_cast<unsigned char>(c)) && c != ',' && c != ' ' && c != '\t') return false;
    // Whitespace only around the elements.
    std::size_t i = 0;
    while (i < v.size()) {
        while (i < v.size() && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) ++i;
        while (i < v.size() && token_char(static_cast<unsigned char>(v[i]))) ++i;
        while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
        if (i < v.size() && v[i] != ',') return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    std::size_t scanned = 0;
    const auto scan = http::scan_request_head(in, scanned);
    if (scan.state != http::HeadScan::State::complete) return 0;
    const std::string head = in.substr(scan.leading_crlf, scan.head_size);

    http::UpstreamResponse res;
    const auto problem = http::parse_response_head(head, res);
    http::Framing framing;
    const bool ours_ok = problem.empty() && (framing = http::check_response_framing(res.fields, res.version, res.status, false)).ok();
    if (problem.empty()) {
        if (res.status < 100 || res.status > 599) __builtin_trap();
        if (res.version != 10 && res.version != 11) __builtin_trap();
        for (const auto& f : res.fields) {
            if (f.name_string().empty()) __builtin_trap();
            for (unsigned char c : f.name_string())
                if (!token_char(c)) __builtin_trap();
            // The code remembered for a name (field_id) is Beast's for it.
            const auto name = f.name_string();
            if (f.name() != bhttp::string_to_field(boost::beast::string_view(name.data(), name.size()))) __builtin_trap();
            const auto v = f.value();
            if (v.find_first_of("\r\n") != std::string_view::npos) __builtin_trap();
            if (!v.empty() && (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t')) __builtin_trap();
        }
    }

    // Beast's verdict, as read_upstream_head reached it before.
    bhttp::response_parser<bhttp::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(head.size() + 4));
    parser.body_limit(boost::none);  // as read_upstream_head set it
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(head.data(), head.size()), ec);
    const auto& b = parser.get();
    const bool beast_ok = http::check_request_head(head).empty() && !ec && parser.is_header_done() &&
                          b.version() / 10 == 1 && b.result_int() >= 100 && b.result_int() <= 599 &&
                          http::check_response_framing(b.base(), b.version(), b.result_int(), false).ok();
    // Beast 1.81 knows HTTP/1.0 and 1.1 only; sluice reads 1.x above 1 as 1.1 (RFC 9110 2.5),
    // as it does for requests.
    const bool later_minor = head.size() > 8 && head.starts_with("HTTP/1.") && head[7] > '1' && head[7] <= '9';
    if (later_minor) return 0;
    // Beast refused a Connection (or Proxy-Connection) that is not a list of tokens; sluice
    // removes those fields from the response in any case (hop-by-hop), as nginx reads them.
    if (ec == bhttp::error::bad_value && ours_ok) {
        bool odd_connection = false;
        for (const auto& f : res.fields)
            if ((f.name() == bhttp::field::connection || f.name() == bhttp::field::proxy_connection) &&
                !token_list(f.value()))
                odd_connection = true;
        if (!odd_connection) __builtin_trap();
        return 0;
    }
    // Beast read Transfer-Encoding lists of its own way even where no body follows (1xx,
    // 204, 304), and refused some that sluice accepts and removes there (no framing is
    // written for them): "chunked\xff" read as chunked, then a later coding as a duplicate.
    const bool no_body = res.status < 200 || res.status == 204 || res.status == 304;
    if (ours_ok && !beast_ok && no_body && ec == bhttp::error::bad_transfer_encoding) return 0;
    if (ours_ok != beast_ok) __builtin_trap();
    if (!ours_ok) return 0;
    if (res.status != b.result_int()) __builtin_trap();
    std::vector<Named> mine, theirs;
    for (const auto& f : res.fields) mine.emplace_back(std::string(f.name_string()), std::string(f.value()));
    for (const auto& f : b) theirs.emplace_back(std::string(http::sv(f.name_string())), std::string(http::sv(f.value())));
    if (by_name(mine) != by_name(theirs)) __builtin_trap();
    // The upstream connection's reuse: Beast's parser said false also for a body read to
    // the connection's end, which sluice checks from the framing; a 1.0 response naming both
    // keep-alive and close closes in sluice.
    bool says_close = false;
    for (const auto& f : res.fields)
        if (f.name() == bhttp::field::connection || f.name() == bhttp::field::proxy_connection)
            says_close = says_close || http::has_token(f.value(), "close");
    const bool both = res.version == 10 && says_close;
    if (framing.body != http::Framing::Body::until_close && !both && res.keep_alive != parser.keep_alive())
        __builtin_trap();

    // What sluice writes from it reads back the same.
    http::strip_hop_by_hop(res.fields);
    http::append_via(res.fields, res.version);
    std::string onward;
    http::write_response_head(11, res.status, res.reason, res.fields, onward);
    std::vector<Named> written;
    for (const auto& f : res.fields) written.emplace_back(std::string(f.name_string()), std::string(f.value()));
    http::UpstreamResponse again;
    if (!http::parse_response_head(onward, again).empty()) __builtin_trap();
    std::vector<Named> reread;
    for (const auto& f : again.fields) reread.emplace_back(std::string(f.name_string()), std::string(f.value()));
    if (again.status != res.status || reread != written) __builtin_trap();
    return 0;
}
