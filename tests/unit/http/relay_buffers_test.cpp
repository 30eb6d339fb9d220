#include <catch2/catch.hpp>

#include "http/relay_buffers.hpp"

using sluice::http::RelayBuffers;

TEST_CASE("relay buffers are lent and reused") {
    RelayBuffers pool;
    char* first = nullptr;
    {
        auto lease = pool.take();
        first = lease.data();
        REQUIRE(first != nullptr);
        CHECK(lease.size() == RelayBuffers::buffer_size);
        CHECK(pool.idle() == 0);
        auto second = pool.take();  // two requests at once get two buffers
        CHECK(second.data() != first);
    }
    CHECK(pool.idle() == 2);
    auto again = pool.take();
    CHECK(again.data() == first);  // the buffer given back last is lent first
    CHECK(pool.idle() == 1);
}
