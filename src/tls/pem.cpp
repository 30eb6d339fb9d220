#include "tls/pem.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace sluice::tls {
namespace {

struct Free {
    void operator()(BIO* p) const { BIO_free(p); }
    void operator()(X509* p) const { X509_free(p); }
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
    void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <class T>
using Owned = std::unique_ptr<T, Free>;

Owned<BIO> memory_bio(std::string_view pem) {
    return Owned<BIO>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The newest OpenSSL error as text, and the queue cleared.
std::string openssl_error() {
    unsigned long code = 0, last = 0;
    while ((code = ERR_get_error()) != 0) last = code;
    if (last == 0) return "unknown error";
    char text[256];
    ERR_error_string_n(last, text, sizeof text);
    return text;
}

// Never asks for a passphrase (OpenSSL would prompt on the terminal).
int no_passphrase(char*, int, int, void*) { return -1; }

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::time_t to_time(const ASN1_TIME* t) {
    std::tm tm{};
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
    return timegm(&tm);
}

std::vector<std::string> names_of(X509* cert) {
    std::vector<std::string> names;
    Owned<GENERAL_NAMES> alt(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
    if (alt) {
        for (int i = 0; i < sk_GENERAL_NAME_num(alt.get()); ++i) {
            const GENERAL_NAME* name = sk_GENERAL_NAME_value(alt.get(), i);
            if (name->type != GEN_DNS) continue;
            const ASN1_STRING* s = name->d.dNSName;
            names.push_back(lower({reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                   static_cast<std::size_t>(ASN1_STRING_length(s))}));
        }
        if (!names.empty()) return names;
    }
    X509_NAME* subject = X509_get_subject_name(cert);
    const int at = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
    if (at >= 0) {
        const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
        names.push_back(lower({reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                               static_cast<std::size_t>(ASN1_STRING_length(s))}));
    }
    return names;
}

// Every certificate of a PEM text, in order; stops at the first block that is not one.
std::vector<Owned<X509>> read_certificates(std::string_view pem, std::string& error) {
    std::vector<Owned<X509>> certs;
    auto bio = memory_bio(pem);
    if (!bio) {
        error = "out of memory";
        return certs;
    }
    ERR_clear_error();
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) certs.emplace_back(cert);
    // The loop ends at the end of the text (no start line) or at a block that does not parse.
    const unsigned long code = ERR_peek_last_error();
    if (code != 0 && !(ERR_GET_LIB(code) == ERR_LIB_PEM && ERR_GET_REASON(code) == PEM_R_NO_START_LINE)) {
        error = "certificate " + std::to_string(certs.size() + 1) + " does not parse: " + openssl_error();
        certs.clear();
    }
    ERR_clear_error();
    return certs;
}

}  // namespace

std::string check_certificate_pair(std::string_view cert_pem, std::string_view key_pem, CertificateInfo& info) {
    std::string error;
    auto chain = read_certificates(cert_pem, error);
    if (!error.empty()) return error;
    if (chain.empty()) return "no PEM certificate (-----BEGIN CERTIFICATE-----) in the file";
    info.chain_length = chain.size();
    info.names = names_of(chain.front().get());
    info.not_before = to_time(X509_get0_notBefore(chain.front().get()));
    info.not_after = to_time(X509_get0_notAfter(chain.front().get()));

    auto bio = memory_bio(key_pem);
    if (!bio) return "out of memory";
    ERR_clear_error();
    Owned<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
    if (!key) {
        const bool encrypted = key_pem.find("ENCRYPTED") != std::string_view::npos;
        const std::string detail = openssl_error();
        if (encrypted) return "the private key is encrypted (sluice reads unencrypted keys only)";
        return "no usable PEM private key in the key file: " + detail;
    }
    if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
        ERR_clear_error();
        return "the private key does not match the certificate";
    }
    return {};
}

std::string check_ca_bundle(std::string_view pem, std::size_t& count) {
    std::string error;
    auto certs = read_certificates(pem, error);
    count = certs.size();
    if (!error.empty()) return error;
    if (certs.empty()) return "no PEM certificate (-----BEGIN CERTIFICATE-----) in the file";
    return {};
}

bool name_matches(const std::vector<std::string>& names, std::string_view host) {
    for (const auto& name : names) {
        if (name == host) return true;
        if (name.size() > 2 && name[0] == '*' && name[1] == '.') {
            const std::string_view suffix = std::string_view(name).substr(1);  // ".example.com"
            if (host.size() > suffix.size() && host.substr(host.size() - suffix.size()) == suffix &&
                host.substr(0, host.size() - suffix.size()).find('.') == std::string_view::npos)
                return true;
        }
    }
    return false;
}

std::string read_small_file(const std::string& path, std::size_t max_bytes, std::string& error) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        error = std::string("cannot read ") + path + ": " + std::strerror(errno);
        return {};
    }
    if (!S_ISREG(st.st_mode)) {
        error = path + " is not a regular file";
        return {};
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        error = path + " is larger than " + std::to_string(max_bytes) + " bytes";
        return {};
    }
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (!file) {
        error = std::string("cannot read ") + path + ": " + std::strerror(errno);
        return {};
    }
    std::string content;
    char buffer[16384];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0 && content.size() <= max_bytes) content.append(buffer, n);
    const bool failed = std::ferror(file);
    std::fclose(file);
    if (failed) {
        error = "cannot read " + path;
        return {};
    }
    if (content.size() > max_bytes) {
        error = path + " is larger than " + std::to_string(max_bytes) + " bytes";
        return {};
    }
    return content;
}

}  // namespace sluice::tls
