// libFuzzer target: bearer tokens against an HS256 key (src/auth/jwt.cpp, src/auth/json.cpp).
//
// The input is the token, and also (when it splits into three parts) the header and claims
// of a token this target signs itself. What must hold: a forged token (the input as it
// came) is never accepted unless it carries the right signature; a token signed with the
// key is accepted exactly when its header says HS256 without crit, its claims are a JSON
// object and exp/nbf allow it; claims come only from an accepted token; base64url decoding
// has one spelling per value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <openssl/hmac.h>

#include "auth/json.hpp"
#include "auth/jwt.hpp"

using namespace sluice;

namespace {

const std::string secret(32, 'k');

std::string b64url(std::string_view data) { return auth::base64url_encode(data); }

const auth::JwtVerifier& verifier() {
    static const auto v = [] {
        config::JwtConfig cfg;
        config::JwtKeyConfig key;
        key.alg = config::JwtAlg::hs256;
        key.secret = secret;
        cfg.keys.push_back(key);
        std::string error;
        return auth::JwtVerifier::build(cfg, error);
    }();
    return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::int64_t now = 1'800'000'000;

    // base64url: what decodes encodes back to the same text.
    if (const auto decoded = auth::base64url_decode(input); decoded && b64url(*decoded) != input) std::abort();

    // The input as a token: it has no valid signature unless it has the right one.
    const auto forged = verifier().verify(input, now);
    if (forged.claims == std::nullopt && forged.problem.empty()) std::abort();

    // The input split at its first two NUL bytes as header and claims, signed here.
    const auto a = input.find('\0');
    if (a == std::string_view::npos) return 0;
    const auto b = input.find('\0', a + 1);
    if (b == std::string_view::npos) return 0;
    const std::string header(input.substr(0, a)), claims(input.substr(a + 1, b - a - 1));
    const std::string signing_input = b64url(header) + "." + b64url(claims);
    unsigned char mac[32];
    unsigned int len = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac, &len);
    const std::string token = signing_input + "." + b64url(std::string(reinterpret_cast<char*>(mac), len));
    const auto result = verifier().verify(token, now);
    std::string error;
    const auto h = auth::parse_json(header, error);
    const auto c = auth::parse_json(claims, error);
    const bool header_ok = h && h->kind == auth::Json::Kind::object && h->string_member("alg") == "HS256" &&
                           !h->member("crit");
    const bool claims_ok = c && c->kind == auth::Json::Kind::object;
    if (result.claims && (!header_ok || !claims_ok)) std::abort();
    if (token.size() <= auth::max_token_bytes && header_ok && claims_ok && !result.claims &&
        result.problem != "the token has expired" && result.problem != "the token is not valid yet" &&
        result.problem != "exp is not a number" && result.problem != "nbf is not a number")
        std::abort();
    return 0;
}
