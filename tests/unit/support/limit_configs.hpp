// Test support: LimitConfig values in one line.
#pragma once

#include <chrono>
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

}  // namespace sluice::test
