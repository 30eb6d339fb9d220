// OpenSSL's and nghttp2's memory from operator new instead of malloc: in sluice that is the
// per-thread block cache (src/alloc/thread_cache.cpp), where a block freed is taken again by
// the next allocation of its size on that thread without a lock. A TLS connection in
// OpenSSL's SSL_MODE_RELEASE_BUFFERS (src/tls/context.cpp) gives its 17 KB record buffers
// back whenever it has read everything, and takes them again for the next request; nghttp2
// allocates per stream and per header block. Through glibc's malloc these cost about 2,500
// instructions per request over TLS.
//
// Every block carries the size it was asked for in 16 bytes in front of it (operator new's
// alignment is kept), so that it is given back by size and can be grown (realloc).
#pragma once

#include <cstddef>

#include <nghttp2/nghttp2.h>

namespace sluice::alloc {

// malloc, free, realloc and calloc on operator new. `library_malloc(0)` gives a block (of
// no bytes); free(nullptr) does nothing; realloc(nullptr, n) allocates, realloc(p, 0) frees
// and gives nullptr. nullptr when memory is out (never throws).
void* library_malloc(std::size_t size) noexcept;
void library_free(void* p) noexcept;
void* library_realloc(void* p, std::size_t size) noexcept;
void* library_calloc(std::size_t count, std::size_t size) noexcept;
// The size a block of library_malloc was asked for.
std::size_t library_block_size(const void* p) noexcept;

// For nghttp2_session_server_new3 (nghttp2 copies it).
nghttp2_mem* nghttp2_memory() noexcept;

// Whether OpenSSL takes its memory from library_malloc. It has to be set before OpenSSL's
// first allocation, which Asio's static initialisation makes: a constructor of this file
// that runs before the program's own static initialisers sets it.
bool openssl_memory_installed() noexcept;

}  // namespace sluice::alloc
