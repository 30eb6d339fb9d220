#include "http/onward_heads.hpp"

#include <boost/beast/core/string.hpp>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;


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
        const auto v = sv(f.value());
        websocket = boost::beast::iequals(boost::beast::string_view(v.data(), v.size()), "websocket");
    }
    return count == 1 && websocket;
}

}  // namespace

bool is_websocket_handshake(const bhttp::request_header<>& req) {
    return req.version() == 11 && req.method() == bhttp::verb::get && connection_upgrade(req) &&
           upgrade_is_websocket(req);
}

bool switches_to_websocket(const UpstreamResponse& res) {
    return connection_upgrade(res.fields) && upgrade_is_websocket(res.fields);
}

RequestOnward request_onward(bhttp::request<bhttp::empty_body>& req, const BodyReader& body, std::uint64_t length,
                             std::string_view upstream_name, const ForwardingInfo& forwarding,
                             std::string_view request_id, std::string& head) {
    RequestOnward out;
    const unsigned client_version = req.version();
    if (auto it = req.find(bhttp::field::expect); it != req.end()) {
        if (!boost::beast::iequals(it->value(), "100-continue")) {
            out.refusal = local_problem(417, "only Expect: 100-continue is supported");
            return out;
        }
        out.expect_continue = client_version >= 11 && !body.done();
        erase_all(req, bhttp::field::expect);
    }
    // Our own framing, never the client's.
    const bool has_body = !body.done();
    if (body.mode() == BodyReader::Mode::chunked) out.body = BodyWriter::Mode::chunked;
    // A WebSocket handshake keeps its upgrade (RFC 6455 handshakes carry no body).
    out.websocket = !has_body && is_websocket_handshake(req);
    strip_hop_by_hop(req);
    strip_framing(req);
    if (out.websocket) {  // both were removed as hop-by-hop
        req.insert(bhttp::field::connection, "upgrade");
        req.insert(bhttp::field::upgrade, "websocket");
    }
    // Forwarded as HTTP/1.1, which needs a Host: an HTTP/1.0 request without one gets the
    // upstream's name, as nginx sends its proxy_host.
    bool has_host = false;
    for (const auto& f : req) has_host = has_host || f.name() == bhttp::field::host;
    if (!has_host) req.insert(bhttp::field::host, upstream_name);
    add_forwarding_headers(req, forwarding);
    replace_field(req, "X-Request-Id", request_id);
    // strip_framing removed both
    if (body.mode() == BodyReader::Mode::length)
        req.insert(bhttp::field::content_length, std::to_string(length));
    else if (out.body == BodyWriter::Mode::chunked)
        req.insert(bhttp::field::transfer_encoding, "chunked");
    write_request_head(sv(req.method_string()), sv(req.target()), 11, req, head);
    return out;
}

ResponseOnward response_onward(UpstreamResponse& response, const Framing& framing, unsigned client_version,
                               bool keep_alive, const limit::HeaderList& rate_headers, std::string& head) {
    using Body = Framing::Body;
    ResponseOnward out;
    out.keep_alive = keep_alive;
    const unsigned status = response.status;
    auto& res = response.fields;
    strip_hop_by_hop(res);
    // Without a body (HEAD, 304) a valid Content-Length still describes the resource and
    // stays; every other framing field is ours to write.
    if (framing.body != Body::none || status == 204)
        strip_framing(res);
    else
        erase_all(res, bhttp::field::transfer_encoding);
    append_via(res, response.version);
    if (framing.body == Body::length) {
        replace_field(res, bhttp::field::content_length, std::to_string(framing.length));
    } else if (framing.body == Body::chunked || framing.body == Body::until_close) {
        if (client_version >= 11) {
            res.insert(bhttp::field::transfer_encoding, "chunked");  // strip_framing removed it
            out.body = BodyWriter::Mode::chunked;
        } else {
            out.keep_alive = false;  // HTTP/1.0: the body ends when the connection closes
        }
    }
    for (const auto& [name, value] : rate_headers) replace_field(res, name, value);
    // What Beast's keep_alive() writes into an absent Connection (strip_hop_by_hop took it),
    // without its two look-ups of the field.
    erase_all(res, bhttp::field::connection);
    if (client_version >= 11 && !out.keep_alive)
        res.insert(bhttp::field::connection, "close");
    else if (client_version < 11 && out.keep_alive)
        res.insert(bhttp::field::connection, "keep-alive");
    write_response_head(client_version, status, response.reason, res, head);
    return out;
}

H2Fields response_onward_h2(UpstreamResponse& response, const Framing& framing,
                            const limit::HeaderList& rate_headers) {
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
    H2Fields out;
    out.reserve(16);
    for (const auto& f : res) {
        std::string name(sv(f.name_string()));
        for (auto& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
        out.emplace_back(std::move(name), std::string(sv(f.value())));
    }
    return out;
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
