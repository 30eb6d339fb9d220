// libFuzzer target: certificate and key files as a configuration names them.
// Sources: src/tls/pem.cpp (OpenSSL does the PEM and DER parsing; this checks what sluice
// does with the result).
//
// The first byte of the input says where the certificate text ends and the key text starts
// (as a fraction of the rest). The pair is checked, the whole input read as a CA bundle, and
// every name the certificate yields must match itself under the SNI rules, lower-case.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tls/pem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::size_t cut = rest.size() * data[0] / 255;
    sluice::tls::CertificateInfo info;
    const std::string error = sluice::tls::check_certificate_pair(rest.substr(0, cut), rest.substr(cut), info);
    if (error.empty()) {
        if (info.chain_length == 0) std::abort();
        for (const auto& name : info.names) {
            for (const char c : name)
                if (c >= 'A' && c <= 'Z') std::abort();
            if (name.find('*') == std::string::npos && !name.empty() && !sluice::tls::name_matches(info.names, name))
                std::abort();
        }
    }
    std::size_t count = 0;
    const std::string bundle_error = sluice::tls::check_ca_bundle(rest, count);
    if (bundle_error.empty() && count == 0) std::abort();
    // A lone wildcard name covers one label, never two.
    if (info.names.size() == 1 && info.names.front().rfind("*.", 0) == 0 &&
        info.names.front().find('*', 1) == std::string::npos &&
        sluice::tls::name_matches(info.names, "a.b." + info.names.front().substr(2)))
        std::abort();
    return 0;
}
