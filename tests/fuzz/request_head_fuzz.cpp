// libFuzzer target: the request head phase (read_request_head), over what scan_request_head
// frames as a complete head.
// Sources: src/http/request_head.cpp src/http/head_scan.cpp src/http/header_rules.cpp src/http/field_list.cpp
//          src/http/request_target.cpp src/http/body_reader.cpp (Beast header-only)
//
// Checked: a refusal has a status sluice answers heads with (400, 413, 431, 501, 505) and a
// reason; an accepted head is parsed, its target goes upstream in origin form (the
// normalised path, which normalises to itself) or is `*`, its Host is valid, its body reader
// is reading or done; the access line always has a method and a target. Where
// check_request_head lets the head through, parse_request_head agrees with Beast's request
// parser, which it replaced (the same verdict, method, target, version and fields); what
// parse_request_head accepts, check_request_head accepts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "../unit/support/beast_request.hpp"
#include "http/head_scan.hpp"
#include "http/request_head.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    config::ServerConfig server;
    server.max_body_bytes = 1 + data[0] * 1000;  // small and large limits alike
    std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::size_t scanned = 0;
    const auto scan = http::scan_request_head(in, scanned);
    if (scan.state != http::HeadScan::State::complete) return 0;
    std::string head = in.substr(scan.leading_crlf, scan.head_size);

    {
        http::ClientRequest req;
        const auto problem = http::parse_request_head(head, req);
        const bool bytes_fine = http::check_request_head(head).empty();
        // What the parse accepts, our byte rules accept (read_request_head checks them only
        // when the parse refuses).
        if (problem.empty() && !bytes_fine) __builtin_trap();
        if (bytes_fine && !testing::same_as_beast(testing::beast_request(head), problem, req)) __builtin_trap();
    }

    http::ClientRequest req;
    observe::AccessRecord rec;
    auto out = http::read_request_head(std::span<char>(head.data(), head.size()), server, req, rec);
    if (rec.method.empty() || rec.target.empty()) __builtin_trap();
    if (out.refusal) {
        const unsigned s = out.refusal->status;
        if (s != 400 && s != 413 && s != 431 && s != 501 && s != 505) __builtin_trap();
        if (out.refusal->detail.empty()) __builtin_trap();
        return 0;
    }
    if (!out.parsed) __builtin_trap();
    const std::string_view target = req.target();
    if (target != out.target.origin_form()) __builtin_trap();
    if (target != "*") {
        if (target.empty() || target[0] != '/') __builtin_trap();
        std::string_view problem;
        if (http::normalize_path(out.target.path, problem) != out.target.path || !problem.empty()) __builtin_trap();
    }
    if (const auto host = req.find(boost::beast::http::field::host)) {
        std::string_view problem;
        http::validate_host(*host, problem);
        if (!problem.empty()) __builtin_trap();
    }
    const auto state = out.body.state();
    if (state != http::BodyReader::State::reading && state != http::BodyReader::State::done) __builtin_trap();
    return 0;
}
