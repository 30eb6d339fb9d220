#include "http/onward_heads.hpp"

#include "http/field_text.hpp"

#include <charconv>
#include <string>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

// The name of a field Beast knows, in lower case (as HTTP/2 sends names), made once.
std::string_view lower_case_name(bhttp::field id) {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> all(static_cast<std::size_t>(bhttp::field::xref) + 1);
        for (std::size_t i = 1; i < all.size(); ++i) {
            const auto name = bhttp::to_string(static_cast<bhttp::field>(i));
            all[i].assign(name.data(), name.size());
            for (auto& c : all[i]) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        return all;
    }();
    const auto index = static_cast<std::size_t>(id);  // (field::unknown, 0: empty)
    return index < names.size() ? std::string_view(names[index]) : std::string_view();
}


template <class L>
bool connection_upgrade(const L& fields) {
    bool found = false;
    for (const auto& f : fields)
        if (f.name() == bhttp::field::connection && has_token(sv(f.value()), "upgrade")) found = true;
    return found;
}

// One Upgrade field whose value is `websocket`.
template <class L>
bool upgrade_is_websocket(const L& fields) {
    std::size_t count = 0;
    bool websocket = false;
    for (const auto& f : fields) {
        if (f.name() != bhttp::field::upgrade) continue;
        ++count;
        websocket = iequals_ascii(sv(f.value()), "websocket");
    }
    return count == 1 && websocket;
}

}  // namespace

bool is_websocket_handshake(const ClientRequest& req) {
    return req.version() == 11 && req.method() == bhttp::verb::get && connection_upgrade(req) &&
           upgrade_is_websocket(req);
}

bool switches_to_websocket(const UpstreamResponse& res) {
    return connection_upgrade(res.fields) && upgrade_is_websocket(res.fields);
}


// Written in one walk over the client's fields, leaving out what goes and adding ours at the
// end: the bytes the field edits wrote (strip_hop_by_hop, strip_framing, the Upgrade of a
// WebSocket handshake, Host, add_forwarding_headers, X-Request-Id, our framing, then
// write_request_head), without an allocation and an ordered-index insertion per edit.
RequestOnward request_onward(const ClientRequest& req, const BodyReader& body, std::uint64_t length,
                             std::string_view upstream_name, const ForwardingInfo& forwarding,
                             std::string_view request_id, std::string& head) {
    RequestOnward out;
    const unsigned client_version = req.version();
    for (const auto& f : req) {
        if (f.name() != bhttp::field::expect) continue;
        // The first Expect decides, as Beast's find() returned it.
        if (!boost::beast::iequals(f.value(), "100-continue")) {
            out.refusal = local_problem(417, "only Expect: 100-continue is supported");
            return out;
        }
        out.expect_continue = client_version >= 11 && !body.done();
        break;
    }
    // Our own framing, never the client's.
    const bool has_body = !body.done();
    if (body.mode() == BodyReader::Mode::chunked) out.body = BodyWriter::Mode::chunked;
    // A WebSocket handshake keeps its upgrade (RFC 6455 handshakes carry no body).
    out.websocket = !has_body && is_websocket_handshake(req);

    const HopByHop hop(req.fields());
    const bool trusted = forwarding.peer_trusted;
    // A trusted peer's chain (written before the peer: no string is built for it)
    boost::container::small_vector<std::string_view, 2> xff;
    std::string via;  // what came, then ours
    bool has_host = false;
    bool kept_proto = false;  // a trusted peer's X-Forwarded-Proto stays where it was

    // Room: the request line, every field that came (the X-Forwarded-For and Via values
    // among them), and ours (their names, the upstream's name, the peer, the request id).
    HeadWriter w(head, req.method_string().size() + req.target().size() + 16 + lines_size(req) + 256 +
                           upstream_name.size() + forwarding.peer_ip.size() + request_id.size());
    w.put(sv(req.method_string()));
    w.put(" ");
    w.put(sv(req.target()));
    w.put(" HTTP/1.1\r\n");
    for (const auto& f : req) {
        const auto id = f.name();
        const auto name = sv(f.name_string());
        const auto value = sv(f.value());
        switch (id) {
        case bhttp::field::expect:
        case bhttp::field::content_length:
        case bhttp::field::transfer_encoding:
            continue;
        case bhttp::field::via:
            via.append(value).append(", ", 2);
            continue;
        case bhttp::field::host:
            has_host = true;
            break;
        case bhttp::field::forwarded:
            // As X-Forwarded-For: what a peer that is not trusted says of the client is not
            // passed on (sluice writes no Forwarded of its own).
            if (!trusted) continue;
            break;
        case bhttp::field::unknown:
            if (!trusted && is_peer_claim(name)) continue;  // X-Real-IP, X-Forwarded-Host...: the same
            break;
        default:
            break;
        }
        if (hop(id, name)) continue;
        if (id == bhttp::field::unknown) {  // (Beast has no code for the three below)
            if (iequals_ascii(name, "X-Forwarded-For")) {
                if (trusted && !trim_ows(value).empty()) xff.push_back(trim_ows(value));
                continue;
            }
            if (iequals_ascii(name, "X-Forwarded-Proto")) {
                if (!trusted) continue;
                kept_proto = true;
            }
            if (iequals_ascii(name, "X-Request-Id")) continue;
        }
        w.field(name, value);
    }
    if (out.websocket) {  // both were left out as hop-by-hop
        w.field("Connection", "upgrade");
        w.field("Upgrade", "websocket");
    }
    // Forwarded as HTTP/1.1, which needs a Host: an HTTP/1.0 request without one gets the
    // upstream's name, as nginx sends its proxy_host.
    if (!has_host) w.field("Host", upstream_name);
    w.put("X-Forwarded-For: ");
    for (const auto chain : xff) {
        w.put(chain);
        w.put(", ");
    }
    w.put(forwarding.peer_ip);
    w.put("\r\n");
    if (!kept_proto) w.field("X-Forwarded-Proto", forwarding.tls ? "https" : "http");
    via.append(forwarding.client_version >= 11 ? "1.1 sluice" : "1.0 sluice");
    w.field("Via", via);
    w.field("X-Request-Id", request_id);
    if (body.mode() == BodyReader::Mode::length) {
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, length).ptr;
        w.field("Content-Length", std::string_view(digits, static_cast<std::size_t>(end - digits)));
    } else if (out.body == BodyWriter::Mode::chunked) {
        w.field("Transfer-Encoding", "chunked");
    }
    w.put("\r\n");
    return out;
}

