// The process-wide operator new/delete (src/alloc/thread_cache.cpp), linked into this binary
// as into sluice.
#include <catch2/catch.hpp>

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

std::size_t in_use() { return mallinfo2().uordblks; }

}  // namespace

TEST_CASE("thread cache: a freed block is handed out again for the same size class", "[alloc]") {
    // On a thread of its own, whose cache starts empty: the test runner's thread may hold the
    // most blocks a class or a thread keeps (then a freed block goes back to malloc), which
    // depends on what ran before and on how the tests were chosen.
    bool reused = false, other_class_differs = false, held_before = false, held_after = false, same = false;
    std::thread([&] {
        void* a = ::operator new(100);
        ::operator delete(a);
        void* b = ::operator new(97);  // same 16-byte class (97..112)
        reused = b == a;
        ::operator delete(b);
        // A block of another class does not take it.
        void* c = ::operator new(300);
        other_class_differs = c != a;
        ::operator delete(c);

        // Up to 256 blocks of a class stay with the thread (glibc alone keeps 7 per size).
        std::vector<void*> blocks;
        std::vector<void*> again;
        blocks.reserve(200);
        again.reserve(200);
        for (int i = 0; i < 200; ++i) blocks.push_back(::operator new(700));
        const auto held = in_use();
        for (void* p : blocks) ::operator delete(p);
        held_before = in_use() == held;
        for (int i = 0; i < 200; ++i) again.push_back(::operator new(700));
        held_after = in_use() == held;  // all 200 came back from the cache
        std::sort(blocks.begin(), blocks.end());
        std::sort(again.begin(), again.end());
        same = again == blocks;
        for (void* p : again) ::operator delete(p);
    }).join();
    CHECK(reused);
    CHECK(other_class_differs);
    CHECK(held_before);
    CHECK(held_after);
    CHECK(same);
}

TEST_CASE("thread cache: a sized delete returns the block to the class of its size", "[alloc]") {
    // Sized delete (what the compiler emits for `delete obj`) does not ask malloc for the
    // block's size: the size given picks the class. On a fresh thread, as above.
    bool same_class = false, next_class = false, zero_is_one = false, big_taken = false, big_back = false;
    std::thread([&] {
        void* a = ::operator new(100);
        ::operator delete(a, 100);
        void* b = ::operator new(112);  // same class
        same_class = b == a;
        ::operator delete(b, 112);
        void* c = ::operator new(113);  // the next class: not that block
        next_class = c != a;
        ::operator delete(c, 113);
        void* zero = ::operator new(0);
        ::operator delete(zero, std::size_t{0});
        void* one = ::operator new(1);
        zero_is_one = one == zero;
        ::operator delete(one, 1);
        // Beyond the largest class (32 KB) blocks go back to malloc, sized or not.
        const auto before = in_use();
        void* big = ::operator new(40000);
        big_taken = in_use() > before;
        ::operator delete(big, 40000);
        big_back = in_use() == before;
    }).join();
    CHECK(same_class);
    CHECK(next_class);
    CHECK(zero_is_one);
    CHECK(big_taken);
    CHECK(big_back);
}

TEST_CASE("thread cache: every block has room for what was asked, at every size", "[alloc]") {
    std::vector<std::pair<unsigned char*, std::size_t>> blocks;
    for (std::size_t size : {0, 1, 15, 16, 17, 1000, 1024, 1025, 4095, 8192, 8193, 9216, 9217, 17000, 32768, 32769, 100000}) {
        for (int round = 0; round < 6; ++round) {
            auto* p = static_cast<unsigned char*>(::operator new(size));
            CHECK(malloc_usable_size(p) >= size);
            CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0);
            std::memset(p, static_cast<int>(size & 0xff), size);
            blocks.emplace_back(p, size);
        }
    }
    // Half of them go back by size, half without: either way a block handed out again
    // must hold what it is asked for.
    bool sized = false;
    for (auto& [p, size] : blocks) {
        for (std::size_t i = 0; i < size; ++i) REQUIRE(p[i] == static_cast<unsigned char>(size & 0xff));
        if (sized) ::operator delete(p, size); else ::operator delete(p);
        sized = !sized;
    }
    for (std::size_t size : {0, 1, 15, 16, 17, 1000, 1024, 1025, 4095, 8192, 8193, 9216, 9217, 17000, 32768}) {
        for (int round = 0; round < 6; ++round) {
            auto* p = static_cast<unsigned char*>(::operator new(size));
            CHECK(malloc_usable_size(p) >= size);
            std::memset(p, 0x5a, size);
            ::operator delete(p, size);
        }
    }
    auto* array = new std::string[64];
    array[63] = std::string(100, 'x');
    delete[] array;
    void* nothrow = ::operator new(64, std::nothrow);
    CHECK(nothrow != nullptr);
    ::operator delete(nothrow, std::nothrow);
    ::operator delete(nullptr);
}

TEST_CASE("thread cache: blocks freed on another thread, and threads that end, leak nothing", "[alloc]") {
    const auto before = in_use();
    for (int round = 0; round < 20; ++round) {
        // Allocated here, freed there; then that thread caches 1 MB of its own and ends.
        std::vector<void*> blocks;
        for (int i = 0; i < 200; ++i) blocks.push_back(::operator new(512));
        std::thread([&blocks] {
            for (void* p : blocks) ::operator delete(p);
            std::vector<void*> own;
            for (int i = 0; i < 256; ++i) own.push_back(::operator new(4096));
            for (void* p : own) ::operator delete(p);
        }).join();
    }
    // Without the release at thread end, 20 threads would keep over 20 MB.
    CHECK(in_use() < before + (4u << 20));
}

TEST_CASE("thread cache: bounded per thread", "[alloc]") {
    const auto before = in_use();
    std::thread([] {
        std::vector<void*> blocks;
        for (int i = 0; i < 5000; ++i) blocks.push_back(::operator new(2048));  // 10 MB
        const auto held = in_use();
        for (void* p : blocks) ::operator delete(p);
        // At most 256 blocks of one class (and 2 MB) stay cached; the rest went back.
        CHECK(in_use() < held - (8u << 20));
    }).join();
    CHECK(in_use() < before + (1u << 20));
}

TEST_CASE("thread cache: blocks over 8 KB have a budget of their own", "[alloc]") {
    // A TLS record buffer (17 KB) is taken back and handed out again; many of them (idle TLS
    // connections' buffers) fill at most 1 MB, and small blocks are still cached beside them.
    bool reused = false, small_reused = false, bounded = false;
    std::thread([&] {
        void* a = ::operator new(17000);
        ::operator delete(a);  // unsized: the class from malloc_usable_size
        void* b = ::operator new(16900);  // the same 1 KB class (16385..17408)
        reused = b == a;
        ::operator delete(b, 16900);

        std::vector<void*> big;
        for (int i = 0; i < 200; ++i) big.push_back(::operator new(17000));  // 3.4 MB
        const auto held = in_use();
        for (void* p : big) ::operator delete(p, 17000);
        bounded = in_use() < held - (2u << 20);  // at most 1 MB of them stayed
        void* small = ::operator new(200);
        const auto address = reinterpret_cast<std::uintptr_t>(small);
        ::operator delete(small, 200);
        small = ::operator new(200);
        small_reused = reinterpret_cast<std::uintptr_t>(small) == address;
        ::operator delete(small, 200);
    }).join();
    CHECK(reused);
    CHECK(bounded);
    CHECK(small_reused);
}
