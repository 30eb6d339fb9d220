// OpenSSL contexts built from the configuration, once per load or reload, shared by every
// worker (an SSL_CTX is safe to use from several threads for handshakes). A session keeps a
// shared_ptr to the one it started with, so a reload never pulls a context from under it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "config/config.hpp"

namespace sluice::tls {

// The TLS side of one listener: one context per certificate. The first certificate answers
// unless the client's SNI names one of another's (subjectAltName DNS names, "*.domain"
// covering one label), as nginx's default server does.
class ServerContext {
public:
    // Throws std::runtime_error naming the certificate that OpenSSL refused. `http2`: ALPN
    // offers h2 before http/1.1.
    ServerContext(const config::ListenerTls& cfg, bool http2);
    ServerContext(const ServerContext&) = delete;
    ServerContext& operator=(const ServerContext&) = delete;

    boost::asio::ssl::context& context() { return *entries_.front().context; }
    std::chrono::milliseconds handshake_timeout() const { return handshake_timeout_; }

private:
    struct Entry {
        std::unique_ptr<boost::asio::ssl::context> context;
        std::vector<std::string> names;
    };
    static int on_server_name(SSL* ssl, int* alert, void* arg);

    std::vector<Entry> entries_;
    std::chrono::milliseconds handshake_timeout_;
};

// HTTPS to one upstream's servers.
class ClientContext {
public:
    // Throws std::runtime_error.
    explicit ClientContext(const config::UpstreamTls& cfg);
    ClientContext(const ClientContext&) = delete;
    ClientContext& operator=(const ClientContext&) = delete;

    boost::asio::ssl::context& context() { return context_; }
    // Sets up one connection to server `host` (the configured host of that server): SNI
    // and the name its certificate must carry (server_name when set). An IP address is
    // checked against the certificate's IP addresses and sent without SNI.
    void prepare(SSL* ssl, const std::string& host) const;

private:
    boost::asio::ssl::context context_;
    std::string server_name_;
    bool verify_;
};

// Per listener in config order (null: plain HTTP) and per upstream (null: plain HTTP).
struct Contexts {
    std::vector<std::shared_ptr<ServerContext>> listeners;
    std::vector<std::shared_ptr<ClientContext>> upstreams;
};
// Throws std::runtime_error.
Contexts make_contexts(const config::Config& cfg);

}  // namespace sluice::tls
