// HTTP/2 on one client connection, without sockets: bytes in (receive), bytes out
// (output), requests and their bodies to a Handler, responses and their bodies from the
// session. libnghttp2 does the framing, HPACK, flow control and RFC 9113's message checks
// (pseudo-headers, connection-specific fields, CR/LF/NUL in values, content-length against
// DATA: all stream errors); this class adds what sluice needs on top: bounds on what a client
// can make it hold (header list bytes, request body bytes, buffered response bytes) and
// the caps that stop floods (resets, CONTINUATION frames, control frames and empty frames
// per second), each ending the connection with GOAWAY ENHANCE_YOUR_CALM and naming itself
// (abuse()).
//
// Fuzzed (tests/fuzz/h2_codec_fuzz.cpp); no Asio, no Beast.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct nghttp2_session;

namespace sluice::http {

struct H2Settings {
    std::uint32_t max_concurrent_streams = 128;
    std::uint32_t max_header_list_bytes = 16384;  // names + values + 32 per field (RFC 9113 6.5.2)
    std::uint32_t max_resets_per_second = 100;    // RST_STREAM frames from the client
    std::uint32_t max_control_frames_per_second = 1000;  // SETTINGS, PING, PRIORITY, empty frames, unearned WINDOW_UPDATEs
    std::uint32_t max_continuations = 8;                 // CONTINUATION frames after one HEADERS
    std::uint32_t stream_window_bytes = 65535;           // request body a stream may have in flight
    std::uint32_t connection_window_bytes = 1048576;     // the same for all streams together
};

using H2Fields = std::vector<std::pair<std::string, std::string>>;

// A request's head as the client sent it (nghttp2 has checked it against RFC 9113).
struct H2Request {
    std::string method, scheme, authority, path;
    H2Fields fields;                 // regular fields, names lower-case, in order
    bool end_stream = false;         // no body follows
    bool too_large = false;          // its header list went past max_header_list_bytes
    std::size_t header_bytes = 0;
};

// Why the codec ended the connection, for logs and sluice_http2_abuse_total{reason}.
enum class H2Abuse { none, rapid_reset, continuation_flood, control_flood, protocol_error };
std::string_view h2_abuse_name(H2Abuse abuse);

class H2Codec {
public:
    class Handler {
    public:
        virtual ~Handler() = default;
        // A complete request head (HEADERS and its CONTINUATIONs).
        virtual void on_request(std::int32_t stream, H2Request request) = 0;
        // Request body bytes; give them back with consumed() once they are forwarded.
        virtual void on_body(std::int32_t stream, std::string_view data) = 0;
        // The request body ended (END_STREAM).
        virtual void on_body_end(std::int32_t stream) = 0;
        // The stream is gone: reset by either side, or finished. `error` is the RST_STREAM
        // code (0 when it ended normally).
        virtual void on_closed(std::int32_t stream, std::uint32_t error) = 0;
        // Buffered response bytes of `stream` went out: there is room for more.
        virtual void on_drained(std::int32_t stream) = 0;
    };

    H2Codec(Handler& handler, const H2Settings& settings);
    ~H2Codec();
    H2Codec(const H2Codec&) = delete;
    H2Codec& operator=(const H2Codec&) = delete;

    // Bytes from the client (the connection preface first). False: the connection must end
    // (after output() has been written: it may hold a GOAWAY).
    bool receive(std::string_view bytes);
    // The next bytes to write to the client; empty when there is nothing to write. Valid
    // until the next call of any member.
    std::string_view output();
    // What is ready to write, appended to `into` frame after frame (libnghttp2 serializes one
    // at a time: a response's HEADERS, then its DATA) until nothing is left or `into` holds
    // `max` bytes or more (the frame that reaches it is the last); false when nothing was.
    // One write of them is one TLS record and one send where a write per frame was one each.
    bool gather_output(std::string& into, std::size_t max);
    // Neither side has anything more to say (after GOAWAY, or a fatal error).
    bool finished() const;
    // Frames are ready to write (gather_output would find some).
    bool wants_write() const;

