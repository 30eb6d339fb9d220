// libFuzzer target: request-target parsing, path normalisation and Host validation.
// Sources: src/http/request_target.cpp
//
// Checked: a normalised path starts with '/', has no "//", no "." or ".." segment, no escape
// of an unreserved character, no lowercase hex in an escape, no byte a path may not hold as it
// is (not ASCII, `"<>^`{|}[]`), and normalises to itself; a
// validated Host validates to itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/request_target.hpp"

using namespace sluice::http;

namespace {
bool unreserved(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}
int hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;  // lowercase hex is not what normalisation writes
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const auto t = parse_request_target((size & 1) ? "GET" : "OPTIONS", in);
    if (t.ok() && t.path != "*") {
        const std::string& p = t.path;
        if (p.empty() || p[0] != '/') __builtin_trap();
        if (p.find("//") != std::string::npos) __builtin_trap();
        if (p.find("/./") != std::string::npos || p.find("/../") != std::string::npos) __builtin_trap();
        if (p.ends_with("/.") || p.ends_with("/..")) __builtin_trap();
        for (std::size_t i = 0; i < p.size(); ++i) {
            const auto c = static_cast<unsigned char>(p[i]);
            if (c >= 0x80 || std::string_view("\"<>^`{|}[]").find(static_cast<char>(c)) != std::string_view::npos)
                __builtin_trap();  // held escaped
            if (p[i] != '%') continue;
            if (i + 2 >= p.size()) __builtin_trap();
            const int hi = hex(static_cast<unsigned char>(p[i + 1])), lo = hex(static_cast<unsigned char>(p[i + 2]));
            if (hi < 0 || lo < 0 || unreserved(static_cast<unsigned char>(hi * 16 + lo))) __builtin_trap();
        }
        std::string_view problem;
        if (normalize_path(p, problem) != p || !problem.empty()) __builtin_trap();
        if (!t.authority.empty()) {
            if (validate_host(t.authority, problem) != t.authority || !problem.empty()) __builtin_trap();
        }
    }
    std::string_view problem;
    const auto host = validate_host(in, problem);
    if (host_problem(in) != problem) __builtin_trap();  // the check alone agrees
    if (problem.empty()) {
        std::string_view again;
        if (validate_host(host, again) != host || !again.empty()) __builtin_trap();
    }
    return 0;
}
