// libFuzzer target: a plan map (routes[].plan_map), YAML or CSV text to the clients' plans and
// their overrides, or diagnostics. Sources: src/config/*.cpp (as config_loader). The first
// byte picks the form: odd is CSV, even YAML; with bit 1 the identity is the client address.
//
// Checked: it returns (no hang, crash or leak); every client names a set that exists; a set
// made for a client's overrides has its plan's limits (names, algorithms, keys) with numbers
// the loader would accept (rate in (0, 1e9], burst and limit at least 1, a cost that fits, at
// most a token per microsecond, a bucket refilled within 10 years);
// reading the same text again gives the same clients.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/loader.hpp"

using namespace sluice::config;

namespace {

std::vector<PlanConfig> top_plans() {
    LimitConfig quota;
    quota.name = "quota";
    quota.algorithm = Algorithm::fixed_window;
    quota.limit = 100;
    LimitConfig burst;
    burst.name = "burst";
    burst.algorithm = Algorithm::token_bucket;
    burst.rate = 10;
    burst.burst = 10;
    burst.cost = 2;
    LimitConfig smooth = burst;
    smooth.name = "smooth";
    smooth.algorithm = Algorithm::leaky_bucket;
    smooth.cost = 1;
    smooth.delay = 3;
    return {PlanConfig{"free", {quota}, {false}}, PlanConfig{"pro", {quota, burst, smooth}, {false, false, true}}};
}

RoutePlans fresh(const std::vector<PlanConfig>& top, bool by_address) {
    RoutePlans plans;
    if (!by_address) plans.identity = KeyPart{KeyPart::Kind::header, "x-api-key"};
    for (const auto& plan : top) {
        plans.by_plan[plan.name] = plans.sets.size();
        plans.sets.push_back({plan.name, "", plan.limits});
    }
    return plans;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto top = top_plans();
    if (size == 0) return 0;
    const std::string name = (data[0] & 1) ? "fuzz.csv" : "fuzz.yaml";
    const bool by_address = data[0] & 2;  // identity client_ip: the map's addresses normalised
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    auto plans = fresh(top, by_address);
    read_plan_map_file(text, name, top, plans);
    for (const auto& [identity, set] : plans.by_identity) {
        if (identity.empty() || set >= plans.sets.size()) __builtin_trap();
        const auto& own = plans.sets[set];
        if (!own.identity.empty() && own.identity != identity) __builtin_trap();
    }
    for (std::size_t i = top.size(); i < plans.sets.size(); ++i) {
        const auto& own = plans.sets[i];
        const auto plan = plans.by_plan.find(own.plan);
        if (plan == plans.by_plan.end() || own.identity.empty()) __builtin_trap();
        const auto& base = plans.sets[plan->second].limits;
        if (own.limits.size() != base.size()) __builtin_trap();
        for (std::size_t j = 0; j < base.size(); ++j) {
            const auto& l = own.limits[j];
            if (l.name != base[j].name || l.algorithm != base[j].algorithm || !(l.key == base[j].key)) __builtin_trap();
            const bool bucket = l.algorithm == Algorithm::token_bucket || l.algorithm == Algorithm::leaky_bucket;
            if (bucket && (!(l.rate > 0) || l.rate > 1e9 || l.burst < 1 || l.cost > l.burst)) __builtin_trap();
            // One token per microsecond at most, a whole bucket within 10 years (no overflow).
            const double interval_us = static_cast<double>(l.per.count()) * 1000.0 / l.rate;
            if (bucket && (interval_us < 1.0 || interval_us * static_cast<double>(l.burst) > 10.0 * 365 * 86400 * 1e6))
                __builtin_trap();
            if (bucket && l.algorithm == Algorithm::leaky_bucket && l.delay >= l.burst) __builtin_trap();
            if (!bucket && (l.limit < 1 || l.cost > l.limit)) __builtin_trap();
        }
    }
    auto again = fresh(top, by_address);
    read_plan_map_file(text, name, top, again);
    if (again.by_identity != plans.by_identity || again.sets.size() != plans.sets.size()) __builtin_trap();
    return 0;
}
