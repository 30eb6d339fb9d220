// libFuzzer target: the request-head scanner and the header rules.
// Sources: src/http/head_scan.cpp src/http/header_rules.cpp src/http/field_list.cpp (Beast header-only for the parser)
//
// Checked: scanning the input in pieces gives what one scan gives; a head the checks accept
// and Beast parses gets a framing decision or a refusal with a status; after
// strip_hop_by_hop no Connection field and no field it named (other than the protected
// ones) is left; the head sluice writes for it scans again as one complete head.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/head_scan.hpp"
#include "http/header_rules.hpp"

namespace bhttp = boost::beast::http;
using namespace sluice::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::size_t piece = 1 + data[0] % 7;
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

    std::size_t scanned = 0;
    const HeadScan whole = scan_request_head(in, scanned);
    std::size_t scanned_split = 0;
    HeadScan split;
    for (std::size_t have = std::min(piece, in.size());; have = std::min(have + piece, in.size())) {
        split = scan_request_head(in.substr(0, have), scanned_split);
        if (split.state != HeadScan::State::incomplete || have == in.size()) break;
    }
    if (split.state != whole.state) __builtin_trap();
    if (whole.state == HeadScan::State::complete &&
        (split.head_size != whole.head_size || split.leading_crlf != whole.leading_crlf))
        __builtin_trap();
    // A request line refused early is one the complete head would not have had a version in.
    const auto line_problem = check_request_line(in.substr(std::min(whole.leading_crlf, in.size())));
    if (whole.state != HeadScan::State::complete) return 0;
    if (!line_problem.empty() &&
        request_version_offset(in.substr(whole.leading_crlf, whole.head_size)) != std::string_view::npos)
        __builtin_trap();

    const auto head = in.substr(whole.leading_crlf, whole.head_size);
    if (!check_request_head(head).empty()) return 0;
    (void)count_field_lines(head);
    (void)request_version_offset(head);

    bhttp::request_parser<bhttp::empty_body> parser;
    parser.header_limit(1 << 20);
    parser.body_limit(boost::none);
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(head.data(), head.size()), ec);
    if (ec || !parser.is_header_done()) return 0;
    auto& req = parser.get();
    const auto framing = check_request_framing(req.base(), req.version());
    if (framing.ok() == (framing.status != 0)) __builtin_trap();

    strip_hop_by_hop(req.base());
    for (const auto& f : req)
        if (f.name() == bhttp::field::connection || f.name() == bhttp::field::te ||
            f.name() == bhttp::field::upgrade || f.name() == bhttp::field::keep_alive)
            __builtin_trap();
    strip_framing(req.base());
    add_forwarding_headers(req.base(), {"127.0.0.1", false, 11});
    std::string out;
    write_request_head(std::string_view(req.method_string().data(), req.method_string().size()),
                       std::string_view(req.target().data(), req.target().size()), 11, req.base(), out);
    std::size_t again_scanned = 0;
    const auto again = scan_request_head(out, again_scanned);
    if (again.state != HeadScan::State::complete || again.head_size != out.size()) __builtin_trap();
    if (!check_request_head(out).empty()) __builtin_trap();
    return 0;
}
