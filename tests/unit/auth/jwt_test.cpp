// JWT verification with keys made here by OpenSSL: what is accepted, and every way a token
// is refused (signature, algorithm confusion, none, expiry, nbf, crit, kid, malformed parts).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "auth/json.hpp"
#include "auth/jwt.hpp"

using namespace sluice;
using auth::JwtVerifier;

namespace {

constexpr std::int64_t now = 1'800'000'000;
const std::string secret(40, 's');

std::string b64url(std::string_view data) { return auth::base64url_encode(data); }

struct Pkey {
    EVP_PKEY* p;
    explicit Pkey(EVP_PKEY* k) : p(k) { REQUIRE(p); }
    ~Pkey() { EVP_PKEY_free(p); }
    std::string public_pem() const {
        BIO* bio = BIO_new(BIO_s_mem());
        PEM_write_bio_PUBKEY(bio, p);
        char* data = nullptr;
        const long n = BIO_get_mem_data(bio, &data);
        std::string out(data, static_cast<std::size_t>(n));
        BIO_free(bio);
        return out;
    }
};

std::string sign(std::string_view alg, std::string_view input, const Pkey* key) {
    if (alg == "HS256") {
        unsigned char mac[32];
        unsigned int len = 0;
        HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
             reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
        return std::string(reinterpret_cast<char*>(mac), len);
    }
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    REQUIRE(EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key->p) == 1);
    std::size_t len = 0;
    REQUIRE(EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    std::string sig(len, '\0');
    REQUIRE(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    sig.resize(len);
    EVP_MD_CTX_free(ctx);
    if (alg != "ES256") return sig;
    // DER -> r || s, 32 bytes each.
    const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* ecdsa = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
    REQUIRE(ecdsa);
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(ecdsa), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(ecdsa), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(ecdsa);
    return raw;
}

std::string token(std::string_view header, std::string_view payload, std::string_view alg, const Pkey* key = nullptr) {
    const std::string input = b64url(header) + "." + b64url(payload);
    return input + "." + b64url(sign(alg, input, key));
}

std::shared_ptr<const JwtVerifier> verifier(const std::vector<config::JwtKeyConfig>& keys) {
    config::JwtConfig cfg;
    cfg.keys = keys;
    std::string error;
    auto v = JwtVerifier::build(cfg, error);
    INFO(error);
    REQUIRE(v);
    return v;
}

config::JwtKeyConfig hs256() {
    config::JwtKeyConfig k;
    k.alg = config::JwtAlg::hs256;
    k.secret = secret;
    return k;
}

config::JwtKeyConfig pem_key(config::JwtAlg alg, const Pkey& key, std::string kid = {}) {
    config::JwtKeyConfig k;
    k.alg = alg;
    k.pem = key.public_pem();
    k.pem_file = "test.pem";
    k.kid = std::move(kid);
    return k;
}

std::string problem(const JwtVerifier& v, const std::string& t) {
    auto r = v.verify(t, now);
    CHECK_FALSE(r.claims);
    return r.problem;
}

}  // namespace

TEST_CASE("jwt: an HS256 token's claims, once verified", "[jwt]") {
    auto v = verifier({hs256()});
    const auto t = token(R"({"alg":"HS256","typ":"JWT"})",
                         R"({"sub":"user-7","tier":3,"admin":false,"exp":1800000100,"nested":{"a":1},"list":[1]})", "HS256");
    auto r = v->verify(t, now);
    INFO(r.problem);
    REQUIRE(r.claims);
    CHECK(auth::claim_value(*r.claims, "sub") == "user-7");
    CHECK(auth::claim_value(*r.claims, "tier") == "3");
    CHECK(auth::claim_value(*r.claims, "admin") == "false");
    CHECK_FALSE(auth::claim_value(*r.claims, "nested"));
    CHECK_FALSE(auth::claim_value(*r.claims, "list"));
}

TEST_CASE("jwt: refusals", "[jwt]") {
    Pkey rsa(EVP_RSA_gen(2048));
    auto v = verifier({hs256(), pem_key(config::JwtAlg::rs256, rsa)});
    const std::string header = R"({"alg":"HS256"})";
    const std::string good = token(header, R"({"sub":"a"})", "HS256");
    REQUIRE(v->verify(good, now).claims);
    // The payload changed after signing.
    const auto dot = good.rfind('.');
    const std::string forged = b64url(header) + "." + b64url(R"({"sub":"b"})") + good.substr(dot);
    CHECK(problem(*v, forged) == "the signature does not verify");
    // alg none, or another algorithm than the keys'.
    CHECK(problem(*v, b64url(R"({"alg":"none"})") + "." + b64url(R"({"sub":"a"})") + ".") ==
          "the token's alg is not HS256, RS256 or ES256");
    CHECK(problem(*v, token(R"({"alg":"ES256"})", R"({"sub":"a"})", "HS256")) ==
          "no configured key verifies ES256 tokens");
    // Expiry and not-before, with the default 30 s of leeway.
    CHECK(problem(*v, token(header, R"({"exp":1799999960})", "HS256")) == "the token has expired");
    CHECK(v->verify(token(header, R"({"exp":1799999990})", "HS256"), now).claims);
    CHECK(problem(*v, token(header, R"({"nbf":1800000040})", "HS256")) == "the token is not valid yet");
    CHECK(problem(*v, token(header, R"({"exp":"soon"})", "HS256")) == "exp is not a number");
    CHECK(problem(*v, token(R"({"alg":"HS256","crit":["b64"]})", "{}", "HS256")) ==
          "the token names critical extensions");
    // A claim given twice could be read two ways: refused.
    CHECK(problem(*v, token(header, R"({"sub":"a","sub":"b"})", "HS256")) == "the token's claims are not a JSON object");
    // Malformed parts.
    CHECK(problem(*v, "abc") == "the token is not three base64url parts");
    CHECK(problem(*v, good + ".x") == "the token is not three base64url parts");
    CHECK(problem(*v, good.substr(0, dot) + "=" + good.substr(dot)) == "the token is not three base64url parts");
    CHECK(problem(*v, std::string(9000, 'a')) == "the token is longer than 8192 bytes");
    CHECK(problem(*v, b64url("not json") + "." + b64url("{}") + ".") == "the token's header is not a JSON object");
}

TEST_CASE("jwt: RS256 and ES256 with PEM keys, kid, and no algorithm confusion", "[jwt]") {
    Pkey rsa(EVP_RSA_gen(2048));
    Pkey ec(EVP_EC_gen("P-256"));
    Pkey other_ec(EVP_EC_gen("P-256"));
    auto v = verifier({pem_key(config::JwtAlg::rs256, rsa, "r1"), pem_key(config::JwtAlg::es256, ec)});
    auto rs = v->verify(token(R"({"alg":"RS256","kid":"r1"})", R"({"sub":"r"})", "RS256", &rsa), now);
    REQUIRE(rs.claims);
    CHECK(auth::claim_value(*rs.claims, "sub") == "r");
    auto es = v->verify(token(R"({"alg":"ES256"})", R"({"sub":"e"})", "ES256", &ec), now);
    INFO(es.problem);
    REQUIRE(es.claims);
    CHECK(problem(*v, token(R"({"alg":"ES256"})", R"({"sub":"e"})", "ES256", &other_ec)) ==
          "the signature does not verify");
    CHECK(problem(*v, token(R"({"alg":"RS256","kid":"r2"})", "{}", "RS256", &rsa)) ==
          "no configured key verifies RS256 tokens of that kid");
    // The RSA public key used as an HMAC secret (the classic confusion) finds no HS256 key.
    const std::string pem = rsa.public_pem();
    const std::string input = b64url(R"({"alg":"HS256"})") + "." + b64url("{}");
    unsigned char mac[32];
    unsigned int len = 0;
    HMAC(EVP_sha256(), pem.data(), static_cast<int>(pem.size()), reinterpret_cast<const unsigned char*>(input.data()),
         input.size(), mac, &len);
    CHECK(problem(*v, input + "." + b64url(std::string(reinterpret_cast<char*>(mac), len))) ==
          "no configured key verifies HS256 tokens");
}

TEST_CASE("jwt: a JWKS file of RSA and EC keys", "[jwt]") {
    Pkey rsa(EVP_RSA_gen(2048));
    Pkey ec(EVP_EC_gen("P-256"));
    auto bn = [](EVP_PKEY* k, const char* name) {
        BIGNUM* b = nullptr;
        REQUIRE(EVP_PKEY_get_bn_param(k, name, &b));
        std::string out(static_cast<std::size_t>(BN_num_bytes(b)), '\0');
        BN_bn2bin(b, reinterpret_cast<unsigned char*>(out.data()));
        BN_free(b);
        return b64url(out);
    };
    unsigned char point[65];
    std::size_t point_len = 0;
    REQUIRE(EVP_PKEY_get_octet_string_param(ec.p, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &point_len));
    REQUIRE(point_len == 65);
    const std::string x = b64url(std::string(reinterpret_cast<char*>(point) + 1, 32));
    const std::string y = b64url(std::string(reinterpret_cast<char*>(point) + 33, 32));
    config::JwtKeyConfig jwks;
    jwks.jwks_file = "keys.json";
    jwks.jwks = R"({"keys":[{"kty":"RSA","kid":"r","alg":"RS256","n":")" + bn(rsa.p, OSSL_PKEY_PARAM_RSA_N) +
                R"(","e":")" + bn(rsa.p, OSSL_PKEY_PARAM_RSA_E) + R"("},{"kty":"EC","kid":"e","crv":"P-256","x":")" +
                x + R"(","y":")" + y + R"("}]})";
    auto v = verifier({jwks});
    CHECK(v->key_count() == 2);
    CHECK(v->verify(token(R"({"alg":"RS256","kid":"r"})", R"({"sub":"1"})", "RS256", &rsa), now).claims);
    CHECK(v->verify(token(R"({"alg":"ES256","kid":"e"})", R"({"sub":"1"})", "ES256", &ec), now).claims);
    CHECK(problem(*v, token(R"({"alg":"ES256","kid":"r"})", "{}", "ES256", &ec)) ==
          "no configured key verifies ES256 tokens of that kid");

    // A token more than 4 keys could have signed must name its kid.
    std::vector<config::JwtKeyConfig> many(5, jwks);
    auto crowded = verifier(many);
    CHECK(problem(*crowded, token(R"({"alg":"ES256"})", "{}", "ES256", &ec)) ==
          "more than 4 keys could have signed the token: it must name its kid");
    CHECK(crowded->verify(token(R"({"alg":"RS256","kid":"r"})", "{}", "RS256", &rsa), now).claims.has_value() == false);
    CHECK(problem(*v, token(R"({"alg":"RS256","kid":7})", "{}", "RS256", &rsa)) == "the token's kid is not a string");

    // Keys that cannot be used are configuration errors.
    config::JwtConfig bad;
    std::string error;
    bad.keys = {jwks};
    bad.keys[0].jwks = R"({"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA"}]})";
    CHECK_FALSE(JwtVerifier::build(bad, error));
    CHECK(error == "jwt.keys entry 1: key 1 of keys.json: an EC key must be on P-256 (crv: P-256)");
    // Encryption keys and other kinds are passed over; a set of nothing else is refused.
    config::JwtKeyConfig mixed = jwks;
    mixed.jwks = R"({"keys":[{"kty":"oct","k":"AAAA"},{"kty":"RSA","use":"enc","n":"AQ","e":"AQ"},)" +
                 jwks.jwks.substr(std::string(R"({"keys":[)").size());
    CHECK(verifier({mixed})->key_count() == 2);
    bad.keys[0].jwks = R"({"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA"}]})";
    CHECK_FALSE(JwtVerifier::build(bad, error));
    CHECK(error == "jwt.keys entry 1: keys.json holds no signing key sluice can use (RSA or EC P-256)");
    bad.keys[0].jwks = R"({"keys":[]})";
    CHECK_FALSE(JwtVerifier::build(bad, error));
    CHECK(error == "jwt.keys entry 1: keys.json is not a JWKS ({\"keys\": [...]})");
    bad.keys = {pem_key(config::JwtAlg::rs256, ec)};
    CHECK_FALSE(JwtVerifier::build(bad, error));
    CHECK(error == "jwt.keys entry 1: test.pem: an RS256 key must be an RSA public key");
    // An RSA exponent of 1 or 3 would let anyone make signatures.
    for (const char* e : {"AQ", "Aw"}) {
        bad.keys = {jwks};
        bad.keys[0].jwks = R"({"keys":[{"kty":"RSA","n":")" + bn(rsa.p, OSSL_PKEY_PARAM_RSA_N) + R"(","e":")" + e + R"("}]})";
        CHECK_FALSE(JwtVerifier::build(bad, error));
        CHECK(error == "jwt.keys entry 1: key 1 of keys.json: an RS256 key must have an odd exponent of at least 65537");
    }
    // An EC point off the curve.
    bad.keys = {jwks};
    bad.keys[0].jwks = R"({"keys":[{"kty":"EC","crv":"P-256","x":")" + x + R"(","y":")" + x + R"("}]})";
    CHECK_FALSE(JwtVerifier::build(bad, error));
    Pkey small(EVP_RSA_gen(1024));
    bad.keys = {pem_key(config::JwtAlg::rs256, small)};
    CHECK_FALSE(JwtVerifier::build(bad, error));
    CHECK(error == "jwt.keys entry 1: test.pem: an RS256 key must have at least 2048 bits");
}

TEST_CASE("json: strict RFC 8259", "[jwt]") {
    std::string error;
    auto v = auth::parse_json(R"( {"a":[1,-2.5e3,true,null,"x\u00e9\ud83d\ude00"],"b":{}} )", error);
    REQUIRE(v);
    CHECK(v->member("a")->items[4].text == "x\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(v->member("a")->items[1].text == "-2.5e3");
    for (const char* bad : {"", "{", "{\"a\":1,}", "[1,]", "01", "1.", "{\"a\" 1}", "\"\\ud800\"", "\"\x01\"", "tru",
                            "{} x", "\"\\x\"", "\"\xc0\xaf\"", "{\"a\":1,\"a\":2}"}) {
        CAPTURE(bad);
        CHECK_FALSE(auth::parse_json(bad, error));
        CHECK_FALSE(error.empty());
    }
    CHECK_FALSE(auth::parse_json(std::string(40, '[') + std::string(40, ']'), error));
    CHECK(auth::parse_json(std::string(30, '[') + std::string(30, ']'), error));
}
