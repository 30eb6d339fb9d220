// OpenSSL's and nghttp2's memory from operator new (src/alloc/library_memory.hpp).
#include "alloc/library_memory.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>

#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

using namespace sluice::alloc;

TEST_CASE("library memory: malloc, realloc, calloc and free keep what they hold", "[alloc]") {
    auto* p = static_cast<unsigned char*>(library_malloc(100));
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0);
    CHECK(library_block_size(p) == 100);
    std::memset(p, 0xab, 100);
    // Grown: the bytes stay; a block of the new size.
    p = static_cast<unsigned char*>(library_realloc(p, 20000));
    REQUIRE(p != nullptr);
    CHECK(library_block_size(p) == 20000);
    for (int i = 0; i < 100; ++i) REQUIRE(p[i] == 0xab);
    std::memset(p, 0xcd, 20000);
    // Shrunk: what fits stays.
    p = static_cast<unsigned char*>(library_realloc(p, 10));
    REQUIRE(p != nullptr);
    CHECK(library_block_size(p) == 10);
    for (int i = 0; i < 10; ++i) REQUIRE(p[i] == 0xcd);
    CHECK(library_realloc(p, 10) == p);  // the same size: the same block
    CHECK(library_realloc(p, 0) == nullptr);  // freed

    auto* zeroed = static_cast<unsigned char*>(library_calloc(300, 7));
    REQUIRE(zeroed != nullptr);
    for (int i = 0; i < 2100; ++i) REQUIRE(zeroed[i] == 0);
    library_free(zeroed);

    void* none = library_malloc(0);
    CHECK(none != nullptr);
    CHECK(library_block_size(none) == 0);
    library_free(none);
    library_free(nullptr);
    void* fresh = library_realloc(nullptr, 64);
    CHECK(library_block_size(fresh) == 64);
    library_free(fresh);
    // Sizes that cannot be: nullptr, nothing thrown.
    CHECK(library_malloc(std::numeric_limits<std::size_t>::max() - 8) == nullptr);
    CHECK(library_calloc(std::numeric_limits<std::size_t>::max() / 2, 4) == nullptr);
}

TEST_CASE("library memory: OpenSSL allocates from it", "[alloc]") {
    REQUIRE(openssl_memory_installed());
    void* p = OPENSSL_malloc(333);
    REQUIRE(p != nullptr);
    CHECK(library_block_size(p) == 333);  // the size in front of it is ours
    p = OPENSSL_realloc(p, 5000);
    REQUIRE(p != nullptr);
    CHECK(library_block_size(p) == 5000);
    OPENSSL_free(p);
    // OpenSSL's own objects too (a digest's context), used and freed.
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    REQUIRE(ctx != nullptr);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1);
    CHECK(EVP_DigestUpdate(ctx, "abc", 3) == 1);
    CHECK(EVP_DigestFinal_ex(ctx, digest, &length) == 1);
    CHECK(length == 32);
    CHECK(digest[0] == 0xba);  // SHA-256("abc") = ba7816bf...
    EVP_MD_CTX_free(ctx);
}

TEST_CASE("library memory: nghttp2 sessions allocate from it", "[alloc]") {
    nghttp2_session_callbacks* callbacks = nullptr;
    REQUIRE(nghttp2_session_callbacks_new(&callbacks) == 0);
    nghttp2_session* session = nullptr;
    REQUIRE(nghttp2_session_server_new3(&session, callbacks, nullptr, nullptr, nghttp2_memory()) == 0);
    nghttp2_session_callbacks_del(callbacks);
    // A client preface and a HEADERS frame read into it: its streams and header tables are ours.
    static const unsigned char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    CHECK(nghttp2_session_mem_recv(session, preface, sizeof preface - 1) == static_cast<ssize_t>(sizeof preface - 1));
    const unsigned char settings[] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    CHECK(nghttp2_session_mem_recv(session, settings, sizeof settings) == static_cast<ssize_t>(sizeof settings));
    // HEADERS, stream 1, END_STREAM | END_HEADERS: :method GET, :scheme https, :path /, :authority a
    const unsigned char headers[] = {0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x87, 0x84, 0x41, 0x01, 'a'};
    CHECK(nghttp2_session_mem_recv(session, headers, sizeof headers) == static_cast<ssize_t>(sizeof headers));
    CHECK(nghttp2_session_find_stream(session, 1) != nullptr);
    nghttp2_session_del(session);
}
