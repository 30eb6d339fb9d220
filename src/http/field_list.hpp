// An upstream's response head as sluice reads it: the status line and the header fields in
// received order, over one copy of the head's bytes. Beast's parser built a basic_fields for
// every response (an allocation and an ordered-index insertion per field, then the edits of
// response_onward walked and erased through it): about a sixth of sluice's instructions per
// proxied request. The head is already delimited by scan_request_head; one pass checks its
// bytes and splits its lines, which needs no general parser. Pure: no sockets.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include <boost/beast/http/field.hpp>

namespace sluice::http {

// Beast's code for a field name (field::unknown for a name it does not know), as
// boost::beast::http::string_to_field, which hashes the name and compares it ignoring case
// every time. The names a thread met last are remembered as spelled (up to 27 bytes, 128 of
// them, by a hash of length and three bytes): an upstream's or sluice's own names are the same
// few, and one found again costs a comparison.
boost::beast::http::field field_id(std::string_view name);

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

}  // namespace sluice::http
