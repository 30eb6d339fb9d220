#include "auth/jwt.hpp"

#include <algorithm>
#include <cmath>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include "auth/json.hpp"

namespace sluice::auth {

struct JwtVerifier::Key {
    config::JwtAlg alg = config::JwtAlg::hs256;
    std::string kid;
    std::string secret;
    EVP_PKEY* pkey = nullptr;
    ~Key() { EVP_PKEY_free(pkey); }
};

namespace {

int base64url_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
}

std::string_view alg_name(config::JwtAlg alg) {
    switch (alg) {
    case config::JwtAlg::hs256: return "HS256";
    case config::JwtAlg::rs256: return "RS256";
    case config::JwtAlg::es256: return "ES256";
    }
    return "?";
}

std::optional<config::JwtAlg> alg_of(std::string_view name) {
    if (name == "HS256") return config::JwtAlg::hs256;
    if (name == "RS256") return config::JwtAlg::rs256;
    if (name == "ES256") return config::JwtAlg::es256;
    return std::nullopt;
}

// OpenSSL's own check of a public key (RSA: n and e in range, e odd; EC: the point on the
// curve).
bool passes_public_check(EVP_PKEY* pkey) {
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_pkey(nullptr, pkey, nullptr);
    const bool ok = ctx && EVP_PKEY_public_check(ctx) == 1;
    EVP_PKEY_CTX_free(ctx);
    return ok;
}

// Whether `pkey` can verify `alg` (RSA of at least 2048 bits with an odd e of at least
// 65537: with e = 1 or 3 anyone could make signatures; EC on P-256).
std::string unusable(EVP_PKEY* pkey, config::JwtAlg alg) {
    if (alg == config::JwtAlg::rs256) {
        if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA) return "an RS256 key must be an RSA public key";
        if (EVP_PKEY_get_bits(pkey) < 2048) return "an RS256 key must have at least 2048 bits";
        BIGNUM* e = nullptr;
        bool weak = !EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, &e) || !BN_is_odd(e) || BN_num_bits(e) < 17;
        BN_free(e);
        if (weak || !passes_public_check(pkey)) return "an RS256 key must have an odd exponent of at least 65537";
        return {};
    }
    if (alg == config::JwtAlg::es256) {
        char group[64] = {0};
        std::size_t len = 0;
        if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC ||
            !EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) ||
            std::string_view(group, len) != "prime256v1")
            return "an ES256 key must be an EC public key on P-256";
        if (!passes_public_check(pkey)) return "an ES256 key's point is not on P-256";
        return {};
    }
    return "an HS256 key is a secret, not a public key";
}

EVP_PKEY* pem_public_key(const std::string& pem) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    if (!bio) return nullptr;
    EVP_PKEY* pkey = PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    return pkey;
}

// An EVP_PKEY from OSSL_PARAMs (a JWK's components).
EVP_PKEY* from_params(const char* type, OSSL_PARAM_BLD* bld) {
    OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
    EVP_PKEY* pkey = nullptr;
    if (params && ctx && EVP_PKEY_fromdata_init(ctx) == 1) EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pkey;
}

// One JWK (RFC 7517): an RSA key (n, e) or an EC P-256 key (x, y).
std::unique_ptr<JwtVerifier::Key> jwk_key(const Json& jwk, std::string& error) {
    auto key = std::make_unique<JwtVerifier::Key>();
    const auto kty = jwk.string_member("kty");
    if (auto kid = jwk.string_member("kid")) key->kid = std::string(*kid);
    const auto bytes = [&](std::string_view name) -> std::optional<std::string> {
        const auto text = jwk.string_member(name);
        return text ? base64url_decode(*text) : std::nullopt;
    };
    OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
    if (!bld) {
        error = "out of memory";
        return nullptr;
    }
    if (kty == "RSA") {
        key->alg = config::JwtAlg::rs256;
        const auto n = bytes("n"), e = bytes("e");
        if (!n || !e || n->empty() || e->empty()) {
            error = "an RSA key needs n and e (base64url)";
        } else {
            BIGNUM* bn_n = BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()), static_cast<int>(n->size()), nullptr);
            BIGNUM* bn_e = BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()), static_cast<int>(e->size()), nullptr);
            if (bn_n && bn_e && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) &&
                OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e))
                key->pkey = from_params("RSA", bld);
            BN_free(bn_n);
            BN_free(bn_e);
        }
    } else if (kty == "EC") {
        key->alg = config::JwtAlg::es256;
        const auto x = bytes("x"), y = bytes("y");
        if (jwk.string_member("crv") != "P-256") {
            error = "an EC key must be on P-256 (crv: P-256)";
        } else if (!x || !y || x->size() != 32 || y->size() != 32) {
            error = "an EC key needs x and y of 32 bytes each (base64url)";
        } else {
            std::string point = "\x04" + *x + *y;
            if (OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
                OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()))
                key->pkey = from_params("EC", bld);
        }
    } else {
        error = "kty must be RSA or EC";
    }
    OSSL_PARAM_BLD_free(bld);
    if (!error.empty()) return nullptr;
    if (const auto alg = jwk.string_member("alg"); alg && alg_of(*alg) != key->alg) {
        error = "its alg does not fit its kty";
        return nullptr;
    }
    if (!key->pkey) {
        error = "not a valid public key";
        return nullptr;
    }
    if (auto why = unusable(key->pkey, key->alg); !why.empty()) {
        error = why;
        return nullptr;
    }
    return key;
}

