#include "http/header_rules.hpp"

#include "http/field_text.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <vector>

#include <boost/beast/http/status.hpp>

namespace sluice::http {
namespace bhttp = boost::beast::http;

namespace {

template <class F>
void for_each_token(std::string_view list, F&& f) {
    while (!list.empty()) {
        auto comma = list.find(',');
        auto item = trim_ows(list.substr(0, comma));
        if (!item.empty()) f(item);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
}

// Calls f(value) for every field with this name, in received order.
template <class L, class F>
void for_each_value(const L& fields, bhttp::field name, F&& f) {
    for (const auto& field : fields)
        if (field.name() == name) f(sv(field.value()));
}

template <class L, class F>
void for_each_value(const L& fields, std::string_view name, F&& f) {
    for (const auto& field : fields)
        if (iequals_ascii(sv(field.name_string()), name)) f(sv(field.value()));
}

constexpr std::string_view x_forwarded_for = "X-Forwarded-For";
constexpr std::string_view x_forwarded_proto = "X-Forwarded-Proto";

// Fields a Connection option may not remove (see strip_hop_by_hop).
bool is_protected(std::string_view name) {
    for (std::string_view p : {"content-length", "transfer-encoding", "host", "x-forwarded-for", "x-forwarded-proto",
                               "via"})
        if (iequals_ascii(name, p)) return true;
    return false;
}

}  // namespace

template <class L>
void HopByHop::read(const L& fields) {
    for (const auto& f : fields) {
        if (f.name() != bhttp::field::connection) continue;
        for_each_token(sv(f.value()), [&](std::string_view t) {
            // The usual options first, without an allocation: keep-alive names a field
            // removed anyway, close one that is rare (RFC 9110 reserves the name) but goes too.
            if (iequals_ascii(t, "keep-alive") || is_protected(t)) return;
            if (iequals_ascii(t, "close"))
                names_close_ = true;
            else
                named_.push_back(t);
        });
    }
}

HopByHop::HopByHop(const Fields& fields) { read(fields); }
HopByHop::HopByHop(const FieldList& fields) { read(fields); }

bool HopByHop::operator()(bhttp::field id, std::string_view name) const {
    switch (id) {
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::proxy_connection:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::transfer_encoding:
    case bhttp::field::upgrade:
    case bhttp::field::proxy_authenticate:
    case bhttp::field::proxy_authorization:
    case bhttp::field::http2_settings:  // (the h2c upgrade's, which sluice does not offer)
        return true;
    default:
        if (names_close_ && iequals_ascii(name, "close")) return true;
        for (auto token : named_)
            if (iequals_ascii(name, token)) return true;
        return false;
    }
}

bool has_token(std::string_view value, std::string_view token) {
    bool found = false;
    for_each_token(value, [&](std::string_view t) { found = found || iequals_ascii(t, token); });
    return found;
}

namespace {

// A Content-Length value: 1 to 19 digits (no sign, no list, no whitespace inside).
bool parse_length(std::string_view v, std::uint64_t& out) {
    v = trim_ows(v);
    if (v.empty() || v.size() > 19) return false;
    std::uint64_t n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return false;
        n = n * 10 + static_cast<unsigned>(c - '0');
    }
    out = n;
    return true;
}

// The parts of the framing common to requests and responses.
struct FieldCount {
    std::size_t content_lengths = 0;
    bool length_valid = true;
    std::uint64_t length = 0;
    std::size_t transfer_encodings = 0;
    std::size_t chunked = 0;        // "chunked" codings, over all Transfer-Encoding fields
    std::size_t other_codings = 0;  // any other coding
    bool chunked_last = false;
    std::size_t empty_transfer_encodings = 0;  // Transfer-Encoding fields naming no coding
    std::size_t hosts = 0;
};

template <class L>
FieldCount count_framing_fields(const L& fields) {
    FieldCount n;
    for (const auto& f : fields) {
        switch (f.name()) {
        case bhttp::field::content_length:
            ++n.content_lengths;
            n.length_valid = n.length_valid && parse_length(sv(f.value()), n.length);
            break;
        case bhttp::field::transfer_encoding: {
            ++n.transfer_encodings;
            // Empty list elements (",chunked") are allowed by the list syntax and skipped.
            bool named = false;
            for_each_token(sv(f.value()), [&](std::string_view t) {
                const bool chunked = iequals_ascii(t, "chunked");
                (chunked ? n.chunked : n.other_codings) += 1;
                n.chunked_last = chunked;
                named = true;
            });
            if (!named) ++n.empty_transfer_encodings;
            break;
        }
        case bhttp::field::host:
            ++n.hosts;
            break;
        default:
            break;
        }
    }
    return n;
}

Framing refuse(unsigned status, std::string_view problem) {
    Framing f;
    f.status = status;
    f.problem = problem;
    return f;
}

template <class L>
Framing request_framing(const L& fields, unsigned version) {
    const auto n = count_framing_fields(fields);
    if (n.content_lengths > 1) return refuse(400, "repeated Content-Length");
    if (!n.length_valid) return refuse(400, "invalid Content-Length");
    if (n.content_lengths && n.transfer_encodings) return refuse(400, "Content-Length together with Transfer-Encoding");
    if (n.hosts > 1) return refuse(400, "repeated Host");
    if (n.hosts == 0 && version >= 11) return refuse(400, "missing Host");
    Framing f;
    if (n.transfer_encodings) {
        if (version < 11) return refuse(400, "Transfer-Encoding in an HTTP/1.0 request");
        if (n.chunked == 0 && n.other_codings == 0) return refuse(400, "empty Transfer-Encoding");
        if (n.chunked > 1) return refuse(400, "Transfer-Encoding applies chunked more than once");
        if (n.other_codings) {
            if (!n.chunked_last) return refuse(400, "Transfer-Encoding does not end in chunked");
            return refuse(501, "transfer codings other than chunked are not supported");
        }
        f.body = Framing::Body::chunked;
    } else if (n.content_lengths) {
        f.body = Framing::Body::length;
        f.length = n.length;
    }
    return f;
}

}  // namespace

Framing check_request_framing(const Fields& fields, unsigned version) { return request_framing(fields, version); }
Framing check_request_framing(const FieldList& fields, unsigned version) { return request_framing(fields, version); }

namespace {

template <class L>
Framing response_framing(const L& fields, unsigned version, unsigned status, bool head_request) {
    const auto n = count_framing_fields(fields);
    // Even where no body follows, a Content-Length that is forwarded must make sense.
    if (n.content_lengths > 1) return refuse(502, "upstream sent a repeated Content-Length");
    if (!n.length_valid) return refuse(502, "upstream sent an invalid Content-Length");
    // Ambiguous whatever follows (Beast's parser refused it in every response too).
    if (n.transfer_encodings && n.content_lengths)
        return refuse(502, "upstream sent Content-Length together with Transfer-Encoding");
    if (n.chunked > 1) return refuse(502, "upstream sent a Transfer-Encoding that applies chunked more than once");
    if (n.chunked && !n.chunked_last) return refuse(502, "upstream sent a Transfer-Encoding that does not end in chunked");
    if (n.empty_transfer_encodings) return refuse(502, "upstream sent an empty Transfer-Encoding");
    Framing f;
    if (head_request || status < 200 || status == 204 || status == 304) {
        f.announced_body = n.transfer_encodings > 0 || (n.content_lengths > 0 && n.length > 0);
        return f;
    }
    if (n.transfer_encodings) {
        if (version < 11) return refuse(502, "upstream sent Transfer-Encoding in an HTTP/1.0 response");
        // As nginx: a coding sluice would pass on undecoded is refused rather than relayed.
        if (n.chunked != 1 || n.other_codings) return refuse(502, "upstream sent a Transfer-Encoding other than chunked");
        f.body = Framing::Body::chunked;
    } else if (n.content_lengths) {
        f.body = Framing::Body::length;
        f.length = n.length;
    } else {
        f.body = Framing::Body::until_close;
    }
    return f;
}

template <class L>
void strip_framing_of(L& fields) {
    erase_all(fields, bhttp::field::content_length);
    erase_all(fields, bhttp::field::transfer_encoding);
}

template <class L>
void erase_all_of(L& fields, bhttp::field name) {
    if (name == bhttp::field::unknown) return;  // as Beast's erase(name), which asserts it
    for (auto it = fields.begin(); it != fields.end();) it = it->name() == name ? fields.erase(it) : std::next(it);
}

// By name: by code for a name Beast knows, else by name among the fields it does not know.
template <class L>
void erase_all_of(L& fields, std::string_view name) {
    const auto id = field_id(name);
    for (auto it = fields.begin(); it != fields.end();)
        it = field_named(it->name(), sv(it->name_string()), id, name) ? fields.erase(it) : std::next(it);
}

template <class L>
void replace_field_of(L& fields, bhttp::field name, std::string_view value) {
    erase_all(fields, name);
    fields.insert(name, value);
}

template <class L>
void replace_field_of(L& fields, std::string_view name, std::string_view value) {
    erase_all(fields, name);
    fields.insert(name, value);
}

template <class L>
void strip_hop_by_hop_of(L& fields) {
    const HopByHop hop(fields);
    bool has_connection = false;
    for (auto it = fields.begin(); it != fields.end();) {
        // Connection itself goes last: the tokens the test holds are views into its values.
        if (it->name() == bhttp::field::connection) {
            has_connection = true;
            ++it;
            continue;
        }
        it = hop(it->name(), sv(it->name_string())) ? fields.erase(it) : std::next(it);
    }
    if (has_connection) erase_all(fields, bhttp::field::connection);
}

template <class L>
void append_via_of(L& fields, unsigned version) {
    std::string_view ours = version >= 11 ? "1.1 sluice" : "1.0 sluice";
    std::string joined;
    for_each_value(fields, bhttp::field::via, [&](std::string_view v) {
        joined += v;
        joined += ", ";
    });
    joined += ours;
    replace_field(fields, bhttp::field::via, joined);
}

}  // namespace

Framing check_response_framing(const Fields& fields, unsigned version, unsigned status, bool head_request) {
    return response_framing(fields, version, status, head_request);
}
Framing check_response_framing(const FieldList& fields, unsigned version, unsigned status, bool head_request) {
    return response_framing(fields, version, status, head_request);
}
void strip_framing(Fields& fields) { strip_framing_of(fields); }
void strip_framing(FieldList& fields) { strip_framing_of(fields); }
void erase_all(Fields& fields, bhttp::field name) { erase_all_of(fields, name); }
void erase_all(FieldList& fields, bhttp::field name) { erase_all_of(fields, name); }
void erase_all(Fields& fields, std::string_view name) { erase_all_of(fields, name); }
void erase_all(FieldList& fields, std::string_view name) { erase_all_of(fields, name); }
void replace_field(Fields& fields, bhttp::field name, std::string_view value) { replace_field_of(fields, name, value); }
void replace_field(FieldList& fields, bhttp::field name, std::string_view value) {
    replace_field_of(fields, name, value);
}
void replace_field(Fields& fields, std::string_view name, std::string_view value) {
    replace_field_of(fields, name, value);
}
void replace_field(FieldList& fields, std::string_view name, std::string_view value) {
    replace_field_of(fields, name, value);
}
void strip_hop_by_hop(Fields& fields) { strip_hop_by_hop_of(fields); }
void strip_hop_by_hop(FieldList& fields) { strip_hop_by_hop_of(fields); }
void append_via(Fields& fields, unsigned version) { append_via_of(fields, version); }
void append_via(FieldList& fields, unsigned version) { append_via_of(fields, version); }

bool is_peer_claim(std::string_view name) {
    switch (name.size()) {
    case 9: return iequals_ascii(name, "Forwarded") || iequals_ascii(name, "X-Real-IP");
    case 16: return iequals_ascii(name, "X-Forwarded-Host") || iequals_ascii(name, "X-Forwarded-Port");
    case 18: return iequals_ascii(name, "X-Forwarded-Prefix");
    default: return false;
    }
}

void add_forwarding_headers(Fields& fields, const ForwardingInfo& info) {
    std::string xff;
    if (info.peer_trusted) {
        for_each_value(fields, x_forwarded_for, [&](std::string_view v) {
            v = trim_ows(v);
            if (v.empty()) return;
            xff += v;
            xff += ", ";
        });
    }
    xff += info.peer_ip;
    replace_field(fields, x_forwarded_for, xff);
    if (!info.peer_trusted)
        for (auto it = fields.begin(); it != fields.end();)
            it = is_peer_claim(sv(it->name_string())) ? fields.erase(it) : std::next(it);

    bool has_proto = false;
    if (info.peer_trusted) for_each_value(fields, x_forwarded_proto, [&](std::string_view) { has_proto = true; });
    if (!has_proto) replace_field(fields, x_forwarded_proto, info.tls ? "https" : "http");
    append_via(fields, info.client_version);
}

namespace {

void append_version(unsigned version, std::string& out) {
    out += "HTTP/";
    out += static_cast<char>('0' + version / 10 % 10);
    out += '.';
    out += static_cast<char>('0' + version % 10);
}

// The fields, then the blank line, written into `out` grown once to its final size.
template <class L>
void append_fields(const L& fields, std::string& out) {
    HeadWriter w(out, lines_size(fields) + 2);
    for (const auto& field : fields) w.field(sv(field.name_string()), sv(field.value()));
    w.put("\r\n");
}

}  // namespace

void write_request_head(std::string_view method, std::string_view target, unsigned version, const Fields& fields,
                        std::string& out) {
    out.append(method).append(" ", 1).append(target).append(" ", 1);
    append_version(version, out);
    out.append("\r\n", 2);
    append_fields(fields, out);
}

namespace {

template <class L>
void response_head(unsigned version, unsigned status, std::string_view reason, const L& fields, std::string& out) {
    write_status_line(version, status, reason, out);
    append_fields(fields, out);
}

}  // namespace

void write_status_line(unsigned version, unsigned status, std::string_view reason, std::string& out) {
    if (reason.empty()) {
        const auto standard = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
        reason = std::string_view(standard.data(), standard.size());
    }
    const char line[13] = {'H', 'T', 'T', 'P', '/', static_cast<char>('0' + version / 10 % 10), '.',
                           static_cast<char>('0' + version % 10), ' ', static_cast<char>('0' + status / 100 % 10),
                           static_cast<char>('0' + status / 10 % 10), static_cast<char>('0' + status % 10), ' '};
    out.append(line, sizeof line).append(reason).append("\r\n", 2);
}

void write_response_head(unsigned version, unsigned status, std::string_view reason, const Fields& fields,
                         std::string& out) {
    response_head(version, status, reason, fields, out);
}
void write_response_head(unsigned version, unsigned status, std::string_view reason, const FieldList& fields,
                         std::string& out) {
    response_head(version, status, reason, fields, out);
}

}  // namespace sluice::http
