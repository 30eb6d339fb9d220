#include "observe/access_log.hpp"

#include <array>
#include <charconv>

#include <spdlog/spdlog.h>

#include "observe/json_text.hpp"
#include "observe/log_time.hpp"

namespace sluice::observe {

namespace {

using config::AccessField;
using config::AccessFormat;

// Text values as nginx writes them: a '"', a '\', control bytes and bytes above 0x7e as
// \xHH, so that a value can neither end its quotes nor forge a line. Runs of bytes that stay
// as they are are appended whole.
constexpr std::array<bool, 256> escaped_bytes = [] {
    std::array<bool, 256> t{};
    for (std::size_t c = 0; c < 256; ++c) t[c] = c == '"' || c == '\\' || c < 0x20 || c > 0x7e;
    return t;
}();
void append_escaped(std::string& out, std::string_view value) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::size_t run = 0;  // where the bytes not appended yet start
    for (std::size_t i = 0; i < value.size(); ++i) {
        const auto c = static_cast<unsigned char>(value[i]);
        if (escaped_bytes[c]) {
            out.append(value.data() + run, i - run);
            const char escape[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            out.append(escape, 4);
            run = i + 1;
        }
    }
    out.append(value.data() + run, value.size() - run);
}

void append_text_or_dash(std::string& out, std::string_view value) {
    if (value.empty())
        out += '-';
    else
        append_escaped(out, value);
}

}  // namespace

// Milliseconds with one decimal, as printf's %.1f writes them (std::to_chars rounds the same,
// correctly, and costs a fraction of fmt's "{:.1f}": every access line has two or three).
void append_ms(std::string& out, double ms) {
    char digits[48];
    const auto written = std::to_chars(digits, digits + sizeof digits, ms, std::chars_format::fixed, 1);
    if (written.ec == std::errc())
        out.append(digits, written.ptr);
    else
        fmt::format_to(std::back_inserter(out), "{:.1f}", ms);  // (beyond 10^40 ms)
}

namespace {

// "METHOD TARGET HTTP/x.y", method and target through `put` (the text form escapes them in
// place; the version's digits and dot need no escape).
template <typename Put>
void append_request_line(std::string& out, const AccessRecord& r, Put put) {
    put(out, r.method);
    out += ' ';
    put(out, r.target);
    out += " HTTP/";
    out += std::to_string(r.version / 10);
    out += '.';
    out += std::to_string(r.version % 10);
}

// The member a text field reads (its value may be empty: written - or null); nullopt for the
// others (numbers, milliseconds, the request line, the protocol, the decision).
std::optional<std::string_view> text_field(const AccessRecord& r, AccessField field) {
    switch (field) {
    case AccessField::client: return r.client;
    case AccessField::peer: return r.peer;
    case AccessField::method: return r.method;
    case AccessField::uri: return r.target;
    case AccessField::route: return r.route;
    case AccessField::limit: return r.limit;
    case AccessField::request_id: return r.request_id;
    case AccessField::host: return r.host;
    case AccessField::upstream: return r.upstream;
    case AccessField::user_agent: return r.user_agent;
    case AccessField::skipped: return r.skipped;
    case AccessField::plan: return r.plan;
    default: return std::nullopt;
    }
}

void append_text(std::string& out, const AccessRecord& r, AccessField field) {
    if (const auto text = text_field(r, field)) return append_text_or_dash(out, *text);
    switch (field) {
    case AccessField::request: return append_request_line(out, r, append_escaped);
    case AccessField::protocol: return append_escaped(out, fmt::format("HTTP/{}.{}", r.version / 10, r.version % 10));
    case AccessField::status: out += std::to_string(r.status); return;
    case AccessField::bytes: out += std::to_string(r.bytes_sent); return;
    case AccessField::decision: return append_text_or_dash(out, access_decision_name(r.decision));
    case AccessField::remaining: out += r.remaining ? std::to_string(*r.remaining) : "-"; return;
    case AccessField::upstream_ms:
        if (r.upstream_ms) return append_ms(out, *r.upstream_ms);
        out += '-';
        return;
    case AccessField::total_ms: return append_ms(out, r.total_ms);
    case AccessField::wait_ms:
        if (r.wait_ms) return append_ms(out, *r.wait_ms);
        out += '-';
        return;
    case AccessField::tunnel_up: out += r.tunnel_up ? std::to_string(*r.tunnel_up) : "-"; return;
    case AccessField::tunnel_down: out += r.tunnel_up ? std::to_string(r.tunnel_down.value_or(0)) : "-"; return;
    case AccessField::tunnel_ms:
        if (r.tunnel_up) return append_ms(out, r.tunnel_ms);
        out += '-';
        return;
    default: return;  // (the text fields, above)
    }
}

std::string ms_json(double ms) {
    std::string out;
    append_ms(out, ms);
    return out;
}

// A field that is not a text field (text_field), as JSON.
std::string json_value(const AccessRecord& r, AccessField field) {
    switch (field) {
    case AccessField::request: {
        std::string line;
        append_request_line(line, r, [](std::string& out, std::string_view v) { out.append(v); });
        return json_string(line);
    }
    case AccessField::protocol: return json_string(fmt::format("HTTP/{}.{}", r.version / 10, r.version % 10));
    case AccessField::status: return std::to_string(r.status);
    case AccessField::bytes: return std::to_string(r.bytes_sent);
    case AccessField::decision: return json_string(access_decision_name(r.decision));
    case AccessField::remaining: return r.remaining ? std::to_string(*r.remaining) : "null";
    case AccessField::upstream_ms: return r.upstream_ms ? ms_json(*r.upstream_ms) : "null";
    case AccessField::total_ms: return ms_json(r.total_ms);
    case AccessField::wait_ms: return r.wait_ms ? ms_json(*r.wait_ms) : "null";
    case AccessField::tunnel_up: return r.tunnel_up ? std::to_string(*r.tunnel_up) : "null";
    case AccessField::tunnel_down: return r.tunnel_up ? std::to_string(r.tunnel_down.value_or(0)) : "null";
    case AccessField::tunnel_ms: return r.tunnel_up ? ms_json(r.tunnel_ms) : "null";
    default: return "null";  // (the text fields: format_access_json writes them)
    }
}

// The fields of the standard line after "client "request" status bytes", as name=value in
// text and as keys in json; wait_ms and the tunnel's only when they have a value. (In place:
// no allocation per line.)
struct NamedFields {
    std::array<AccessField, 16> list;
    std::size_t n = 0;
    void add(AccessField f) { list[n++] = f; }
    const AccessField* begin() const { return list.data(); }
    const AccessField* end() const { return list.data() + n; }
};
NamedFields classic_named_fields(const AccessRecord& r) {
    NamedFields fields;
    fields.add(AccessField::route);
    if (!r.plan.empty()) fields.add(AccessField::plan);
    for (auto f : {AccessField::limit, AccessField::decision, AccessField::remaining, AccessField::upstream_ms,
                   AccessField::total_ms})
        fields.add(f);
    if (r.wait_ms) fields.add(AccessField::wait_ms);
    if (r.tunnel_up) {
        fields.add(AccessField::tunnel_up);
        fields.add(AccessField::tunnel_down);
        fields.add(AccessField::tunnel_ms);
    }
    if (!r.skipped.empty()) fields.add(AccessField::skipped);
    for (auto f : {AccessField::peer, AccessField::request_id, AccessField::host, AccessField::upstream})
        fields.add(f);
    return fields;
}

}  // namespace

std::string_view access_decision_name(AccessDecision decision) {
    switch (decision) {
    case AccessDecision::unlimited: return "unlimited";
    case AccessDecision::allowed: return "allowed";
    case AccessDecision::limited: return "limited";
    case AccessDecision::shadow_limited: return "shadow_limited";
    case AccessDecision::store_error_allowed: return "store_error_allowed";
    case AccessDecision::store_error_denied: return "store_error_denied";
    case AccessDecision::delayed: return "delayed";
    case AccessDecision::exempt: return "exempt";
    case AccessDecision::banned: return "banned";
    }
    return "unlimited";
}

std::string format_access_text(const AccessRecord& r, const AccessFormat& format, std::string_view time) {
    std::string line;
    // (Room for the usual line at once: appending field by field grew it five times.)
    line.reserve(time.size() + 240 + r.target.size() + r.user_agent.size() + r.host.size() + r.skipped.size() +
                 r.client.size() + r.peer.size() + r.upstream.size());
    line += time;
    line += ' ';
    switch (format.kind) {
    case AccessFormat::Kind::classic:
        append_text(line, r, AccessField::client);
        line += " \"";
        append_text(line, r, AccessField::request);
        line += "\" ";
        append_text(line, r, AccessField::status);
        line += ' ';
        append_text(line, r, AccessField::bytes);
        for (const auto field : classic_named_fields(r)) {
            line += ' ';
            line += config::access_field_name(field);
            line += '=';
            append_text(line, r, field);
        }
        line += " user_agent=\"";
        append_text(line, r, AccessField::user_agent);
        line += '"';
        break;
    case AccessFormat::Kind::fields:
        for (std::size_t i = 0; i < format.fields.size(); ++i) {
            if (i > 0) line += ' ';
            line += config::access_field_name(format.fields[i]);
            line += '=';
            std::string value;
            append_text(value, r, format.fields[i]);
            // Quoted when it has a space (escaping leaves no '"' in it to confuse a reader).
            if (value.find(' ') != std::string::npos) {
                line += '"';
                line += value;
                line += '"';
            } else {
                line += value;
            }
        }
        break;
    case AccessFormat::Kind::pattern:
        for (const auto& piece : format.pieces) {
            line += piece.literal;
            if (piece.field) append_text(line, r, *piece.field);
        }
        break;
    }
    return line;
}

std::string format_access_json(const AccessRecord& r, const AccessFormat& format, std::string_view time) {
    std::string out;
    out.reserve(time.size() + 400 + r.target.size() + r.user_agent.size() + r.host.size() + r.skipped.size() +
                r.client.size() + r.peer.size() + r.upstream.size());
    out += "{\"time\":";
    append_json_string(out, time);
    auto field = [&](AccessField f) {
        out += ',';
        append_json_string(out, config::access_field_name(f));
        out += ':';
        // Text fields straight into the line (empty: null); the others through json_value.
        const auto text = text_field(r, f);
        if (!text)
            out += json_value(r, f);
        else if (text->empty())
            out += "null";
        else
            append_json_string(out, *text);
    };
    if (format.kind == AccessFormat::Kind::classic) {
        for (auto f : {AccessField::client, AccessField::request, AccessField::status, AccessField::bytes}) field(f);
        for (const auto f : classic_named_fields(r)) field(f);
        field(AccessField::user_agent);
    } else {
        std::vector<AccessField> seen;
        for (const auto f : format.fields) {
            if (std::find(seen.begin(), seen.end(), f) != seen.end()) continue;  // a key once
            seen.push_back(f);
            field(f);
        }
    }
    out += '}';
    return out;
}

}  // namespace sluice::observe
