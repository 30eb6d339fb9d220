// An HTTP/2 client connection, handed over by the HTTP/1.1 session once it knows the
// connection speaks h2 (ALPN on TLS, the preface on a prior-knowledge listener): the codec
// (h2_codec.hpp) turns bytes into streams, and each stream runs the request's phases
// (exchange.hpp) and forwards to its upstream over HTTP/1.1 (upstream_io.hpp), as an
// HTTP/1.1 request does.
#pragma once

#include <memory>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "http/stream.hpp"

namespace sluice::server {
class Worker;
}

namespace sluice::http {

class H2Connection;

// Serves `stream` as HTTP/2 until the connection ends; `early`: bytes already read from it
// (the preface, or part of it). `handle` is set while it runs (graceful stop: h2_stop).
boost::asio::awaitable<void> serve_h2(server::Worker& worker, Stream& stream, std::string_view peer_ip,
                                      std::string_view early, std::shared_ptr<H2Connection>& handle);
// Graceful stop: GOAWAY; streams under way finish.
void h2_stop(H2Connection& connection);
// shutdown_timeout passed: the streams under way are logged now (abandon, exchange.hpp).
void h2_abandon(H2Connection& connection);

// The client connection preface (RFC 9113 3.4).
inline constexpr std::string_view h2_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace sluice::http