// Written in one walk over the upstream's fields, leaving out what goes and adding ours at
// the end: the bytes the field edits wrote (strip_hop_by_hop, strip_framing, append_via, our
// framing, the rate-limit fields replacing any of their names, Connection, then
// write_response_head), without a walk over the fields per edit.
ResponseOnward response_onward(const UpstreamResponse& response, const Framing& framing, unsigned client_version,
                               bool keep_alive, const limit::HeaderList& rate_headers, std::string& head) {
    using Body = Framing::Body;
    ResponseOnward out;
    out.keep_alive = keep_alive;
    const unsigned status = response.status;
    const auto& res = response.fields;
    const HopByHop hop(res);
    // Without a body (HEAD, 304) a valid Content-Length still describes the resource and
    // stays; every other framing field is ours to write.
    const bool keeps_length = framing.body == Body::none && status != 204;
    if (framing.body == Body::chunked || framing.body == Body::until_close) {
        if (client_version >= 11)
            out.body = BodyWriter::Mode::chunked;
        else
            out.keep_alive = false;  // HTTP/1.0: the body ends when the connection closes
    }
    // A rate-limit field replaces the upstream's fields of its name (their codes looked up once).
    boost::container::small_vector<bhttp::field, 6> rate_ids;
    for (const auto& [name, value] : rate_headers) rate_ids.push_back(field_id(name));
    const auto replaced = [&](bhttp::field id, std::string_view name) {
        for (std::size_t i = 0; i < rate_ids.size(); ++i)
            if (field_named(id, name, rate_ids[i], rate_headers[i].first)) return true;
        return false;
    };

    write_status_line(client_version, status, response.reason, head);
    // Written into room made once: every field that came (Via's values among them) and ours
    // (Via's name and ours, the framing, Connection, the blank line: under 96 bytes).
    std::size_t room = 96 + lines_size(res);
    for (const auto& [name, value] : rate_headers) room += name.size() + value.size() + 4;
    HeadWriter w(head, room);
    bool via = false;  // Via values came: all of them go first in ours (none is hop-by-hop)
    for (const auto& f : res) {
        const auto id = f.name();
        if (id == bhttp::field::via) {
            via = true;
            continue;
        }
        if (id == bhttp::field::connection || hop(id, f.name_string())) continue;
        if (id == bhttp::field::transfer_encoding || (id == bhttp::field::content_length && !keeps_length)) continue;
        if (!rate_ids.empty() && replaced(id, f.name_string())) continue;
        w.field(f.name_string(), f.value());
    }
    w.put("Via: ");
    if (via) {
        for (const auto& f : res) {
            if (f.name() != bhttp::field::via) continue;
            w.put(f.value());
            w.put(", ");
        }
    }
    w.put(response.version >= 11 ? "1.1 sluice\r\n" : "1.0 sluice\r\n");
    if (framing.body == Body::length) {
        char digits[24];
        const auto end = std::to_chars(digits, digits + sizeof digits, framing.length).ptr;
        w.field("Content-Length", std::string_view(digits, static_cast<std::size_t>(end - digits)));
    } else if (out.body == BodyWriter::Mode::chunked) {
        w.field("Transfer-Encoding", "chunked");
    }
    for (const auto& [name, value] : rate_headers) w.field(name, value);
    if (client_version >= 11 && !out.keep_alive)
        w.field("Connection", "close");
    else if (client_version < 11 && out.keep_alive)
        w.field("Connection", "keep-alive");
    w.put("\r\n");
    return out;
}

void response_onward_h2(UpstreamResponse& response, const Framing& framing, const limit::HeaderList& rate_headers,
                        H2Fields& out) {
    const unsigned status = response.status;
    auto& res = response.fields;
    strip_hop_by_hop(res);
    if (framing.body != Framing::Body::none || status == 204)
        strip_framing(res);
    else
        erase_all(res, bhttp::field::transfer_encoding);
    erase_all(res, bhttp::field::keep_alive);
    erase_all(res, bhttp::field::proxy_connection);
    append_via(res, response.version);
    if (framing.body == Framing::Body::length)
        replace_field(res, bhttp::field::content_length, std::to_string(framing.length));
    for (const auto& [name, value] : rate_headers) replace_field(res, name, value);
    out.resize(res.size());
    std::size_t i = 0;
    for (const auto& f : res) {
        auto& [name, value] = out[i++];
        if (const auto known = lower_case_name(f.name()); !known.empty()) {
            name.assign(known);  // a field Beast knows: its name made once
        } else {
            name.assign(sv(f.name_string()));
            for (auto& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        value.assign(sv(f.value()));
    }
}

H2Fields h2_fields(const limit::HeaderList& headers) {
    H2Fields out;
    for (const auto& [name, value] : headers) {
        std::string lower(name);
        for (auto& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
        out.emplace_back(std::move(lower), value);
    }
    return out;
}

}  // namespace sluice::http
