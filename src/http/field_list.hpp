// Heads as sluice reads them: an upstream's response (UpstreamResponse) and a client's
// request (ClientRequest), the start line and the header fields in received order, over one
// copy of the head's bytes. For responses: Beast's parser built a basic_fields for
// every response (an allocation and an ordered-index insertion per field, then the edits of
// response_onward walked and erased through it): about a sixth of sluice's instructions per
// proxied request. The head is already delimited by scan_request_head; one pass checks its
// bytes and splits its lines, which needs no general parser. Pure: no sockets.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include "http/field_text.hpp"

namespace sluice::http {

// Beast's code for a field name (field::unknown for a name it does not know), as
// boost::beast::http::string_to_field, which hashes the name and compares it ignoring case
// every time. The names a thread met last are remembered as spelled (up to 27 bytes, two in
// each of 128 places chosen by a hash of the name): clients', upstreams' and sluice's own
// names are the same few dozen, and one found again costs a comparison.
boost::beast::http::field field_id(std::string_view name);
// How many names this thread's field_id did not find remembered (for tests).
std::uint64_t field_ids_looked_up();

// Whether a field (its code and name) is one named `want_name`, whose code is `want`
// (field_id(want_name)): by code for a name Beast knows, else by name among the fields it
// does not know.
inline bool field_named(boost::beast::http::field id, std::string_view name, boost::beast::http::field want,
                        std::string_view want_name) {
    return want != boost::beast::http::field::unknown
               ? id == want
               : id == boost::beast::http::field::unknown && iequals_ascii(name, want_name);
}

// One header field: views into its FieldList's storage.
class FieldLine {
public:
    FieldLine(boost::beast::http::field id, std::string_view name, std::string_view value)
        : id_(id), name_(name), value_(value) {}
    // Beast's code for the name (field::unknown for a name Beast does not know).
    boost::beast::http::field name() const { return id_; }
    std::string_view name_string() const { return name_; }
    std::string_view value() const { return value_; }

private:
    boost::beast::http::field id_;
    std::string_view name_;
    std::string_view value_;
};

// Header fields in order, with the part of Beast's basic_fields interface that the header
// rules (header_rules.hpp) use: iterate, erase, insert at the end. Names and values live in
// blocks the list owns and never moves, so views stay valid until the list is cleared.
// Neither copied nor moved: its lines point into itself.
class FieldList {
public:
    using value_type = FieldLine;
    using const_iterator = std::vector<FieldLine>::const_iterator;
    using iterator = const_iterator;

    FieldList() = default;
    FieldList(const FieldList&) = delete;
    FieldList& operator=(const FieldList&) = delete;

    const_iterator begin() const { return lines_.begin(); }
    const_iterator end() const { return lines_.end(); }
    std::size_t size() const { return lines_.size(); }
    bool empty() const { return lines_.empty(); }

    const_iterator erase(const_iterator it) { return lines_.erase(it); }
    // A field at the end; the name as Beast spells a known field.
    void insert(boost::beast::http::field name, std::string_view value);
    void insert(std::string_view name, std::string_view value);
    // A field at the end whose name and value are already in this list's storage (or static).
    void insert_kept(boost::beast::http::field id, std::string_view name, std::string_view value) {
        lines_.emplace_back(id, name, value);
    }

