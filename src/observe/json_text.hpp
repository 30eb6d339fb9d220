// JSON string quoting for log lines and problem+json bodies.
#pragma once

#include <string>
#include <string_view>

namespace sluice::observe {

// "text" with quotes, backslashes and control characters escaped.
std::string json_string(std::string_view text);

// The same, appended to `out`.
void append_json_string(std::string& out, std::string_view text);

}  // namespace sluice::observe
