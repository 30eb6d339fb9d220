// JSON Web Tokens (RFC 7519) as rate-limit key parts (`jwt:CLAIM`): a compact JWS from
// `Authorization: Bearer`, verified against the configured keys (HS256 with a secret, RS256
// or ES256 with a PEM public key or a JWKS file, through OpenSSL) before any claim is read.
// The token's `alg` picks the keys (never `none`, never a secret for an RSA or EC token: the
// algorithm-confusion attack); `kid`, when both the token and a key have one, must match;
// `exp` and `nbf` are checked with a leeway; a `crit` header is refused (no extension is
// understood). Pure apart from OpenSSL; fuzzed (tests/fuzz/jwt_fuzz.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace sluice::auth {

inline constexpr std::size_t max_token_bytes = 8192;
// Keys a token is checked against at most (those of its alg and kid): a token that more
// keys could have signed must name its kid (a bogus one costs a signature check per key).
inline constexpr std::size_t max_keys_tried = 4;

// base64url without padding (RFC 7515 2); decoding gives nullopt for anything else.
std::string base64url_encode(std::string_view data);
std::optional<std::string> base64url_decode(std::string_view text);

class JwtVerifier {
public:
    // The keys of `jwt`, their PEM and JWKS texts parsed; nullptr and `error` when one is not
    // a usable key for its algorithm.
    static std::shared_ptr<const JwtVerifier> build(const config::JwtConfig& jwt, std::string& error);
    ~JwtVerifier();

    using Claims = std::vector<std::pair<std::string, std::string>>;
    struct Result {
        std::optional<Claims> claims;  // the top-level string, number and boolean claims
        std::string problem;           // why not (for the 401's detail)
    };
    // now: POSIX seconds.
    Result verify(std::string_view token, std::int64_t now) const;

    std::size_t key_count() const { return keys_.size(); }

    struct Key;

private:
    JwtVerifier() = default;
    std::vector<std::unique_ptr<Key>> keys_;
    std::int64_t leeway_ = 30;
};

// The value of `claim` among verified claims.
std::optional<std::string_view> claim_value(const JwtVerifier::Claims& claims, std::string_view claim);

}  // namespace sluice::auth
