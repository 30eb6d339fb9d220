// libFuzzer target: logging.access_format patterns and the access lines written with them.
// Sources: src/config/access_format.cpp src/observe/access_log.cpp src/observe/json_text.cpp
//          src/observe/log_time.cpp
//
// Input: a pattern, a NUL, then the bytes a client controls (target, Host, User-Agent, the
// request id), separated by NULs. Checked: a pattern is either refused with an offset inside
// it or read into pieces that name only known fields and give back its literal text; whatever
// a client sends, a text line has no CR, LF or other control byte, and no '"' other than the
// pattern's own and the standard line's quotes; a json line has no control byte at all and
// is one object that starts with the time.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/access_format.hpp"
#include "observe/access_log.hpp"

using namespace sluice;

namespace {

std::vector<std::string_view> split(std::string_view in) {
    std::vector<std::string_view> parts;
    std::size_t at = 0;
    while (true) {
        const auto nul = in.find('\0', at);
        parts.push_back(in.substr(at, nul == std::string_view::npos ? std::string_view::npos : nul - at));
        if (nul == std::string_view::npos) break;
        at = nul + 1;
    }
    return parts;
}

std::size_t count(std::string_view s, char c) {
    std::size_t n = 0;
    for (char x : s) n += x == c;
    return n;
}

// Well-formed UTF-8 (RFC 3629), decoded independently of json_text.cpp.
bool utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        for (std::size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d >> 6) != 2) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        const std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += n;
    }
    return true;
}

void check_line(std::string_view line, bool json) {
    for (const char ch : line) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || (json && c == 0x7f)) __builtin_trap();
    }
    if (json && !utf8(line)) __builtin_trap();
    if (json && (!line.starts_with("{\"time\":") || !line.ends_with("}"))) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto parts = split(std::string_view(reinterpret_cast<const char*>(data), size));
    const std::string_view pattern = parts[0];

    config::AccessFormat format;
    auto parsed = config::parse_access_pattern(pattern);
    if (auto* error = std::get_if<config::AccessPatternError>(&parsed)) {
        if (error->offset > pattern.size() || error->message.empty()) __builtin_trap();
    } else {
        format = std::get<config::AccessFormat>(std::move(parsed));
        if (format.fields.empty()) __builtin_trap();
        std::size_t named = 0;
        for (const auto& piece : format.pieces) {
            if (piece.field) {
                ++named;
                if (!config::access_field_named(config::access_field_name(*piece.field))) __builtin_trap();
            }
        }
        if (named != format.fields.size()) __builtin_trap();
    }

    observe::AccessRecord r;
    r.client = "203.0.113.7";
    r.peer = "127.0.0.1";
    r.method = "GET";
    r.target = parts.size() > 1 ? std::string(parts[1]) : "/";
    r.host = parts.size() > 2 ? std::string(parts[2]) : "";
    r.user_agent = parts.size() > 3 ? std::string(parts[3]) : "";
    r.request_id = parts.size() > 4 ? std::string(parts[4]) : "";
    r.skipped = parts.size() > 5 ? std::string(parts[5]) : "";
    r.status = 200;
    r.upstream_ms = 1.5;
    r.wait_ms = size % 3 == 0 ? std::optional<double>(2.0) : std::nullopt;

    const std::string time = "2026-11-25T19:40:01.123Z";
    const config::AccessFormat classic;
    config::AccessFormat listed;
    listed.kind = config::AccessFormat::Kind::fields;
    listed.fields = {config::AccessField::request, config::AccessField::user_agent, config::AccessField::host,
                     config::AccessField::request_id, config::AccessField::skipped, config::AccessField::status};
    for (const config::AccessFormat* f : {&static_cast<const config::AccessFormat&>(format), &classic,
                                          static_cast<const config::AccessFormat*>(&listed)}) {
        const auto& use = *f;
        const auto text = observe::format_access_text(r, use, time);
        check_line(text, false);
        // The client's bytes add no quote: the only '"' are the pattern's and the standard
        // line's own (request and user_agent) or, in a list, those around values with spaces.
        std::size_t allowed = 0;
        if (use.kind == config::AccessFormat::Kind::classic) allowed = 4;
        if (use.kind == config::AccessFormat::Kind::pattern)
            for (const auto& piece : use.pieces) allowed += count(piece.literal, '"');
        if (use.kind == config::AccessFormat::Kind::fields) allowed = 2 * use.fields.size();
        if (count(text, '"') > allowed) __builtin_trap();
        check_line(observe::format_access_json(r, use, time), true);
    }
    return 0;
}
