#include "tls/context.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <boost/asio/ip/address.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls/pem.hpp"

namespace sluice::tls {
namespace ssl = boost::asio::ssl;

namespace {

// TLS 1.2 suites with forward secrecy and AEAD only (Mozilla's "intermediate" list); TLS 1.3
// keeps OpenSSL's defaults, which are all strong.
constexpr const char* tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::string openssl_error() {
    unsigned long code = 0, last = 0;
    while ((code = ERR_get_error()) != 0) last = code;
    if (last == 0) return "unknown error";
    char text[256];
    ERR_error_string_n(last, text, sizeof text);
    return text;
}

void common_settings(SSL_CTX* ctx, config::TlsVersion min_version) {
    SSL_CTX_set_min_proto_version(ctx, min_version == config::TlsVersion::tls1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    // An idle keep-alive connection gives its read and write buffers back (about 34 KB).
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    // OpenSSL takes what the socket gave at once (Asio's layer hands it over through a pair
    // of BIOs) rather than a record's header and then its body, read by read: fewer trips
    // through the BIOs. Bytes it holds that way are what SSL_has_pending sees (not
    // SSL_pending): Stream::holds_unread_tls.
    SSL_CTX_set_read_ahead(ctx, 1);
    if (SSL_CTX_set_cipher_list(ctx, tls12_ciphers) != 1)
        throw std::runtime_error("TLS cipher list refused: " + openssl_error());
}

// ALPN: h2 (where the listener offers it) then http/1.1, in our order of preference,
// among what the client offers; a client offering neither gets no ALPN answer and may go on
// with HTTP/1.1 or leave. `arg` is non-null when the listener offers h2.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                void* arg) {
    static const unsigned char with_h2[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    const unsigned char* ours = arg ? with_h2 : with_h2 + 3;
    const unsigned int size = arg ? sizeof with_h2 : sizeof with_h2 - 3;
    unsigned char* selected = nullptr;
    if (SSL_select_next_proto(&selected, outlen, ours, size, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
}

void use_certificate(ssl::context& context, const config::TlsCertificate& cert) {
    boost::system::error_code ec;
    context.use_certificate_chain(boost::asio::buffer(cert.cert_pem), ec);
    if (ec) throw std::runtime_error("certificate " + cert.cert_file + ": " + ec.message());
    context.use_private_key(boost::asio::buffer(cert.key_pem), ssl::context::pem, ec);
    if (ec) throw std::runtime_error("key " + cert.key_file + ": " + ec.message());
    if (SSL_CTX_check_private_key(context.native_handle()) != 1)
        throw std::runtime_error("key " + cert.key_file + " does not match certificate " + cert.cert_file);
}

}  // namespace

ServerContext::ServerContext(const config::ListenerTls& cfg, bool http2)
    : handshake_timeout_(cfg.handshake_timeout) {
    if (cfg.certificates.empty()) throw std::runtime_error("a TLS listener needs a certificate");
    for (const auto& cert : cfg.certificates) {
        Entry entry{std::make_unique<ssl::context>(ssl::context::tls_server), cert.names};
        SSL_CTX* ctx = entry.context->native_handle();
        common_settings(ctx, cfg.min_version);
        SSL_CTX_set_alpn_select_cb(ctx, select_alpn, http2 ? this : nullptr);
        use_certificate(*entry.context, cert);
        entries_.push_back(std::move(entry));
    }
    if (entries_.size() > 1) {
        SSL_CTX* first = entries_.front().context->native_handle();
        SSL_CTX_set_tlsext_servername_callback(first, on_server_name);
        SSL_CTX_set_tlsext_servername_arg(first, this);
    }
}

int ServerContext::on_server_name(SSL* ssl, int*, void* arg) {
    auto* self = static_cast<ServerContext*>(arg);
    const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!name) return SSL_TLSEXT_ERR_OK;  // no SNI: the default certificate
    std::string host(name);
    if (host.size() > 253) return SSL_TLSEXT_ERR_OK;
    std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!host.empty() && host.back() == '.') host.pop_back();
    for (std::size_t i = 0; i < self->entries_.size(); ++i) {
        if (!name_matches(self->entries_[i].names, host)) continue;
        if (i > 0) SSL_set_SSL_CTX(ssl, self->entries_[i].context->native_handle());
        break;
    }
    return SSL_TLSEXT_ERR_OK;
}

ClientContext::ClientContext(const config::UpstreamTls& cfg)
    : context_(ssl::context::tls_client), server_name_(cfg.server_name), verify_(cfg.verify) {
    SSL_CTX* ctx = context_.native_handle();
    common_settings(ctx, config::TlsVersion::tls1_2);
    static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);
    boost::system::error_code ec;
    if (cfg.verify) {
        context_.set_verify_mode(ssl::verify_peer, ec);
        if (cfg.system_ca) {
            context_.set_default_verify_paths(ec);
            if (ec) throw std::runtime_error("the system's CA certificates: " + ec.message());
        } else {
            context_.add_certificate_authority(boost::asio::buffer(cfg.ca_pem), ec);
            if (ec) throw std::runtime_error("ca " + cfg.ca_file + ": " + ec.message());
        }
    } else {
        context_.set_verify_mode(ssl::verify_none, ec);
    }
    if (cfg.client) use_certificate(context_, *cfg.client);
}

void ClientContext::prepare(SSL* ssl, const std::string& host) const {
    const std::string& name = server_name_.empty() ? host : server_name_;
    boost::system::error_code ec;
    (void)boost::asio::ip::make_address(name, ec);  // only: is it an IP address?
    if (ec) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (!verify_) return;
    if (!ec)
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    else
        SSL_set1_host(ssl, name.c_str());
}

Contexts make_contexts(const config::Config& cfg) {
    Contexts out;
    for (const auto& listener : cfg.server.listen)
        out.listeners.push_back(listener.tls ? std::make_shared<ServerContext>(*listener.tls, listener.http2) : nullptr);
    for (const auto& upstream : cfg.upstreams) {
        try {
            out.upstreams.push_back(upstream.tls ? std::make_shared<ClientContext>(*upstream.tls) : nullptr);
        } catch (const std::exception& e) {
            throw std::runtime_error("upstream " + upstream.name + ": " + e.what());
        }
    }
    return out;
}

}  // namespace sluice::tls
