// Header rules of a proxy, as pure functions over Beast's field container:
// request framing checks, hop-by-hop removal and the forwarding headers.
#pragma once

#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>

namespace sluice::http {

using Fields = boost::beast::http::fields;

// Framing problems that make a request ambiguous (request smuggling): Content-Length
// with Transfer-Encoding, repeated or non-numeric Content-Length, a Transfer-Encoding
// whose final coding is not chunked, repeated Host. Empty view when fine.
std::string_view check_request_framing(const Fields& fields, unsigned version);

// Removes Connection, every field it names, and the fixed hop-by-hop fields.
void strip_hop_by_hop(Fields& fields);

struct ForwardingInfo {
    std::string_view peer_ip;   // TCP peer, as text
    bool peer_trusted = false;  // peer is in client_ip.trusted_proxies
    unsigned client_version = 11;
};

// Sets X-Forwarded-For, X-Forwarded-Proto and Via on a request going upstream.
// Call after strip_hop_by_hop.
void add_forwarding_headers(Fields& fields, const ForwardingInfo& info);

// Appends "1.1 sluice" (or "1.0 sluice") to Via.
void append_via(Fields& fields, unsigned version);

// A message head as it goes on the wire (start line, every field in order as
// "name: value", blank line), appended to `out`: the bytes Beast's serializer writes for the
// same message, without walking its buffer sequences field by field. `reason` empty: the
// standard reason phrase of `status`.
void write_request_head(std::string_view method, std::string_view target, unsigned version, const Fields& fields,
                        std::string& out);
void write_response_head(unsigned version, unsigned status, std::string_view reason, const Fields& fields,
                         std::string& out);

// True if `value` (a comma-separated list) contains `token`, case-insensitively.
bool has_token(std::string_view value, std::string_view token);

}  // namespace sluice::http
