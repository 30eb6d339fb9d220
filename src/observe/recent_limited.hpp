// The clients limited most per route over the last minute, for the live /stats page: the
// server takes the workers' counts every 5 s and at each summary line (LimitedClients::take)
// into buckets stamped with the time they end, each cut to its 100 most limited clients per
// route (memory stays bounded during an attack; a client among the top few over a minute
// is near the top of some bucket). Main thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "observe/limited_clients.hpp"

namespace sluice::observe {

class RecentLimited {
public:
    static constexpr std::chrono::seconds span{60};
    static constexpr std::size_t kept_per_route = 100;  // per bucket

    using Top = std::unordered_map<std::string, std::vector<std::pair<std::string, std::uint64_t>>>;

    using Clock = std::chrono::steady_clock;
    // A new bucket ending at `now`; those that ended more than `span` ago go.
    void push(const LimitedClients::Counts& counts, Clock::time_point now = Clock::now());
    // Per route, the `n` clients limited most over the last `span`, most first.
    Top top(std::size_t n, Clock::time_point now = Clock::now()) const;

private:
    std::deque<std::pair<Clock::time_point, LimitedClients::Counts>> ring_;
};

}  // namespace sluice::observe
