// Bodies of proxy-generated responses: application/problem+json (RFC 9457).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http {

// {"type":"about:blank","title":"Not Found","status":404,"detail":"..."} plus any
// extra string members given as (name, value).
std::string problem_json(unsigned status, std::string_view detail,
                         const std::vector<std::pair<std::string_view, std::string_view>>& extra = {});

}  // namespace sluice::http
