// A WebSocket tunnel, after the HTTP side switched protocols (Beast's hand-off of a
// connection, advanced_server.cpp http_session::on_read): the session writes the 101, then
// hands over both streams and what the client sent past its handshake. From there bytes go
// both ways until both sides are done, either fails, or nothing moved for `idle`. The tunnel
// never sees HTTP. (The same hand-off will serve an HTTP/2 connection's codec.)
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "http/stream.hpp"

namespace sluice::http {

struct TunnelBytes {
    std::uint64_t up = 0;    // client to upstream, `client_early` included
    std::uint64_t down = 0;  // upstream to client
};

// `client_early`: bytes the client sent right after its handshake (already read), sent to
// the upstream first. The streams are shut down when it ends; the caller closes them.
boost::asio::awaitable<TunnelBytes> relay_tunnel(Stream& client, Stream& upstream, std::string_view client_early,
                                                 std::chrono::milliseconds idle);

}  // namespace sluice::http
