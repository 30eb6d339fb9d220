// tls/pem: certificate pairs, CA bundles, SNI name matching and the file reader, on
// certificates made here with OpenSSL (nothing stored that could expire).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tls/pem.hpp"

using sluice::tls::CertificateInfo;

namespace {

struct Made {
    std::string cert_pem;
    std::string key_pem;
};

std::string bio_text(BIO* bio) {
    BUF_MEM* mem = nullptr;
    BIO_get_mem_ptr(bio, &mem);
    return std::string(mem->data, mem->length);
}

std::string key_pem(EVP_PKEY* key, bool encrypted = false) {
    BIO* bio = BIO_new(BIO_s_mem());
    static char pass[] = "secret";
    PEM_write_bio_PrivateKey(bio, key, encrypted ? EVP_aes_256_cbc() : nullptr, encrypted ? reinterpret_cast<unsigned char*>(pass) : nullptr,
                             encrypted ? 6 : 0, nullptr, nullptr);
    auto text = bio_text(bio);
    BIO_free(bio);
    return text;
}

// A P-256 certificate for `cn` with subjectAltName `san` (e.g. "DNS:a.test,IP:127.0.0.1",
// empty for none), valid from `from_days` to `to_days` around now, self-signed.
Made make_certificate(const std::string& cn, const std::string& san, long from_days = -1, long to_days = 30,
                      EVP_PKEY** key_out = nullptr) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    REQUIRE(key);
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), from_days * 86400);
    X509_gmtime_adj(X509_getm_notAfter(cert), to_days * 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    if (!san.empty()) {
        X509V3_CTX ctx;
        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
        X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
        REQUIRE(ext);
        X509_add_ext(cert, ext, -1);
        X509_EXTENSION_free(ext);
    }
    REQUIRE(X509_sign(cert, key, EVP_sha256()) > 0);
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, cert);
    Made made{bio_text(bio), key_pem(key)};
    BIO_free(bio);
    X509_free(cert);
    if (key_out)
        *key_out = key;
    else
        EVP_PKEY_free(key);
    return made;
}

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/sluice-pem-test-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
    std::string file(const std::string& name, const std::string& content) const {
        const auto p = path + "/" + name;
        std::ofstream(p, std::ios::binary) << content;
        return p;
    }
};

}  // namespace

TEST_CASE("check_certificate_pair: a matching pair, its names and dates") {
    const auto a = make_certificate("Ignored.CN", "DNS:A.Test,DNS:*.w.test,IP:127.0.0.1", -1, 30);
    CertificateInfo info;
    REQUIRE(sluice::tls::check_certificate_pair(a.cert_pem, a.key_pem, info).empty());
    CHECK(info.names == std::vector<std::string>{"a.test", "*.w.test"});  // DNS names only, lower-case
    CHECK(info.chain_length == 1);
    const auto now = std::time(nullptr);
    CHECK(info.not_before < now);
    CHECK(info.not_after > now + 29 * 86400);
    CHECK(info.not_after < now + 31 * 86400);

    SECTION("without subjectAltName the CN is the name") {
        const auto cn = make_certificate("Only.CN.test", "");
        CertificateInfo cn_info;
        REQUIRE(sluice::tls::check_certificate_pair(cn.cert_pem, cn.key_pem, cn_info).empty());
        CHECK(cn_info.names == std::vector<std::string>{"only.cn.test"});
    }
    SECTION("a chain file counts its certificates; other blocks in it are skipped") {
        const auto other = make_certificate("inter", "");
        CertificateInfo chain_info;
        REQUIRE(sluice::tls::check_certificate_pair(a.cert_pem + other.cert_pem, a.key_pem, chain_info).empty());
        CHECK(chain_info.chain_length == 2);
        CHECK(chain_info.names.front() == "a.test");  // the leaf comes first
    }
    SECTION("an expired certificate still parses; its date says so") {
        const auto old = make_certificate("old", "DNS:old.test", -10, -1);
        CertificateInfo old_info;
        REQUIRE(sluice::tls::check_certificate_pair(old.cert_pem, old.key_pem, old_info).empty());
        CHECK(old_info.not_after < now);
    }
}

