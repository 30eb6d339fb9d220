// limit::DecisionCallback: what a store calls with its decision. Move-only callables, small
// ones kept inline, large ones on the heap; each destroyed exactly once, whatever it moved
// through; the decision arrives whole.
#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "limit/decision_callback.hpp"
#include "limit/header_list.hpp"

using namespace sluice;

namespace {

// Counts its live copies (moved-from ones included): each must be destroyed once.
struct Tracked {
    static inline int alive = 0;
    std::shared_ptr<std::string> seen;
    explicit Tracked(std::shared_ptr<std::string> s) : seen(std::move(s)) { ++alive; }
    Tracked(Tracked&& other) noexcept : seen(std::move(other.seen)) { ++alive; }
    Tracked(const Tracked&) = delete;
    ~Tracked() { --alive; }
    void operator()(limit::Decision d) const {
        if (seen) *seen = d.error + "/" + std::to_string(d.limits.size());
    }
};

// The same with 200 bytes more: kept on the heap.
struct Large : Tracked {
    using Tracked::Tracked;
    Large(Large&&) noexcept = default;
    std::array<char, 200> padding{};
};

// A move that may throw: kept on the heap too (moving the callback then cannot throw).
struct ThrowingMove {
    std::shared_ptr<int> calls;
    explicit ThrowingMove(std::shared_ptr<int> c) : calls(std::move(c)) {}
    ThrowingMove(ThrowingMove&& other) noexcept(false) : calls(std::move(other.calls)) {}
    void operator()(limit::Decision) const { ++*calls; }
};

limit::Decision decision_with(std::string error, std::size_t limits) {
    auto d = limit::Decision::store_failure(std::move(error));
    d.limits.resize(limits);
    return d;
}

}  // namespace

TEST_CASE("DecisionCallback: small and large callables, moved around, called once, destroyed once") {
    Tracked::alive = 0;
    auto seen = std::make_shared<std::string>();
    {
        limit::DecisionCallback small{Tracked(seen)};
        limit::DecisionCallback large{Large(seen)};
        CHECK(static_cast<bool>(small));
        CHECK(Tracked::alive == 2);  // the temporaries are gone, one copy of each kept
        limit::DecisionCallback moved = std::move(small);
        CHECK_FALSE(static_cast<bool>(small));  // NOLINT(bugprone-use-after-move): emptied by the move
        CHECK(Tracked::alive == 2);
        moved(decision_with("inline", 3));
        CHECK(*seen == "inline/3");
        limit::DecisionCallback other;
        other = std::move(large);
        CHECK(Tracked::alive == 2);
        other(decision_with("heap", 1));
        CHECK(*seen == "heap/1");
        // Assigning over a callback destroys what it held.
        other = std::move(moved);
        CHECK(Tracked::alive == 1);
    }
    CHECK(Tracked::alive == 0);
}

TEST_CASE("DecisionCallback: a move-only lambda, and a callable whose move may throw") {
    auto owned = std::make_unique<int>(41);
    int got = 0;
    limit::DecisionCallback lambda([owned = std::move(owned), &got](limit::Decision d) {
        got = *owned + static_cast<int>(d.limits.size());
    });
    limit::DecisionCallback moved = std::move(lambda);
    moved(decision_with("", 1));
    CHECK(got == 42);

    auto calls = std::make_shared<int>(0);
    limit::DecisionCallback throwing{ThrowingMove(calls)};
    limit::DecisionCallback again = std::move(throwing);
    again(decision_with("", 0));
    CHECK(*calls == 1);
    CHECK(calls.use_count() == 2);  // one kept by the callback
}

TEST_CASE("HeaderValue: short values inline, long ones whole, compared and converted as text") {
    const limit::HeaderValue short_value("\"per_client\";r=999;t=1");
    CHECK(short_value == "\"per_client\";r=999;t=1");
    const std::string long_text(300, 'x');
    limit::HeaderValue long_value(long_text);
    CHECK(long_value.size() == 300);
    CHECK(std::string(long_value) == long_text);
    limit::HeaderList list;
    list.emplace_back("RateLimit", short_value);
    list.emplace_back("X-Long", std::move(long_value));
    list.emplace_back("Retry-After", "1");
    const auto moved = std::move(list);
    REQUIRE(moved.size() == 3);
    CHECK(moved[1].second.view() == long_text);
    CHECK(std::string_view(moved[2].second) == "1");
    limit::HeaderValue written;
    char* p = written.overwrite(5);
    std::copy_n("hello", 5, p);
    CHECK(written == "hello");
}
