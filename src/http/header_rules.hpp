// Header rules of a proxy, as pure functions over Beast's field container (a request's
// fields) and over FieldList (an upstream response's): request framing checks, hop-by-hop
// removal and the forwarding headers. request_onward writes a request's onward head in one
// walk instead of through these edits; the edits on Beast's container (strip_hop_by_hop,
// add_forwarding_headers, write_request_head, ...) stay as the reference its differential
// test and the head_scan fuzz target check it against.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/fields.hpp>

#include "http/field_list.hpp"
#include "http/field_text.hpp"

namespace sluice::http {

using Fields = boost::beast::http::fields;

// A Beast string view (Boost's own type in 1.81) as a std::string_view.
inline std::string_view sv(boost::beast::string_view s) { return {s.data(), s.size()}; }
inline std::string_view sv(std::string_view s) { return s; }

// How a message's body is delimited (RFC 9112 6.3), as read from its head. What sluice
// forwards is always framed again by sluice from this, never relayed as it came.
struct Framing {
    enum class Body { none, length, chunked, until_close };
    Body body = Body::none;
    std::uint64_t length = 0;    // Body::length
    unsigned status = 0;         // 0: fine; else the status to answer (400, 501, 502)
    std::string_view problem;    // why, when status != 0
    // A response without a body by the rules (to HEAD, 204, 304) whose fields announce one
    // (Transfer-Encoding, a Content-Length above 0: as they may, for HEAD and 304). A server
    // that sends that body anyway sends it after its response, maybe in a later packet (the
    // peek before reuse cannot see what has not arrived): such a connection is not reused.
    bool announced_body = false;
    bool ok() const { return status == 0; }
};

// The framing of a request, refusing what is ambiguous (request smuggling): Content-Length
// with Transfer-Encoding, repeated or non-numeric Content-Length, Transfer-Encoding in
// HTTP/1.0, chunked applied twice (400), a transfer coding other than chunked (501, as
// nginx), repeated Host, HTTP/1.1 without Host (400). Without either field: no body.
Framing check_request_framing(const Fields& fields, unsigned version);
Framing check_request_framing(const FieldList& fields, unsigned version);

// The framing of an upstream's response to a request (`head_request`: it was HEAD), with
// status `status`. No body for HEAD, 1xx, 204 and 304 whatever the fields say; otherwise
// the same refusals as for a request, as 502, and a body until the connection closes when
// neither Content-Length nor Transfer-Encoding is present.
Framing check_response_framing(const Fields& fields, unsigned version, unsigned status, bool head_request);
Framing check_response_framing(const FieldList& fields, unsigned version, unsigned status, bool head_request);

// Removes Connection, every field it names, and the fixed hop-by-hop fields. A Connection
// option naming a field that frames the message or that the proxy itself sets
// (Content-Length, Transfer-Encoding, Host, X-Forwarded-For, X-Forwarded-Proto, Via) is
// ignored: such a field is never hop-by-hop, and removing it would let a client change how
// the upstream reads the request (RFC 9110 7.6.1 forbids a sender to list them). Ignoring
// rather than refusing follows nginx and HAProxy, which accept such requests.
void strip_hop_by_hop(Fields& fields);
// The same rule as a test per field, for a writer that leaves such fields out rather than
// erasing them: Connection, the fixed hop-by-hop fields and those Connection names (views
// into `fields`, which must outlive it).
class HopByHop {
public:
    explicit HopByHop(const Fields& fields);
    explicit HopByHop(const FieldList& fields);
    bool operator()(boost::beast::http::field id, std::string_view name) const;

private:
    template <class L>
    void read(const L& fields);
    std::vector<std::string_view> named_;
    bool names_close_ = false;
};
void strip_hop_by_hop(FieldList& fields);

// Removes Content-Length and Transfer-Encoding: done before sluice writes its own framing.
void strip_framing(Fields& fields);
void strip_framing(FieldList& fields);

// Every field of this name removed, in one walk over the fields (Beast's erase(name) and
// set(name, value) look the name up in its ordered index, a case-insensitive string compare
// per step, which costs more than walking a message's few fields).
// `name` a known field (field::unknown would match every field Beast does not know).
void erase_all(Fields& fields, boost::beast::http::field name);
void erase_all(Fields& fields, std::string_view name);
void erase_all(FieldList& fields, boost::beast::http::field name);
void erase_all(FieldList& fields, std::string_view name);
// Beast's set(name, value) (every field of the name removed, one added at the end), the same way.
void replace_field(Fields& fields, boost::beast::http::field name, std::string_view value);
void replace_field(Fields& fields, std::string_view name, std::string_view value);
void replace_field(FieldList& fields, boost::beast::http::field name, std::string_view value);
void replace_field(FieldList& fields, std::string_view name, std::string_view value);

struct ForwardingInfo {
    std::string_view peer_ip;   // TCP peer, as text
    bool peer_trusted = false;  // peer is in client_ip.trusted_proxies
    unsigned client_version = 11;
    bool tls = false;           // the client connection is TLS: X-Forwarded-Proto: https
};

// What a hop says of the client or of how it addressed the request, besides X-Forwarded-For
// and -Proto: Forwarded (RFC 7239), X-Real-IP, X-Forwarded-Host, X-Forwarded-Port and
// X-Forwarded-Prefix. Frameworks take them for the client's address or for building links;
// from a peer that is not a trusted proxy they are a client's claims, and are not passed on.
bool is_peer_claim(std::string_view name);

// Sets X-Forwarded-For, X-Forwarded-Proto and Via on a request going upstream; removes the
// peer claims (is_peer_claim) unless the peer is trusted.
// Call after strip_hop_by_hop.
void add_forwarding_headers(Fields& fields, const ForwardingInfo& info);

// Appends "1.1 sluice" (or "1.0 sluice") to Via.
void append_via(Fields& fields, unsigned version);
void append_via(FieldList& fields, unsigned version);

// A message head as it goes on the wire (start line, every field in order as
// "name: value", blank line), appended to `out`: the bytes Beast's serializer writes for the
// same message, without walking its buffer sequences field by field. `reason` empty: the
// standard reason phrase of `status`.
void write_request_head(std::string_view method, std::string_view target, unsigned version, const Fields& fields,
                        std::string& out);
void write_response_head(unsigned version, unsigned status, std::string_view reason, const Fields& fields,
                         std::string& out);
void write_response_head(unsigned version, unsigned status, std::string_view reason, const FieldList& fields,
                         std::string& out);
// Its first line alone: "HTTP/1.x NNN reason" and CRLF (the standard reason when `reason` is empty).
void write_status_line(unsigned version, unsigned status, std::string_view reason, std::string& out);

// True if `value` (a comma-separated list) contains `token`, case-insensitively.
bool has_token(std::string_view value, std::string_view token);

}  // namespace sluice::http
