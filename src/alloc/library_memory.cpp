#include "alloc/library_memory.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <new>

#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>

namespace sluice::alloc {
namespace {

// In front of every block: the size asked for (16 bytes, to keep operator new's alignment).
constexpr std::size_t header = 16;
static_assert(header % alignof(std::max_align_t) == 0);

std::size_t& size_of(void* p) { return *reinterpret_cast<std::size_t*>(static_cast<unsigned char*>(p) - header); }

bool installed = false;

void* openssl_malloc(std::size_t size, const char*, int) {
    return size == 0 ? nullptr : library_malloc(size);  // as OpenSSL's own CRYPTO_malloc
}
void* openssl_realloc(void* p, std::size_t size, const char*, int) { return library_realloc(p, size); }
void openssl_free(void* p, const char*, int) { library_free(p); }

void* nghttp2_malloc_fn(std::size_t size, void*) { return library_malloc(size); }
void nghttp2_free_fn(void* p, void*) { library_free(p); }
void* nghttp2_calloc_fn(std::size_t count, std::size_t size, void*) { return library_calloc(count, size); }
void* nghttp2_realloc_fn(void* p, std::size_t size, void*) { return library_realloc(p, size); }

nghttp2_mem nghttp2_functions{nullptr, nghttp2_malloc_fn, nghttp2_free_fn, nghttp2_calloc_fn, nghttp2_realloc_fn};

// Before the program's static initialisers (priority 101 runs before the default): Asio's
// SSL support initialises OpenSSL in one of them, and OpenSSL refuses new functions once it
// has allocated anything.
__attribute__((constructor(101))) void install_openssl_memory() {
    installed = CRYPTO_set_mem_functions(openssl_malloc, openssl_realloc, openssl_free) == 1;
}

}  // namespace

void* library_malloc(std::size_t size) noexcept {
    if (size > std::numeric_limits<std::size_t>::max() - header) return nullptr;
    void* base = ::operator new(size + header, std::nothrow);
    if (!base) return nullptr;
    void* p = static_cast<unsigned char*>(base) + header;
    size_of(p) = size;
    return p;
}

void library_free(void* p) noexcept {
    if (!p) return;
    void* base = static_cast<unsigned char*>(p) - header;
#if defined(__cpp_sized_deallocation)
    ::operator delete(base, size_of(p) + header);
#else
    ::operator delete(base);  // (clang before 19 has no sized delete unless asked: the fuzz targets)
#endif
}

void* library_realloc(void* p, std::size_t size) noexcept {
    if (!p) return library_malloc(size);
    if (size == 0) {
        library_free(p);
        return nullptr;
    }
    const std::size_t old = size_of(p);
    // The same block where the size stays (a shrink keeps it too: the class is of the size
    // recorded, which must stay what it was allocated with).
    if (size == old) return p;
    void* grown = library_malloc(size);
    if (!grown) return nullptr;  // p stays as it was, as realloc's does
    std::memcpy(grown, p, old < size ? old : size);
    library_free(p);
    return grown;
}

void* library_calloc(std::size_t count, std::size_t size) noexcept {
    if (size != 0 && count > std::numeric_limits<std::size_t>::max() / size) return nullptr;
    void* p = library_malloc(count * size);
    if (p) std::memset(p, 0, count * size);
    return p;
}

std::size_t library_block_size(const void* p) noexcept { return size_of(const_cast<void*>(p)); }

nghttp2_mem* nghttp2_memory() noexcept { return &nghttp2_functions; }

bool openssl_memory_installed() noexcept { return installed; }

}  // namespace sluice::alloc
