// A limit's settings in a few words, as /stats shows them ("5 per 1s, burst 10").
#pragma once

#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::limit {

std::string describe_limit(const config::LimitConfig& limit);

}  // namespace sluice::limit