bool verify_signature(const JwtVerifier::Key& key, std::string_view input, const std::string& signature) {
    if (key.alg == config::JwtAlg::hs256) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!HMAC(EVP_sha256(), key.secret.data(), static_cast<int>(key.secret.size()),
                  reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len))
            return false;
        return signature.size() == len && CRYPTO_memcmp(mac, signature.data(), len) == 0;
    }
    std::string der;  // ES256 signs r || s (32 bytes each); OpenSSL reads DER
    std::string_view sig = signature;
    if (key.alg == config::JwtAlg::es256) {
        if (signature.size() != 64) return false;
        ECDSA_SIG* ecdsa = ECDSA_SIG_new();
        BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data()), 32, nullptr);
        BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(signature.data()) + 32, 32, nullptr);
        if (!ecdsa || !r || !s || ECDSA_SIG_set0(ecdsa, r, s) != 1) {
            BN_free(r);
            BN_free(s);
            ECDSA_SIG_free(ecdsa);
            return false;
        }
        unsigned char* out = nullptr;
        const int n = i2d_ECDSA_SIG(ecdsa, &out);
        ECDSA_SIG_free(ecdsa);
        if (n <= 0) return false;
        der.assign(reinterpret_cast<char*>(out), static_cast<std::size_t>(n));
        OPENSSL_free(out);
        sig = der;
    }
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok = ctx && EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key.pkey) == 1 &&
                    EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
}

// A NumericDate (RFC 7519 2): seconds, possibly with a fraction; nullopt when not a number.
std::optional<double> numeric_date(const Json* v) {
    if (!v || v->kind != Json::Kind::number) return std::nullopt;
    try {
        const double d = std::stod(v->text);
        if (!std::isfinite(d)) return std::nullopt;
        return d;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

}  // namespace

std::string base64url_encode(std::string_view data) {
    static constexpr char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    out.reserve((data.size() * 4 + 2) / 3);
    std::uint32_t acc = 0;
    int bits = 0;
    for (const unsigned char c : data) {
        acc = (acc << 8) | c;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out += table[(acc >> bits) & 63];
        }
    }
    if (bits > 0) out += table[(acc << (6 - bits)) & 63];
    return out;
}

std::optional<std::string> base64url_decode(std::string_view text) {
    if (text.size() % 4 == 1) return std::nullopt;
    std::string out;
    out.reserve(text.size() * 3 / 4);
    std::uint32_t acc = 0;
    int bits = 0;
    for (const char c : text) {
        const int v = base64url_value(c);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<std::uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xff));
        }
    }
    // The bits left over must be zero (one spelling per value).
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
    return out;
}

JwtVerifier::~JwtVerifier() = default;

std::shared_ptr<const JwtVerifier> JwtVerifier::build(const config::JwtConfig& jwt, std::string& error) {
    std::shared_ptr<JwtVerifier> v(new JwtVerifier());
    v->leeway_ = std::chrono::duration_cast<std::chrono::seconds>(jwt.leeway).count();
    for (std::size_t i = 0; i < jwt.keys.size(); ++i) {
        const auto& spec = jwt.keys[i];
        const std::string which = "jwt.keys entry " + std::to_string(i + 1);
        if (!spec.jwks.empty()) {
            std::string json_error;
            const auto doc = parse_json(spec.jwks, json_error);
            const Json* keys = doc ? doc->member("keys") : nullptr;
            if (!doc || !keys || keys->kind != Json::Kind::array || keys->items.empty()) {
                error = which + ": " + spec.jwks_file + " is not a JWKS ({\"keys\": [...]})" +
                        (json_error.empty() ? "" : ": " + json_error);
                return nullptr;
            }
            std::size_t usable = 0;
            for (std::size_t k = 0; k < keys->items.size(); ++k) {
                // An identity provider's set may hold encryption keys and kinds sluice does
                // not verify with (oct, OKP): those are passed over, not refused.
                const Json& jwk = keys->items[k];
                const auto kty = jwk.string_member("kty");
                if (jwk.string_member("use") == "enc" || (kty && *kty != "RSA" && *kty != "EC")) continue;
                ++usable;
                std::string key_error;
                auto key = jwk_key(jwk, key_error);
                if (!key) {
                    error = which + ": key " + std::to_string(k + 1) + " of " + spec.jwks_file + ": " + key_error;
                    return nullptr;
                }
                v->keys_.push_back(std::move(key));
            }
            if (usable == 0) {
                error = which + ": " + spec.jwks_file + " holds no signing key sluice can use (RSA or EC P-256)";
                return nullptr;
            }
            continue;
        }
        auto key = std::make_unique<Key>();
        key->alg = spec.alg.value_or(config::JwtAlg::hs256);
        key->kid = spec.kid;
        if (key->alg == config::JwtAlg::hs256) {
            key->secret = spec.secret;
        } else {
            key->pkey = pem_public_key(spec.pem);
            if (!key->pkey) {
                error = which + ": " + spec.pem_file + " holds no PEM public key";
                return nullptr;
            }
            if (auto why = unusable(key->pkey, key->alg); !why.empty()) {
                error = which + ": " + spec.pem_file + ": " + why;
                return nullptr;
            }
        }
        v->keys_.push_back(std::move(key));
    }
    return v;
}

