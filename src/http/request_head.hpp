// The request path's first phase: a complete request head, as read_head framed it, to a
// request that routing, limits and forwarding can use, or the answer that refuses it. Every
// check that needs only the head's bytes and the server settings is here: our byte rules
// (request smuggling), the number of field lines, the version, the parse (parse_request_head),
// RFC 9112 framing, the body size a Content-Length announces, the target and Host.
// Pure: no sockets (the session reads, this decides).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "config/config.hpp"
#include "http/body_reader.hpp"
#include "http/field_list.hpp"
#include "http/problem.hpp"
#include "http/request_target.hpp"
#include "observe/access_log.hpp"

namespace sluice::http {

// Chunk-size lines (with their extensions) sluice reads, both directions.
inline constexpr std::size_t max_chunk_line = 4096;

struct RequestHead {
    // Refused: answer this, then close the connection (what follows the head cannot be
    // read safely). Else the request is ready for routing.
    std::optional<LocalReply> refusal;
    bool parsed = false;       // the request holds the head (also when refused after parsing)
    BodyReader body;           // the request body, as the head frames it (when not refused)
    std::uint64_t length = 0;  // its Content-Length, when the head gives one
    bool expects = false;      // the head carries Expect (only 100-continue is answered)
    RequestTarget target;      // the target, read once: its normalised `path` routes
};

// `raw`: the head, request line to blank line. A minor version above 1 is rewritten in place
// (HTTP/1.2 is read as HTTP/1.1). When `parsed`, `req` holds the head (a copy: `raw` may go),
// and when not refused its target is in origin form and an absolute-form authority is its
// Host. `rec` gets what the access line names: method, target and version (from the raw
// request line when the head could not be parsed) and the Host.
RequestHead read_request_head(std::span<char> raw, const config::ServerConfig& server, ClientRequest& req,
                              observe::AccessRecord& rec);

}  // namespace sluice::http
