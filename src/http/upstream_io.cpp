#include "http/upstream_io.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include "http/head_scan.hpp"
#include "http/header_rules.hpp"
#include "http/request_head.hpp"
#include "server/worker.hpp"
#include "tls/context.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using Clock = std::chrono::steady_clock;
using tcp = net::ip::tcp;

namespace {
constexpr auto nothrow = net::as_tuple(net::use_awaitable);
}  // namespace

BodyReader response_body_reader(const Framing& framing) {
    using Body = Framing::Body;
    BodyLimits limits;
    limits.max_chunk_line = max_chunk_line;
    limits.max_trailer_bytes = upstream_header_limit;
    limits.max_trailer_fields = upstream_field_lines;
    return framing.body == Body::length        ? BodyReader::length(framing.length, limits)
           : framing.body == Body::chunked     ? BodyReader::chunked(limits)
           : framing.body == Body::until_close ? BodyReader::until_close(limits)
                                               : BodyReader();
}

bool is_connection_lost(const boost::system::error_code& ec) {
    return ec == net::error::eof || ec == bhttp::error::end_of_stream || ec == net::error::connection_reset ||
           ec == net::error::broken_pipe || ec == bhttp::error::partial_message ||
           ec == net::ssl::error::stream_truncated;
}

bool may_resend(bhttp::verb method) {
    switch (method) {
    case bhttp::verb::get:
    case bhttp::verb::head:
    case bhttp::verb::options:
    case bhttp::verb::trace:
    case bhttp::verb::put:
    case bhttp::verb::delete_: return true;
    default: return false;
    }
}

net::awaitable<std::unique_ptr<UpstreamConnection>> connect_upstream(server::Worker& worker,
                                                                     const net::any_io_executor& executor,
                                                                     const server::Snapshot& snap, std::size_t upstream,
                                                                     bool fresh, Upstream& failure, IoDeadline& deadline) {
    const auto& servers = snap.servers[upstream];
    const auto& upstream_cfg = snap.config->upstreams[upstream];
    auto first = worker.next_server(upstream, servers.size());
    failure = Upstream::refused;
    // Round-robin; a server that refuses or does not answer the connect is skipped
    // for this request (as nginx's proxy_next_upstream error timeout).
    for (std::size_t i = 0; i < servers.size(); ++i) {
        const auto& server = servers[(first + i) % servers.size()];
        if (!fresh) {
            if (auto conn = worker.upstream_pool().take(server.key)) co_return conn;
        }
        auto conn = std::make_unique<UpstreamConnection>(executor);
        conn->key = server.key;
        deadline.arm(conn->stream.socket(), Clock::now() + upstream_cfg.connect_timeout);
        auto [ec0] = co_await conn->stream.socket().async_connect(server.endpoint, nothrow);
        auto ec = deadline.disarm(ec0);
        if (!ec) {
            boost::system::error_code ignored;
            conn->stream.socket().set_option(tcp::no_delay(true), ignored);
            tls::ClientContext* tls = snap.upstream_tls[upstream].get();
            if (!tls) co_return conn;
            // HTTPS: the handshake is part of connecting (same timeout, same next server).
            conn->stream.start_tls(tls->context());
            SSL* ssl = conn->stream.tls().native_handle();
            tls->prepare(ssl, server.host);
            deadline.arm(conn->stream.socket(), Clock::now() + upstream_cfg.connect_timeout);
            auto [hec] = co_await conn->stream.tls().async_handshake(net::ssl::stream_base::client, nothrow);
            ec = deadline.disarm(hec);
            if (!ec) co_return conn;
            failure = ec == beast::error::timeout ? Upstream::timed_out : Upstream::refused;
            const long verify = SSL_get_verify_result(ssl);
            spdlog::warn("upstream {} server {}: TLS handshake failed: {}{}", upstream_cfg.name, server.key,
                         ec == beast::error::timeout ? "timed out" : ec.message(),
                         verify != X509_V_OK ? std::string(" (") + X509_verify_cert_error_string(verify) + ")"
                                             : std::string());
            continue;
        }
        failure = ec == beast::error::timeout ? Upstream::timed_out : Upstream::refused;
        spdlog::warn("upstream {} server {}: connect failed: {}", upstream_cfg.name, server.key,
                     ec == beast::error::timeout ? "timed out" : ec.message());
    }
    co_return nullptr;
}

