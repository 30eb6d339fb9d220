// The upstream side of forwarding, for every client protocol: connecting (pooled
// connection, round-robin, TLS), reading a response head, and reading a body through its
// BodyReader. Each waits under a deadline the caller keeps (IoDeadline): the HTTP/1.1
// session's one timer per connection, or an HTTP/2 stream's own.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/verb.hpp>

#include "config/config.hpp"
#include "http/body_reader.hpp"
#include "http/field_list.hpp"
#include "http/header_rules.hpp"
#include "http/stream.hpp"
#include "http/upstream_connection.hpp"

namespace sluice::server {
class Worker;
struct Snapshot;
}  // namespace sluice::server

namespace sluice::http {

inline constexpr std::size_t upstream_header_limit = 64 * 1024;
inline constexpr std::size_t upstream_field_lines = 256;  // Set-Cookie lines add up
inline constexpr int max_interim_responses = 16;           // 1xx before the final response

// A deadline for one socket operation: arm before it, disarm after; an operation the
// deadline cut off reports beast::error::timeout from disarm.
class IoDeadline {
public:
    virtual ~IoDeadline() = default;
    virtual void arm(boost::asio::ip::tcp::socket& socket, std::chrono::steady_clock::time_point until) = 0;
    virtual boost::system::error_code disarm(boost::system::error_code ec) = 0;
};

enum class Upstream { ok, refused, timed_out };

// A connection to a server of `upstream`: a pooled one unless `fresh`, else a new one,
// trying the servers round-robin (one that refuses or does not answer in connect_timeout
// is skipped, as nginx's proxy_next_upstream error timeout). Null and `failure` when none.
boost::asio::awaitable<std::unique_ptr<UpstreamConnection>> connect_upstream(
    server::Worker& worker, const boost::asio::any_io_executor& executor, const server::Snapshot& snap,
    std::size_t upstream, bool fresh, Upstream& failure, IoDeadline& deadline);

// What read_body got: n decoded body bytes, or none because the body ended or failed
// (the reader's state says which) or the read failed (ec; beast::error::timeout when
// the deadline passed).
struct BodyRead {
    std::size_t n = 0;
    boost::system::error_code ec;
};
// The next decoded bytes of a body into `out`: first what `in` holds, then what `stream`
// sends. Without `may_wait`, only what `in` holds (n may then be 0 with the body unfinished).
boost::asio::awaitable<BodyRead> read_body(BodyReader& reader, boost::beast::flat_buffer& in, Stream& stream,
                                           std::span<char> out, config::Duration timeout, bool may_wait,
                                           IoDeadline& deadline);

// An upstream's response head, read and checked (RFC 9112 framing, our byte rules).
struct UpstreamHead {
    boost::system::error_code ec;  // the connection failed
    std::string_view problem;      // else: the response is invalid (502)
};
// Reads one response head into `response` before `until` (a trickling upstream does not
// extend it).
boost::asio::awaitable<UpstreamHead> read_upstream_head(UpstreamConnection& conn, UpstreamResponse& response,
                                                        std::chrono::steady_clock::time_point until,
                                                        IoDeadline& deadline);

// The reader of a response body as `framing` (check_response_framing) delimits it, with
// the limits sluice reads upstream chunk lines and trailers under.
BodyReader response_body_reader(const Framing& framing);

// The connection went away under us (a pooled one the server closed, a reset; over TLS
// closed without close_notify).
bool is_connection_lost(const boost::system::error_code& ec);

// Whether a request whose pooled connection was lost before any answer may be sent once
// more on another (RFC 9110 9.2.2): an idempotent method only (GET, HEAD, OPTIONS, TRACE,
// PUT, DELETE), as nginx's proxy_next_upstream. A POST or PATCH the upstream read may have
// acted already: its client gets the 502.
bool may_resend(boost::beast::http::verb method);

}  // namespace sluice::http
