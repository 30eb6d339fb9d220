#include "observe/recent_limited.hpp"

namespace sluice::observe {

void RecentLimited::push(const LimitedClients::Counts& counts, Clock::time_point now) {
    while (!ring_.empty() && ring_.front().first <= now - span) ring_.pop_front();
    if (counts.empty()) return;
    LimitedClients::Counts kept;
    for (const auto& [route, clients] : counts) {
        auto& into = kept[route];
        for (const auto& [client, n] : top_clients(clients, kept_per_route)) into.emplace(client, n);
    }
    ring_.emplace_back(now, std::move(kept));
}

RecentLimited::Top RecentLimited::top(std::size_t n, Clock::time_point now) const {
    LimitedClients::Counts sum;
    for (const auto& [ended, bucket] : ring_)
        if (ended > now - span) merge(sum, bucket);
    Top out;
    for (const auto& [route, clients] : sum) out.emplace(route, top_clients(clients, n));
    return out;
}

}  // namespace sluice::observe
