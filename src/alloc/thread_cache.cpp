// A per-thread cache of freed blocks in front of malloc, for every operator new/delete of
// the process (linked into the executables, not the library).
//
// Why: a proxied request allocates and frees about fifty blocks (Beast header fields,
// coroutine frames of 1-4 KB, handler memory, strings), and with dozens of connections per
// worker glibc's own per-thread cache (7 blocks per size, up to 1 KB) overflows, so most
// of them took malloc's slow paths: ~15 % of the instructions of a request. Here a freed
// block up to 8 KB goes onto a free list of its size class on the freeing thread, and the
// next allocation of that class on that thread takes it back: a few instructions, no lock.
//
// - Size classes are multiples of 16 bytes. A block is malloc'ed at its class size; a sized
//   delete gives the class of the size asked for, an unsized one finds it from
//   malloc_usable_size (>= the class size), so any block on the list of class k has room
//   for k * 16 bytes.
// - A block freed on another thread than the one that allocated it simply joins the
//   freeing thread's cache: blocks are plain malloc memory.
// - Bounded: at most 256 blocks per class and 2 MB per thread; past that, free().
// - A thread's cache is given back to malloc when the thread ends; after that (late
//   destructors) that thread goes straight to malloc/free.
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {

constexpr std::size_t granule = 16;
constexpr std::size_t max_block = 8192;
constexpr std::size_t classes = max_block / granule + 1;
constexpr std::uint32_t max_per_class = 256;
constexpr std::size_t max_bytes = 2 << 20;

struct FreeBlock {
    FreeBlock* next;
};

// Trivial, zero-initialised: reaching it costs no guard on each call.
struct Cache {
    FreeBlock* head[classes];
    std::uint32_t count[classes];
    std::size_t bytes;
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
    cache.bytes = 0;
}

struct Release {
    ~Release() {
        cache.released = true;
        release_all();
    }
};

thread_local Release release;

void* allocate(std::size_t size) {
    if (size == 0) size = 1;
    if (size <= max_block) {
        const std::size_t c = (size + granule - 1) / granule;
        if (auto* block = cache.head[c]) {
            cache.head[c] = block->next;
            --cache.count[c];
            cache.bytes -= c * granule;
            return block;
        }
        size = c * granule;
    }
    for (;;) {
        if (void* p = std::malloc(size)) return p;
        auto handler = std::get_new_handler();
        if (!handler) return nullptr;
        handler();
    }
}

// Takes back a block of size class `c` (c * 16 bytes fit in it); c >= classes: not cached.
void take_back(void* p, std::size_t c) noexcept {
    if (c < classes && !cache.released && cache.count[c] < max_per_class && cache.bytes + c * granule <= max_bytes) {
        if (!cache.registered) {
            cache.registered = true;
            (void)&release;  // constructs this thread's Release: it empties the cache at thread end
        }
        auto* block = static_cast<FreeBlock*>(p);
        block->next = cache.head[c];
        cache.head[c] = block;
        ++cache.count[c];
        cache.bytes += c * granule;
        return;
    }
    std::free(p);
}

void deallocate(void* p) noexcept {
    if (p) take_back(p, malloc_usable_size(p) / granule);
}

// C++14 sized delete: `size` is what new was asked for, so its class is the one allocate
// chose (or a block of that class came from the cache); no malloc_usable_size needed.
void deallocate_sized(void* p, std::size_t size) noexcept {
    if (!p) return;
    if (size == 0) size = 1;
    take_back(p, size <= max_block ? (size + granule - 1) / granule : classes);
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
