// A per-thread cache of freed blocks in front of malloc, for every operator new/delete of
// the process (linked into the executables, not the library).
//
// Why: a proxied request allocates and frees about fifty blocks (Beast header fields,
// coroutine frames of 1-4 KB, handler memory, strings), and with dozens of connections per
// worker glibc's own per-thread cache (7 blocks per size, up to 1 KB) overflows, so most
// of them took malloc's slow paths: ~15 % of the instructions of a request. Here a freed
// block up to 32 KB goes onto a free list of its size class on the freeing thread, and the
// next allocation of that class on that thread takes it back: a few instructions, no lock.
// (OpenSSL's and nghttp2's memory comes here too, src/alloc/library_memory.hpp: a TLS
// connection's 17 KB record buffers are taken and given back on every request.)
//
// - Size classes are multiples of 16 bytes up to 8 KB, of 1 KB from there to 32 KB. A block
//   is malloc'ed at its class size; a sized delete gives the class of the size asked for,
//   an unsized one finds it from malloc_usable_size (the largest class that fits in it),
//   so any block on the list of a class has room for that class's size.
// - A block freed on another thread than the one that allocated it simply joins the
//   freeing thread's cache: blocks are plain malloc memory.
// - Bounded: at most 256 blocks per class and 2 MB per thread of blocks up to 8 KB, and
//   1 MB of larger ones (so that a thread holding many idle TLS buffers still caches its
//   small blocks); past that, free().
// - A thread's cache is given back to malloc when the thread ends; after that (late
//   destructors) that thread goes straight to malloc/free.
#include <malloc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {

constexpr std::size_t granule = 16;
constexpr std::size_t small_max = 8192;  // classes of `granule` up to here
constexpr std::size_t large_granule = 1024;
constexpr std::size_t max_block = 32768;
constexpr std::size_t small_classes = small_max / granule + 1;  // class c: c * 16 bytes
constexpr std::size_t classes = small_classes + (max_block - small_max) / large_granule;
constexpr std::uint32_t max_per_class = 256;
constexpr std::size_t max_small_bytes = 2 << 20;
constexpr std::size_t max_large_bytes = 1 << 20;

// The class of the blocks that serve `size` bytes, up to small_max, and past it (up to max_block).
constexpr std::size_t small_class_for(std::size_t size) { return (size + granule - 1) / granule; }
constexpr std::size_t large_class_for(std::size_t size) {
    return small_classes - 1 + (size - small_max + large_granule - 1) / large_granule;
}
// Bytes a block of class `c` has room for.
constexpr std::size_t class_size(std::size_t c) {
    return c < small_classes ? c * granule : small_max + (c - (small_classes - 1)) * large_granule;
}
// The largest class a block of `usable` bytes serves (classes when it is larger than any).
constexpr std::size_t class_within(std::size_t usable) {
    return usable < small_max + large_granule ? std::min(usable / granule, small_classes - 1)
                                              : small_classes - 1 + (usable - small_max) / large_granule;
}
static_assert(small_class_for(small_max) == small_classes - 1 && class_size(small_classes - 1) == small_max);
static_assert(large_class_for(small_max + 1) == small_classes && class_size(small_classes) == small_max + large_granule);
static_assert(large_class_for(max_block) == classes - 1 && class_size(classes - 1) == max_block);
static_assert(class_within(max_block + large_granule - 1) == classes - 1 && class_within(max_block + large_granule) == classes);
static_assert(class_within(small_max + large_granule - 1) == small_classes - 1);

struct FreeBlock {
    FreeBlock* next;
};

// Trivial, zero-initialised: reaching it costs no guard on each call.
struct Cache {
    FreeBlock* head[classes];
    std::uint32_t count[classes];
    std::size_t small_bytes;  // held in blocks of up to small_max
    std::size_t large_bytes;  // held in larger ones
    bool registered;  // the Release below is armed for this thread
    bool released;    // the thread is ending: no more caching
};

thread_local Cache cache;

void release_all() {
    for (std::size_t c = 0; c < classes; ++c) {
        while (auto* block = cache.head[c]) {
            cache.head[c] = block->next;
            std::free(block);
        }
        cache.count[c] = 0;
    }
    cache.small_bytes = cache.large_bytes = 0;
}

struct Release {
    ~Release() {
        cache.released = true;
        release_all();
    }
};

thread_local Release release;

// A block of class `c` from the cache, nullptr when it holds none.
template <bool Large>
[[gnu::always_inline]] inline FreeBlock* take(std::size_t c) {
    auto* block = cache.head[c];
    if (block) {
        cache.head[c] = block->next;
        --cache.count[c];
        (Large ? cache.large_bytes : cache.small_bytes) -= class_size(c);
    }
    return block;
}

void* allocate(std::size_t size) {
    if (size == 0) size = 1;
    if (size <= small_max) {
        const std::size_t c = small_class_for(size);
        if (auto* block = take<false>(c)) return block;
        size = class_size(c);
    } else if (size <= max_block) {
        const std::size_t c = large_class_for(size);
        if (auto* block = take<true>(c)) return block;
        size = class_size(c);
    }
    for (;;) {
        if (void* p = std::malloc(size)) return p;
        auto handler = std::get_new_handler();
        if (!handler) return nullptr;
        handler();
    }
}

// Takes back a block of class `c` (class_size(c) bytes fit in it), of the classes up to
// small_max or of the larger ones (each kind with its own budget).
template <bool Large>
[[gnu::always_inline]] inline void take_back(void* p, std::size_t c) noexcept {
    const std::size_t bytes = class_size(c);
    std::size_t& held = Large ? cache.large_bytes : cache.small_bytes;
    if (!cache.released && cache.count[c] < max_per_class && held + bytes <= (Large ? max_large_bytes : max_small_bytes)) {
        if (!cache.registered) {
            cache.registered = true;
            (void)&release;  // constructs this thread's Release: it empties the cache at thread end
        }
        auto* block = static_cast<FreeBlock*>(p);
        block->next = cache.head[c];
        cache.head[c] = block;
        ++cache.count[c];
        held += bytes;
        return;
    }
    std::free(p);
}

void deallocate(void* p) noexcept {
    if (!p) return;
    const std::size_t c = class_within(malloc_usable_size(p));
    if (c < small_classes) take_back<false>(p, c);
    else if (c < classes) take_back<true>(p, c);
    else std::free(p);
}

// C++14 sized delete: `size` is what new was asked for, so its class is the one allocate
// chose (or a block of that class came from the cache); no malloc_usable_size needed.
void deallocate_sized(void* p, std::size_t size) noexcept {
    if (!p) return;
    if (size == 0) size = 1;
    if (size <= small_max) take_back<false>(p, small_class_for(size));
    else if (size <= max_block) take_back<true>(p, large_class_for(size));
    else std::free(p);
}

void* allocate_or_throw(std::size_t size) {
    if (void* p = allocate(size)) return p;
    throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t size) { return allocate_or_throw(size); }
void* operator new[](std::size_t size) { return allocate_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
    try {
        return allocate(size);
    } catch (...) {  // a new_handler may throw
        return nullptr;
    }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { deallocate(p); }
void operator delete[](void* p) noexcept { deallocate(p); }
void operator delete(void* p, std::size_t size) noexcept { deallocate_sized(p, size); }
void operator delete[](void* p, std::size_t size) noexcept { deallocate_sized(p, size); }
void operator delete(void* p, const std::nothrow_t&) noexcept { deallocate(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { deallocate(p); }
