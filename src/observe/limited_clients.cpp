#include "observe/limited_clients.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace sluice::observe {

void LimitedClients::add(std::string_view route, std::string_view client) {
    std::lock_guard lock(mutex_);
    auto& clients = counts_[std::string(route)];
    auto it = clients.find(std::string(client));
    if (it != clients.end()) {
        ++it->second;
    } else if (clients.size() < max_clients_per_route) {
        clients.emplace(std::string(client), 1);
    } else {
        ++clients["other"];
    }
}

LimitedClients::Counts LimitedClients::take() {
    std::lock_guard lock(mutex_);
    Counts out;
    out.swap(counts_);
    return out;
}

void merge(LimitedClients::Counts& into, const LimitedClients::Counts& from) {
    constexpr std::size_t kept = LimitedClients::max_clients_per_route;
    for (const auto& [route, clients] : from) {
        auto& target = into[route];
        for (const auto& [client, n] : clients) target[client] += n;
        if (target.size() <= kept + 1) continue;
        // Past the bound: the most limited stay, the rest count as "other" (a flood of new
        // addresses early in a long interval does not push out the heavy hitters after it).
        std::uint64_t other = 0;
        std::vector<std::pair<std::string, std::uint64_t>> all;
        all.reserve(target.size());
        for (auto& [client, n] : target) {
            if (client == "other") other += n;
            else all.emplace_back(client, n);
        }
        if (all.size() > kept) {
            std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kept), all.end(),
                             [](const auto& a, const auto& b) { return a.second > b.second; });
            for (auto it = all.begin() + static_cast<std::ptrdiff_t>(kept); it != all.end(); ++it) {
                other += it->second;
                target.erase(it->first);
            }
        }
        target["other"] = other;
    }
}

std::vector<std::pair<std::string, std::uint64_t>> top_clients(const std::unordered_map<std::string, std::uint64_t>& counts,
                                                               std::size_t n) {
    std::vector<std::pair<std::string, std::uint64_t>> all(counts.begin(), counts.end());
    auto order = [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; };
    if (all.size() > n) {
        std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), order);
        all.resize(n);
    } else {
        std::sort(all.begin(), all.end(), order);
    }
    return all;
}

}  // namespace sluice::observe