    // A response head; `fields` lower-case, no connection-specific ones. With `has_body`
    // the body follows through send_body (and the stream ends with its last piece).
    bool respond(std::int32_t stream, unsigned status, const H2Fields& fields, bool has_body);
    // Appends response body bytes (copied). `last`: the body ends with them (and with
    // `trailers` as a trailing HEADERS frame when they are not empty).
    void send_body(std::int32_t stream, std::string_view data, bool last, H2Fields trailers = {});
    // Response bytes of `stream` buffered, not yet framed.
    std::size_t buffered(std::int32_t stream) const;
    // Ends the stream with RST_STREAM `error`, before anything of it still queued (a
    // response's HEADERS and DATA are dropped).
    void reset(std::int32_t stream, std::uint32_t error);
    // Ends the stream with RST_STREAM NO_ERROR once its response has gone out whole (at once
    // if it has): a server that answered before the request's body ended tells the client
    // to stop sending it (RFC 9113 8.1). nghttp2 sends a RST_STREAM submitted earlier ahead
    // of the response, which the client then never sees.
    void reset_after_response(std::int32_t stream);
    // Request body bytes the session has dealt with: the client may send as many more.
    void consumed(std::int32_t stream, std::size_t n);
    // Graceful stop: GOAWAY naming the last stream taken; streams under way finish.
    void shut_down();
    // The request head (HEADERS and its CONTINUATIONs) being received: a number of its own
    // (they count up), or 0 when no block is open.
    std::uint64_t open_header_block() const { return continuing_stream_ != 0 ? header_blocks_ : 0; }
    // Ends the connection now: GOAWAY NO_ERROR, then nothing more is read or written.
    void give_up();
    // Streams open (requests not finished).
    std::size_t open_streams() const;
    H2Abuse abuse() const { return abuse_; }

private:
    struct Outgoing {
        std::string data;
        std::size_t sent = 0;  // of data
        bool last = false;
        H2Fields trailers;
        bool deferred = false;  // nghttp2 waits for resume_data
    };
    struct Incoming {
        H2Request request;
        std::uint64_t body_bytes = 0;
        std::uint32_t continuations = 0;
    };
    friend struct H2Callbacks;

    void fail(H2Abuse abuse);
    bool count_control_frame();
    void earn_window_updates();

    Handler& handler_;
    H2Settings settings_;
    nghttp2_session* session_ = nullptr;
    std::map<std::int32_t, Incoming> incoming_;
    std::map<std::int32_t, Outgoing> outgoing_;
    std::vector<std::int32_t> reset_after_;  // reset_after_response, until their responses end
    H2Abuse abuse_ = H2Abuse::none;
    // Counting windows (one second) for resets and control frames.
    std::chrono::steady_clock::time_point window_start_{};
    std::uint32_t resets_ = 0;
    std::uint32_t control_frames_ = 0;
    std::uint32_t window_updates_earned_ = 0;  // WINDOW_UPDATEs the DATA sent allows (not counted)
    std::int32_t continuing_stream_ = 0;  // the HEADERS block CONTINUATION frames extend
    std::uint64_t header_blocks_ = 0;     // HEADERS blocks begun
    std::uint32_t continuations_ = 0;
};

// The HTTP/1.1 request head (request line to blank line) that stands for an HTTP/2
// request in the request path: the checks, routing, keys and forwarding read it like any
// other. Host comes from :authority (a Host field that names another is refused: empty
// result and `problem`); cookie crumbs are joined with "; " (RFC 9113 8.2.3); Expect is
// dropped (HTTP/2 has no 100 Continue to wait for); a body without content-length is
// announced as chunked, which the upstream then gets.
std::string h1_head_for(const H2Request& request, std::string& problem);

}  // namespace sluice::http
