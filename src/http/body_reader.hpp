// The one place where a message body's framing is read: Content-Length, chunked, or until
// the connection closes. Used for request bodies and response bodies alike. Pure: bytes in,
// decoded body bytes out, no sockets.
//
// What it decodes is the body alone. Chunk sizes, chunk extensions and the trailer section
// are checked and bounded, then dropped: what goes on is framed again by BodyWriter, so no
// framing byte a peer sent ever reaches the other side (HAProxy and Envoy re-frame the same
// way; nginx drops trailers too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace sluice::http {

struct BodyLimits {
    std::uint64_t max_body = UINT64_MAX;  // decoded bytes; past it: too_large
    std::size_t max_chunk_line = 4096;    // chunk-size line with its extensions, CRLF included
    std::size_t max_trailer_bytes = 16384;  // the trailer section, final CRLF included
    std::size_t max_trailer_fields = 100;
};

class BodyReader {
public:
    enum class Mode { none, length, chunked, until_close };
    // malformed: 400 (from a client) or 502 (from an upstream); too_large: the body is over
    // max_body (413); trailer_too_large: the trailer section is over its limits (431 / 502);
    // cut_short: the connection ended inside the body.
    enum class State { reading, done, malformed, too_large, trailer_too_large, cut_short };

    // A message without a body (or one whose body is known to be empty).
    BodyReader() = default;
    static BodyReader length(std::uint64_t n, const BodyLimits& limits = {});
    static BodyReader chunked(const BodyLimits& limits = {});
    // Ends when the peer closes the connection (a response without Content-Length or chunked).
    static BodyReader until_close(const BodyLimits& limits = {});

    struct Step {
        std::size_t consumed = 0;  // bytes of `in` used (framing and data)
        std::size_t produced = 0;  // body bytes written to `out`
    };
    // Decodes as much of `in` as it can into `out`. Stops when the body ends (bytes of `in`
    // past its end are not consumed: they belong to the next message), when `out` is full,
    // when `in` is used up, or at an error (state() says which).
    Step decode(std::string_view in, std::span<char> out);

    // Content-Length and close-delimited bodies have no framing inside them, so the caller
    // may read them straight into the destination, bypassing decode(): at most this many
    // bytes still belong to the body (0 for chunked bodies, which always go through decode).
    std::uint64_t raw_remaining() const;
    // `n` body bytes (n <= raw_remaining()) were read directly by the caller.
    void consumed_raw(std::size_t n);

    // The connection ended (EOF). Ends an until_close body; any other unfinished body is
    // cut_short.
    void end_of_input();

    // Keeps the trailer section of a chunked body (bounded as above) for trailers(): for a
    // trailer field sluice reads (a cost the response reports). Dropped all the same.
    void keep_trailers() { keep_trailers_ = true; }
    // The trailer fields as they came, "Name: value\r\n" per field ("" without any, or
    // without keep_trailers()); complete once done().
    std::string_view trailers() const { return kept_trailers_; }

    Mode mode() const { return mode_; }
    State state() const { return state_; }
    bool done() const { return state_ == State::done; }
    bool failed() const { return state_ != State::reading && state_ != State::done; }
    // Why it failed, for the log and the problem detail.
    std::string_view problem() const { return problem_; }
    std::uint64_t body_bytes() const { return total_; }

private:
    enum class Chunk {
        size,           // hex digits of the chunk size
        size_ws,        // whitespace after the size (only before ';' or CRLF)
        ext,            // chunk extensions, up to CR
        size_lf,        // CR seen, LF expected
        data,           // chunk data
        data_cr,        // CR after the data expected
        data_lf,        // LF after the data expected
        trailer_start,  // at the start of a trailer line (or of the final CRLF)
        trailer_line,   // inside a trailer field line
        trailer_lf,     // CR seen in a trailer field line
        final_lf,       // CR of the empty line that ends the message seen
    };

    void fail(State s, std::string_view problem);
    std::size_t decode_chunked(std::string_view in, std::span<char> out, std::size_t& produced);

    Mode mode_ = Mode::none;
    State state_ = State::done;
    BodyLimits limits_;
    std::uint64_t remaining_ = 0;  // length: bytes left; chunked: bytes left of this chunk
    std::uint64_t total_ = 0;
    std::string_view problem_;
    // chunked
    Chunk chunk_ = Chunk::size;
    std::size_t line_bytes_ = 0;     // of the current chunk-size line
    std::size_t size_digits_ = 0;    // significant hex digits of the chunk size
    bool any_digit_ = false;
    bool in_quote_ = false, quote_escape_ = false;
    std::size_t trailer_bytes_ = 0;
    std::size_t trailer_fields_ = 0;
    bool trailer_name_ = false;      // in the name of a trailer field (before the colon)
    std::size_t trailer_name_len_ = 0;
    bool keep_trailers_ = false;
    std::string kept_trailers_;
};

// Writes a body with the framing sluice chose: the chunk framing it adds around data.
// For Content-Length and close-delimited bodies the data goes out as it is.
struct ChunkFrame {
    char head[20];  // "<hex size>\r\n"
    std::size_t head_size = 0;
};
ChunkFrame chunk_frame(std::size_t size);
inline constexpr std::string_view chunk_end = "\r\n";              // after each chunk's data
inline constexpr std::string_view last_chunk = "0\r\n\r\n";         // ends a chunked body (no trailers)

}  // namespace sluice::http