net::awaitable<BodyRead> read_body(BodyReader& reader, beast::flat_buffer& in, Stream& stream, std::span<char> out,
                                   config::Duration timeout, bool may_wait, IoDeadline& deadline) {
    BodyRead got;
    while (reader.state() == BodyReader::State::reading) {
        if (in.size() > 0) {
            std::string_view data(static_cast<const char*>(in.data().data()), in.size());
            const auto step = reader.decode(data, out);
            in.consume(step.consumed);
            if (step.produced > 0 || reader.state() != BodyReader::State::reading) {
                got.n = step.produced;
                co_return got;
            }
            if (in.size() > 0) continue;  // framing bytes used; more to decode
        }
        if (!may_wait) co_return got;
        // Nothing buffered: Content-Length and close-delimited bodies are read straight into
        // `out`; chunked ones through `in`, where their framing is decoded.
        const auto raw = reader.raw_remaining();
        const std::size_t want = raw ? static_cast<std::size_t>(std::min<std::uint64_t>(raw, out.size()))
                                     : std::min<std::size_t>(out.size(), 16 * 1024);
        auto target = raw ? net::mutable_buffer(out.data(), want) : in.prepare(want);
        deadline.arm(stream.socket(), Clock::now() + timeout);
        auto [ec0, n] = co_await stream.async_read_reported(target, nothrow);
        const auto ec = deadline.disarm(ec0);
        if (ec == net::error::eof) {
            reader.end_of_input();  // ends a close-delimited body; cuts short any other
            co_return got;
        }
        if (ec) {
            got.ec = ec;
            co_return got;
        }
        if (raw) {
            reader.consumed_raw(n);
            got.n = n;
            if (n > 0 || reader.state() != BodyReader::State::reading) co_return got;
        } else {
            in.commit(n);
        }
    }
    co_return got;
}

net::awaitable<UpstreamHead> read_upstream_head(UpstreamConnection& conn, UpstreamResponse& response,
                                                Clock::time_point until, IoDeadline& deadline) {
    UpstreamHead result;
    std::size_t scanned = 0;
    while (true) {
        std::string_view data(static_cast<const char*>(conn.buffer.data().data()), conn.buffer.size());
        auto scan = scan_request_head(data, scanned);
        if (scan.leading_crlf && scan.state != HeadScan::State::incomplete) {
            conn.buffer.consume(scan.leading_crlf);
            scanned -= scan.leading_crlf;
            data.remove_prefix(scan.leading_crlf);
        }
        if (scan.state == HeadScan::State::malformed) {
            result.problem = "upstream sent a malformed response head";
            co_return result;
        }
        if (scan.state == HeadScan::State::complete) {
            const auto raw = data.substr(0, scan.head_size);
            if (raw.size() > upstream_header_limit) {
                result.problem = "upstream response head too large";
            } else {
                result.problem = parse_response_head(raw, response, upstream_field_lines);
                // An interim head is relayed without its framing, never framed: what would
                // make a final one ambiguous is refused here (as Beast's parser did).
                if (result.problem.empty() && response.status < 200) {
                    const auto framing = check_response_framing(response.fields, response.version, response.status, false);
                    if (!framing.ok()) result.problem = framing.problem;
                }
            }
            conn.buffer.consume(scan.head_size);
            co_return result;
        }
        if (data.size() > upstream_header_limit) {
            result.problem = "upstream response head too large";
            co_return result;
        }
        deadline.arm(conn.stream.socket(), until);
        auto [ec0, n] = co_await conn.stream.async_read_reported(conn.buffer.prepare(8192), nothrow);
        const auto ec = deadline.disarm(ec0);
        if (ec) {
            result.ec = ec;
            co_return result;
        }
        conn.buffer.commit(n);
    }
}

}  // namespace sluice::http