JwtVerifier::Result JwtVerifier::verify(std::string_view token, std::int64_t now) const {
    Result out;
    auto fail = [&out](std::string why) {
        out.problem = std::move(why);
        return out;
    };
    if (token.size() > max_token_bytes) return fail("the token is longer than 8192 bytes");
    const auto dot1 = token.find('.');
    const auto dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
    if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos)
        return fail("the token is not three base64url parts");
    const auto header_text = base64url_decode(token.substr(0, dot1));
    const auto payload_text = base64url_decode(token.substr(dot1 + 1, dot2 - dot1 - 1));
    const auto signature = base64url_decode(token.substr(dot2 + 1));
    if (!header_text || !payload_text || !signature) return fail("the token is not three base64url parts");
    std::string error;
    const auto header = parse_json(*header_text, error);
    if (!header || header->kind != Json::Kind::object) return fail("the token's header is not a JSON object");
    const auto alg_text = header->string_member("alg");
    const auto alg = alg_text ? alg_of(*alg_text) : std::nullopt;
    if (!alg) return fail("the token's alg is not HS256, RS256 or ES256");
    if (header->member("crit")) return fail("the token names critical extensions");
    if (header->member("kid") && !header->string_member("kid")) return fail("the token's kid is not a string");
    const auto kid = header->string_member("kid");
    // Verified first: nothing of the payload is read before.
    const std::string_view input = token.substr(0, dot2);
    // A bogus token costs a signature check per key tried, before any limit counts it: at
    // most max_keys_tried (a token naming its kid needs one).
    std::vector<const Key*> candidates;
    for (const auto& key : keys_)
        if (key->alg == *alg && (!kid || key->kid.empty() || key->kid == *kid)) candidates.push_back(key.get());
    if (candidates.empty())
        return fail("no configured key verifies " + std::string(alg_name(*alg)) + " tokens" + (kid ? " of that kid" : ""));
    if (candidates.size() > max_keys_tried)
        return fail("more than 4 keys could have signed the token: it must name its kid");
    const bool verified = std::any_of(candidates.begin(), candidates.end(),
                                      [&](const Key* key) { return verify_signature(*key, input, *signature); });
    if (!verified) return fail("the signature does not verify");
    const auto payload = parse_json(*payload_text, error);
    if (!payload || payload->kind != Json::Kind::object) return fail("the token's claims are not a JSON object");
    if (const Json* exp = payload->member("exp")) {
        const auto at = numeric_date(exp);
        if (!at) return fail("exp is not a number");
        if (static_cast<double>(now) >= *at + static_cast<double>(leeway_)) return fail("the token has expired");
    }
    if (const Json* nbf = payload->member("nbf")) {
        const auto at = numeric_date(nbf);
        if (!at) return fail("nbf is not a number");
        if (static_cast<double>(now) + static_cast<double>(leeway_) < *at) return fail("the token is not valid yet");
    }
    Claims claims;
    for (const auto& [name, value] : payload->members) {
        if (value.kind == Json::Kind::string || value.kind == Json::Kind::number)
            claims.emplace_back(name, value.text);
        else if (value.kind == Json::Kind::boolean)
            claims.emplace_back(name, value.boolean ? "true" : "false");
    }
    out.claims = std::move(claims);
    return out;
}

std::optional<std::string_view> claim_value(const JwtVerifier::Claims& claims, std::string_view claim) {
    for (const auto& [name, value] : claims)
        if (name == claim) return std::string_view(value);
    return std::nullopt;
}

}  // namespace sluice::auth
