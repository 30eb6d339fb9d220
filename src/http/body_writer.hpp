// The one writer of outgoing body framing, both directions (request bodies to upstreams,
// response bodies to clients), after Envoy's HTTP/1 StreamEncoder and Pingora's BodyWriter:
// the framing is chosen once, from the parsed message, and every framing byte sluice sends
// comes from here. Pure: it says which bytes carry the head and each piece of the body; the
// session writes them (one gathered write per piece).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "http/body_reader.hpp"

namespace sluice::http {

class BodyWriter {
public:
    enum class Mode {
        as_is,    // Content-Length, or until the connection closes: the bytes as they are
        chunked,  // each non-empty piece a chunk; the last chunk (no trailers) at the end
    };
    // What carries one piece, in order: the head (with the first piece only), the chunk's
    // size line, the piece, the CRLF after it, the last chunk (with the last piece). Parts
    // that carry nothing are empty. Valid until the next call of frame().
    using Parts = std::array<std::string_view, 5>;

    // `head`: the message head, serialized; it must outlive the writer.
    BodyWriter(std::string_view head, Mode mode) : head_(head), mode_(mode) {}

    // The next piece of the body (may be empty); `last`: the body ends with it.
    Parts frame(std::string_view piece, bool last) {
        Parts parts{};
        if (!head_sent_) {
            parts[0] = head_;
            head_sent_ = true;
        }
        if (mode_ == Mode::as_is) {
            parts[2] = piece;
            return parts;
        }
        if (!piece.empty()) {
            chunk_ = chunk_frame(piece.size());
            parts[1] = std::string_view(chunk_.head, chunk_.head_size);
            parts[2] = piece;
            parts[3] = chunk_end;
        }
        if (last && !ended_) {
            parts[4] = last_chunk;
            ended_ = true;
        }
        return parts;
    }

    Mode mode() const { return mode_; }

private:
    std::string_view head_;
    Mode mode_;
    bool head_sent_ = false;
    bool ended_ = false;  // the last chunk went out: never twice
    ChunkFrame chunk_;
};

}  // namespace sluice::http
