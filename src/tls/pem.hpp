// Certificates and keys as PEM text: read, checked and described with OpenSSL, without
// Asio. The loader checks every file a configuration names with these, so `--check` and a
// reload refuse a bad one before anything is built from it.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tls {

struct CertificateInfo {
    std::vector<std::string> names;  // DNS names (subjectAltName; else the subject's CN), lower-case
    std::size_t chain_length = 0;    // certificates in the file, the leaf first
    std::time_t not_before = 0;
    std::time_t not_after = 0;       // of the leaf
};

// A certificate chain (leaf first) and its private key. Empty when they are usable together,
// else what is wrong ("no certificate in ...", "the key does not match the certificate").
std::string check_certificate_pair(std::string_view cert_pem, std::string_view key_pem, CertificateInfo& info);

// Certificates to trust (a CA bundle). Empty when at least one certificate parsed and
// nothing else is in the file; `count` says how many.
std::string check_ca_bundle(std::string_view pem, std::size_t& count);

// Whether `host` (lower-case, from SNI) is one of `names`: equal, or "*.example.com"
// covering exactly one label before ".example.com".
bool name_matches(const std::vector<std::string>& names, std::string_view host);

// The whole of a small regular file; empty with `error` set when it is not one (a
// directory, a device, larger than `max_bytes`) or cannot be read.
std::string read_small_file(const std::string& path, std::size_t max_bytes, std::string& error);

}  // namespace sluice::tls
