// Finds and checks a raw HTTP/1.1 head: the request smuggling rules on its bytes (bare CR and
// LF, NUL and other control bytes, obs-fold, whitespace before a colon). The same checks serve
// an upstream's response head: nothing in them is particular to requests. Pure: no sockets.
// (parse_request_head refuses every head these rules refuse, so read_request_head looks at
// them only to name the problem of a head the parse refused.)
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice::http {

struct HeadScan {
    enum class State { incomplete, complete, malformed };
    State state = State::incomplete;
    std::size_t head_size = 0;    // bytes up to and including the blank line (when complete)
    std::size_t leading_crlf = 0; // empty lines before the request line, to be skipped
    std::string_view problem;     // why it is malformed
};

// Scans `data` (everything received so far). `scanned` is where a previous call on
// the same data stopped; it is updated so rescanning stays linear.
HeadScan scan_request_head(std::string_view data, std::size_t& scanned);

// Checks the bytes of a complete head (request line, fields, blank line):
// bare LF, bare CR, NUL and other control bytes, obs-fold, whitespace before the colon.
// Returns an empty view when the head is acceptable, else the problem.
std::string_view check_request_head(std::string_view head);

// Where the request line of a complete head ends in "HTTP/d.d": the offset of the major
// digit, or npos when it does not (Beast then refuses the line). sluice reads HTTP/1.x
// with x above 1 as HTTP/1.1 (RFC 9110 2.5) and answers other majors 505; Beast 1.81
// knows only 1.0 and 1.1, so the version is looked at here first.
std::size_t request_version_offset(std::string_view head);

// The request line at the start of `data` (what has arrived of a head, after any leading
// empty lines), once its CRLF is there: an empty view when it ends in " HTTP/d.d" or is not
// complete yet, else why it is refused. A line without a version is HTTP/0.9, which has no
// header lines: waiting for them would hold the client until header_timeout, so such a line
// is refused as soon as it is complete.
std::string_view check_request_line(std::string_view data);

// The number of field lines of a complete head (request or response): its lines less the
// start line and the blank line.
std::size_t count_field_lines(std::string_view head);

// Field lines a head may have: past it a request gets 431 and a response is refused (502),
// whatever max_header_bytes allows (HAProxy's default limit is 101 with the start line).
inline constexpr std::size_t max_field_lines = 100;

}  // namespace sluice::http