TEST_CASE("check_certificate_pair: every bad input is an error that says what is wrong") {
    const auto a = make_certificate("a", "DNS:a.test");
    const auto b = make_certificate("b", "DNS:b.test");
    CertificateInfo info;
    CHECK_THAT(sluice::tls::check_certificate_pair(a.cert_pem, b.key_pem, info),
               Catch::Contains("does not match the certificate"));
    CHECK_THAT(sluice::tls::check_certificate_pair("", a.key_pem, info), Catch::Contains("no PEM certificate"));
    CHECK_THAT(sluice::tls::check_certificate_pair(a.key_pem, a.key_pem, info), Catch::Contains("no PEM certificate"));
    CHECK_THAT(sluice::tls::check_certificate_pair(
                   "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", a.key_pem, info),
               Catch::Contains("certificate 1 does not parse"));
    // A good certificate followed by a broken one: the chain is refused, not cut short.
    CHECK_THAT(sluice::tls::check_certificate_pair(
                   a.cert_pem + "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", a.key_pem, info),
               Catch::Contains("certificate 2 does not parse"));
    CHECK_THAT(sluice::tls::check_certificate_pair(a.cert_pem, "", info), Catch::Contains("no usable PEM private key"));
    CHECK_THAT(sluice::tls::check_certificate_pair(a.cert_pem, a.cert_pem, info),
               Catch::Contains("no usable PEM private key"));

    EVP_PKEY* key = nullptr;
    const auto c = make_certificate("c", "DNS:c.test", -1, 30, &key);
    const auto encrypted = key_pem(key, true);
    EVP_PKEY_free(key);
    REQUIRE_THAT(encrypted, Catch::Contains("ENCRYPTED"));
    // Refused at once, never a passphrase prompt on the terminal.
    CHECK_THAT(sluice::tls::check_certificate_pair(c.cert_pem, encrypted, info), Catch::Contains("encrypted"));
}

TEST_CASE("check_ca_bundle counts certificates and refuses anything else") {
    const auto a = make_certificate("a", "");
    const auto b = make_certificate("b", "");
    std::size_t count = 0;
    CHECK(sluice::tls::check_ca_bundle(a.cert_pem + b.cert_pem, count).empty());
    CHECK(count == 2);
    CHECK_THAT(sluice::tls::check_ca_bundle("# nothing here\n", count), Catch::Contains("no PEM certificate"));
    CHECK_THAT(sluice::tls::check_ca_bundle(a.cert_pem + "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
                                            count),
               Catch::Contains("does not parse"));
}

TEST_CASE("name_matches: exact names and one-label wildcards") {
    const std::vector<std::string> names{"a.test", "*.w.test"};
    CHECK(sluice::tls::name_matches(names, "a.test"));
    CHECK(sluice::tls::name_matches(names, "x.w.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, "w.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, ".w.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, "y.x.w.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, "b.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, "xa.test"));
    CHECK_FALSE(sluice::tls::name_matches(names, ""));
    CHECK_FALSE(sluice::tls::name_matches({"*."}, "x."));
    CHECK_FALSE(sluice::tls::name_matches({}, "a.test"));
}

TEST_CASE("read_small_file reads regular files only, up to a size") {
    TempDir dir;
    std::string error;
    const auto small = dir.file("small.pem", "hello\n");
    CHECK(sluice::tls::read_small_file(small, 100, error) == "hello\n");
    CHECK(error.empty());

    const auto big = dir.file("big.pem", std::string(101, 'x'));
    CHECK(sluice::tls::read_small_file(big, 100, error).empty());
    CHECK_THAT(error, Catch::Contains("larger than 100 bytes"));

    error.clear();
    CHECK(sluice::tls::read_small_file(dir.path + "/missing.pem", 100, error).empty());
    CHECK_THAT(error, Catch::Contains("No such file"));

    error.clear();
    CHECK(sluice::tls::read_small_file(dir.path, 100, error).empty());
    CHECK_THAT(error, Catch::Contains("not a regular file"));

    // Neither a device that never ends nor a FIFO nobody writes to may hang or fill memory.
    error.clear();
    CHECK(sluice::tls::read_small_file("/dev/zero", 100, error).empty());
    CHECK_THAT(error, Catch::Contains("not a regular file"));
    const auto fifo = dir.path + "/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    error.clear();
    CHECK(sluice::tls::read_small_file(fifo, 100, error).empty());
    CHECK_THAT(error, Catch::Contains("not a regular file"));

    if (::geteuid() != 0) {  // root reads anything
        const auto closed = dir.file("closed.pem", "x");
        ::chmod(closed.c_str(), 0);
        error.clear();
        CHECK(sluice::tls::read_small_file(closed, 100, error).empty());
        CHECK_THAT(error, Catch::Contains("Permission denied"));
    }
}
