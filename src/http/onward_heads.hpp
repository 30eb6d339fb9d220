// The heads sluice sends on, each way: a request as its upstream gets it, a response as its
// client gets it. The framing is chosen here, once, from the parsed message (the BodyWriter
// mode that frames the body after the head), hop-by-hop fields go, and the fields that are
// the proxy's own (X-Forwarded-*, Via, X-Request-Id, the framing) are written. Pure: over
// ClientRequest (requests) and UpstreamResponse (responses), no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/body_reader.hpp"
#include "http/body_writer.hpp"
#include "http/field_list.hpp"
#include "http/h2_codec.hpp"
#include "http/header_rules.hpp"
#include "http/problem.hpp"
#include "limit/rate_limit_headers.hpp"

namespace sluice::http {

// A WebSocket opening handshake (RFC 6455 4.1): GET, HTTP/1.1, Connection: upgrade,
// Upgrade: websocket. Other upgrades (h2c, TLS/1.0, ...) are not relayed: their Upgrade is
// dropped as hop-by-hop and the request goes on as plain HTTP/1.1.
bool is_websocket_handshake(const ClientRequest& req);
// A 101 that switches to WebSocket: Connection: upgrade and one Upgrade: websocket.
bool switches_to_websocket(const UpstreamResponse& res);

struct RequestOnward {
    std::optional<LocalReply> refusal;  // 417: an Expect other than 100-continue
    bool expect_continue = false;       // answer 100 Continue before the body is read
    bool websocket = false;             // a WebSocket handshake: its upgrade goes on
    BodyWriter::Mode body = BodyWriter::Mode::as_is;
};

// Writes the request its upstream gets for `req` (its head was accepted by
// read_request_head; `body` frames its body, of `length` bytes when it has a Content-Length),
// always HTTP/1.1, appending that head to `head`; `req` itself stays as it came. `upstream_name` is the Host of an HTTP/1.0
// request without one (nginx sends its proxy_host); `request_id` replaces any X-Request-Id.
RequestOnward request_onward(const ClientRequest& req, const BodyReader& body, std::uint64_t length,
                             std::string_view upstream_name, const ForwardingInfo& forwarding,
                             std::string_view request_id, std::string& head);

struct ResponseOnward {
    bool keep_alive = false;  // the client connection stays open after it
    BodyWriter::Mode body = BodyWriter::Mode::as_is;
};

// Writes the response a client of `client_version` gets for `res` (an upstream's final
// response, `framing` as check_response_framing read it), with `rate_headers` (names unique,
// none of them Via, Content-Length, Transfer-Encoding or Connection), appending that head to
// `head`; `res` stays as it came. `keep_alive`: the client's connection may stay open (an
// HTTP/1.0 client's closes when the body's end is the connection's).
ResponseOnward response_onward(const UpstreamResponse& res, const Framing& framing,
                               unsigned client_version, bool keep_alive, const limit::HeaderList& rate_headers,
                               std::string& head);

// The same for an HTTP/2 client: the fields of its HEADERS frame (after :status), names in
// lower case, no connection-specific field (RFC 9113 8.2.2), Content-Length where the body's
// length is known. Into `out`, whose strings are reused where they have room (a worker keeps
// one list for every response it hands to nghttp2, which copies them).
void response_onward_h2(UpstreamResponse& res, const Framing& framing, const limit::HeaderList& rate_headers,
                        H2Fields& out);

// Header fields as an HTTP/2 peer gets them: names in lower case.
H2Fields h2_fields(const limit::HeaderList& headers);

}  // namespace sluice::http
