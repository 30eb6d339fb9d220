// Test support: LimitConfig values in one line.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace sluice::test {

using config::KeyPart;

inline KeyPart client_ip() { return {KeyPart::Kind::client_ip, {}}; }
inline KeyPart method() { return {KeyPart::Kind::method, {}}; }
inline KeyPart path() { return {KeyPart::Kind::path, {}}; }
inline KeyPart header(std::string name) { return {KeyPart::Kind::header, std::move(name)}; }

inline config::LimitConfig token_bucket(std::string name, double rate, std::chrono::milliseconds per,
                                        std::uint64_t burst, std::vector<KeyPart> key = {client_ip()},
                                        bool shadow = false) {
    config::LimitConfig limit;
    limit.name = std::move(name);
    limit.algorithm = config::Algorithm::token_bucket;
    limit.rate = rate;
    limit.per = per;
    limit.burst = burst;
    limit.key = std::move(key);
    limit.shadow = shadow;
    return limit;
}

inline config::LimitConfig sliding_window(std::string name, std::uint64_t max, std::chrono::milliseconds window,
                                          std::vector<KeyPart> key = {client_ip()}, bool shadow = false) {
    config::LimitConfig limit;
    limit.name = std::move(name);
    limit.algorithm = config::Algorithm::sliding_window;
    limit.limit = max;
    limit.window = window;
    limit.key = std::move(key);
    limit.shadow = shadow;
    return limit;
}

// A fixed window of `window` (aligned to the epoch).
inline config::LimitConfig fixed_window(std::string name, std::uint64_t max, std::chrono::milliseconds window,
                                        std::vector<KeyPart> key = {client_ip()}, bool shadow = false) {
    config::LimitConfig limit = sliding_window(std::move(name), max, window, std::move(key), shadow);
    limit.algorithm = config::Algorithm::fixed_window;
    return limit;
}

// A calendar fixed window in `zone` (loaded from the system's tzdata).
inline config::LimitConfig calendar_window(std::string name, std::uint64_t max, time::CalendarUnit unit,
                                           const std::string& zone, std::vector<KeyPart> key = {client_ip()}) {
    config::LimitConfig limit = fixed_window(std::move(name), max, std::chrono::milliseconds(0), std::move(key));
    limit.calendar = unit;
    std::string error;
    auto loaded = time::TimeZone::load(zone, error);
    if (!loaded) throw std::runtime_error(error);
    limit.time_zone = std::make_shared<const time::TimeZone>(std::move(*loaded));
    return limit;
}

// At most `max` requests in flight, each slot leased for `lease`.
inline config::LimitConfig slots_limit(std::string name, std::uint64_t max, std::chrono::milliseconds lease,
                                       std::vector<KeyPart> key = {client_ip()}) {
    config::LimitConfig limit = sliding_window(std::move(name), max, std::chrono::milliseconds(0), std::move(key));
    limit.algorithm = config::Algorithm::concurrency;
    limit.lease = lease;
    return limit;
}

// A leaky bucket letting out `rate` per `per`, holding `burst`; `delay` of a burst past the
// first pass at once; a wait above `max_wait` limits.
inline config::LimitConfig leaky_bucket(std::string name, double rate, std::chrono::milliseconds per,
                                        std::uint64_t burst, std::uint64_t delay = 0,
                                        std::optional<std::chrono::milliseconds> max_wait = std::nullopt,
                                        std::vector<KeyPart> key = {client_ip()}, bool shadow = false) {
    config::LimitConfig limit = token_bucket(std::move(name), rate, per, burst, std::move(key), shadow);
    limit.algorithm = config::Algorithm::leaky_bucket;
    limit.delay = delay;
    limit.max_wait = max_wait;
    return limit;
}

// `limit` taking its cost from header `name` (lower-case), `fallback` when absent or invalid.
inline config::LimitConfig costing(config::LimitConfig limit, std::string name, std::uint64_t fallback = 1) {
    limit.cost_header = std::move(name);
    limit.default_cost = fallback;
    return limit;
}

// Checked before forwarding, charged after a response of one of these statuses (`count`).
inline config::LimitConfig counting(config::LimitConfig limit, std::vector<config::StatusRange> statuses = {{401, 401}}) {
    limit.count_statuses = std::move(statuses);
    return limit;
}
// The charge after the response of a counted limit (server::LimitSet's charge sets).
inline config::LimitConfig charging(config::LimitConfig limit) {
    limit.charges = true;
    return limit;
}

// Taking its cost from the response's field `name` (lower-case; a trailer when `trailer`),
// `reserve` taken when admitted (`cost: {response_header | response_trailer, reserve}`).
inline config::LimitConfig reporting(config::LimitConfig limit, std::string name, std::uint64_t reserve,
                                     bool trailer = false) {
    limit.response_cost_field = std::move(name);
    limit.response_cost_trailer = trailer;
    limit.cost = reserve;
    return limit;
}
// The settle of such a limit after the response, as http::Exchange makes it: `reported` units
// against the reservation taken at `reserved_at_us`, charged past it or given back (0: nothing).
inline config::LimitConfig settling(config::LimitConfig limit, std::uint64_t reported, std::int64_t reserved_at_us) {
    limit.charges = true;
    if (reported >= limit.cost) {
        limit.cost = reported - limit.cost;
    } else {
        limit.cost -= reported;
        limit.refund_at_us = reserved_at_us;
    }
    return limit;
}

}  // namespace sluice::test
