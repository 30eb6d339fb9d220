// SlowWaits: what fires on which tick, and what unlinking and destruction leave.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "server/slow_waits.hpp"

using sluice::server::SlowWait;
using sluice::server::SlowWaits;

namespace {

struct Recorder final : SlowWait {
    Recorder(std::string n, std::vector<std::string>& l) : name(std::move(n)), log(l) {}
    std::string name;
    std::vector<std::string>& log;
    SlowWaits* again = nullptr;  // links itself again when fired
    void fire() override {
        log.push_back(name);
        if (again) again->add(*this);
    }
};

}  // namespace

TEST_CASE("slow waits fire after a whole tick, oldest first, once") {
    std::vector<std::string> log;
    SlowWaits waits;
    Recorder a("a", log), b("b", log), c("c", log);
    waits.add(a);
    waits.add(b);
    waits.tick();  // a and b have not waited a whole period yet
    CHECK(log.empty());
    waits.add(c);
    waits.tick();
    CHECK(log == std::vector<std::string>{"a", "b"});
    CHECK_FALSE(a.linked());
    CHECK(c.linked());
    waits.tick();
    CHECK(log == std::vector<std::string>{"a", "b", "c"});
    CHECK(waits.empty());
    waits.tick();
    CHECK(log.size() == 3);
}

TEST_CASE("an unlinked wait never fires; adding again restarts its wait") {
    std::vector<std::string> log;
    SlowWaits waits;
    Recorder a("a", log), b("b", log), c("c", log);
    waits.add(a);
    waits.add(b);
    waits.add(c);
    b.unlink();
    b.unlink();  // (twice is nothing)
    waits.tick();
    waits.add(a);  // moved to the end, with this tick
    waits.tick();
    CHECK(log == std::vector<std::string>{"c"});
    waits.tick();
    CHECK(log == std::vector<std::string>{"c", "a"});
    CHECK_FALSE(b.linked());
}

TEST_CASE("a wait that goes away unlinks itself, first, middle or last") {
    std::vector<std::string> log;
    SlowWaits waits;
    Recorder keep("keep", log);
    for (int gone = 0; gone < 3; ++gone) {
        auto x = std::make_unique<Recorder>("x", log), y = std::make_unique<Recorder>("y", log),
             z = std::make_unique<Recorder>("z", log);
        waits.add(*x);
        waits.add(*y);
        waits.add(*z);
        (gone == 0 ? x : gone == 1 ? y : z).reset();
        waits.fire_all();
    }
    CHECK(log == std::vector<std::string>{"y", "z", "x", "z", "x", "y"});
    waits.add(keep);
    CHECK_FALSE(waits.empty());
}

TEST_CASE("a fired wait may link itself again: it waits for later ticks") {
    std::vector<std::string> log;
    SlowWaits waits;
    Recorder a("a", log);
    a.again = &waits;
    waits.add(a);
    waits.tick();
    waits.tick();
    CHECK(log.size() == 1);
    CHECK(a.linked());
    waits.tick();  // linked again during the last tick: not a whole period yet
    CHECK(log.size() == 1);
    waits.tick();
    CHECK(log.size() == 2);
    a.again = nullptr;
    waits.fire_all();
    CHECK(log.size() == 3);
    CHECK(waits.empty());
}

TEST_CASE("the list going first leaves its waits unlinked") {
    std::vector<std::string> log;
    Recorder a("a", log);
    {
        SlowWaits waits;
        waits.add(a);
    }
    CHECK_FALSE(a.linked());
    a.unlink();
    CHECK(log.empty());
}
