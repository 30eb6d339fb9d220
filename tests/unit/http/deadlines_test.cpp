// The connection's two deadlines on one timer: when the timer must restart, what a firing
// reports, and that moving a deadline later costs no restart.
#include <catch2/catch.hpp>

#include "http/deadlines.hpp"

using namespace sluice::http;
using namespace std::chrono_literals;
using Side = Deadlines::Side;

namespace {
const Deadlines::time_point t0 = Deadlines::Clock::now();
}

TEST_CASE("arming restarts the timer only for an earlier deadline") {
    Deadlines d;
    REQUIRE(d.arm(Side::client, t0 + 10s));  // nothing waits yet
    CHECK(d.start() == t0 + 10s);
    CHECK_FALSE(d.arm(Side::client, t0 + 20s));  // later: the timer fires early and waits again
    CHECK(d.arm(Side::client, t0 + 5s));         // earlier: restart
    CHECK(d.start() == t0 + 5s);
    CHECK(d.arm(Side::upstream, t0 + 1s));       // the other side, earlier still
    CHECK(d.start() == t0 + 1s);
    CHECK_FALSE(d.arm(Side::upstream, t0 + 3s));
    d.stopped();
    CHECK(d.arm(Side::upstream, t0 + 30s));  // a stopped timer always restarts
}

TEST_CASE("a timer that fires early reports nothing and waits again") {
    Deadlines d;
    d.arm(Side::client, t0 + 1s);
    d.start();
    d.arm(Side::client, t0 + 4s);  // the request went on: the deadline moved
    const auto fired = d.fire(t0 + 1s);
    CHECK_FALSE(fired.client);
    CHECK_FALSE(fired.upstream);
    REQUIRE(fired.again);
    CHECK(d.start() == t0 + 4s);
    const auto late = d.fire(t0 + 4s);
    CHECK(late.client);
    CHECK_FALSE(late.again);
    CHECK(d.deadline(Side::client) == Deadlines::time_point::max());  // a deadline fires once
    // Nothing waits after that: the next deadline starts the timer again.
    CHECK(d.arm(Side::client, t0 + 60s));
    CHECK(d.start() == t0 + 60s);
}

TEST_CASE("each side fires on its own deadline") {
    Deadlines d;
    d.arm(Side::client, t0 + 2s);
    d.arm(Side::upstream, t0 + 1s);
    CHECK(d.start() == t0 + 1s);
    auto fired = d.fire(t0 + 1s);
    CHECK(fired.upstream);
    CHECK_FALSE(fired.client);
    REQUIRE(fired.again);  // the client's deadline is still ahead
    CHECK(d.start() == t0 + 2s);
    fired = d.fire(t0 + 2500ms);
    CHECK(fired.client);
    CHECK_FALSE(fired.upstream);
    CHECK_FALSE(fired.again);
}

TEST_CASE("a disarmed deadline never fires") {
    Deadlines d;
    d.arm(Side::client, t0 + 1s);
    d.arm(Side::upstream, t0 + 1s);
    d.start();
    d.disarm(Side::client);
    d.disarm(Side::upstream);
    const auto fired = d.fire(t0 + 1h);
    CHECK_FALSE(fired.client);
    CHECK_FALSE(fired.upstream);
    CHECK_FALSE(fired.again);
}

TEST_CASE("both sides passing at once fire together") {
    Deadlines d;
    d.arm(Side::client, t0 + 1s);
    d.arm(Side::upstream, t0 + 2s);
    d.start();
    const auto fired = d.fire(t0 + 3s);  // the timer ran late
    CHECK(fired.client);
    CHECK(fired.upstream);
    CHECK_FALSE(fired.again);
}
