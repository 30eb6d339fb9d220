// Which clients were limited, per route, during the current summary interval. One per
// worker; the lock is taken only for limited requests and once per interval.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::observe {

class LimitedClients {
public:
    using Counts = std::unordered_map<std::string, std::unordered_map<std::string, std::uint64_t>>;

    // Distinct clients kept per route and interval; the rest are counted under "other".
    static constexpr std::size_t max_clients_per_route = 10000;

    void add(std::string_view route, std::string_view client);
    Counts take();  // the counts so far; starts a new interval

private:
    std::mutex mutex_;
    Counts counts_;
};

// Adds `from` into `into`, which keeps max_clients_per_route clients per route too: past
// it, the least limited count under "other" (a summary interval sums many collections).
void merge(LimitedClients::Counts& into, const LimitedClients::Counts& from);

// The `n` clients with the most limited requests, most first (ties by address).
std::vector<std::pair<std::string, std::uint64_t>> top_clients(const std::unordered_map<std::string, std::uint64_t>& counts,
                                                               std::size_t n);

}  // namespace sluice::observe