    void reserve(std::size_t lines) { lines_.reserve(lines); }
    // Everything gone; the first block of storage is kept for the next head.
    void clear();
    // A copy of `s` in this list's storage, valid until clear().
    std::string_view keep(std::string_view s);

private:
    std::vector<FieldLine> lines_;
    std::vector<std::unique_ptr<char[]>> blocks_;
    std::size_t first_block_size_ = 0;
    char* next_ = nullptr;
    std::size_t room_ = 0;
};

// An upstream's response head, parsed.
struct UpstreamResponse {
    unsigned version = 11;    // 10 or 11: HTTP/1.x with x above 1 is read as HTTP/1.1
    unsigned status = 0;      // 100 to 599
    std::string_view reason;  // as received (in fields' storage); may be empty
    bool keep_alive = false;  // the upstream keeps the connection after this response (Connection)
    FieldList fields;
};

// Parses a complete response head (status line, field lines, blank line: what
// scan_request_head delimits) into `out`, whose storage gets a copy of it, in one pass: a
// status line "HTTP/1.x NNN reason", field names that are tokens followed by the colon (no
// obs-fold, no whitespace before the colon), lines that end in CRLF, no control byte but
// tab in a reason or value (the same bytes check_request_head refuses in a request head).
// More than `max_fields` field lines are refused too. Returns an empty view on success, else
// the problem, worded for the 502 that follows. Any bytes are safe to give it.
std::string_view parse_response_head(std::string_view head, UpstreamResponse& out,
                                     std::size_t max_fields = static_cast<std::size_t>(-1));

// A client's request head, parsed (parse_request_head): the request line and the header
// fields in received order, over one copy of the head's bytes, with the part of Beast's
// request interface sluice uses. Beast's parser built a basic_fields: an allocation, a name
// lookup and an ordered-index insertion per field (about 1,000 instructions a field, most of
// sluice's own work for a browser's request of a dozen fields).
class ClientRequest {
public:
    using const_iterator = FieldList::const_iterator;

    // Beast's code for the method (verb::unknown for a method it does not know) and the
    // method as received (methods are case-sensitive).
    boost::beast::http::verb method() const { return method_; }
    std::string_view method_string() const { return method_string_; }
    std::string_view target() const { return target_; }
    // Replaces the target (copied into the request's storage).
    void target(std::string_view target) { target_ = fields_.keep(target); }
    unsigned version() const { return version_; }  // 10 or 11
    // Whether the client keeps the connection after this request, by its Connection fields:
    // HTTP/1.1 unless one says close; HTTP/1.0 only when one says keep-alive and none close.
    bool keep_alive() const { return keep_alive_; }

    const FieldList& fields() const { return fields_; }
    FieldList& fields() { return fields_; }
    const_iterator begin() const { return fields_.begin(); }
    const_iterator end() const { return fields_.end(); }

    // The value of the first field of this code (a known one, not field::unknown), in the
    // order received.
    std::optional<std::string_view> find(boost::beast::http::field name) const;
    // The same by name, compared ignoring case.
    std::optional<std::string_view> find(std::string_view name) const;

private:
    friend std::string_view parse_request_head(std::string_view head, ClientRequest& out);
    boost::beast::http::verb method_ = boost::beast::http::verb::unknown;
    std::string_view method_string_;
    std::string_view target_;
    unsigned version_ = 11;
    bool keep_alive_ = false;
    FieldList fields_;
};

// Parses a complete request head (request line, field lines, blank line: what
// scan_request_head delimits) into `out`, whose storage gets a copy of it, in one pass.
// What it accepts is exactly what Beast 1.81's request parser accepted: a request line
// "METHOD SP target SP HTTP/1.0 or HTTP/1.1" (a method a token, a target of visible bytes and
// obs-text), field names that are tokens followed by the colon, no control byte but tab in a
// value, lines that end in CRLF, Connection and Proxy-Connection values that are lists of
// tokens, Content-Length a list of equal decimal numbers and not after Transfer-Encoding
// chunked, no Transfer-Encoding after Content-Length or after one ending in chunked.
// (Obs-fold, which Beast unfolded, is refused, as check_request_head refuses it.) A head it
// accepts passes check_request_head too. Returns an empty view on success, else the
// problem, worded for the 400 that follows. Any bytes are safe to give it, but not a view
// into `out` itself: parsing again clears `out`, and every view of its last head goes.
std::string_view parse_request_head(std::string_view head, ClientRequest& out);

}  // namespace sluice::http
