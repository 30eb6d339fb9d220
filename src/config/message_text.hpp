// Pieces of diagnostic messages.
#pragma once

#include <string>
#include <string_view>

namespace sluice::config {

// 'text', the way every message quotes what the file says.
inline std::string quoted(std::string_view text) {
    std::string result;
    result.reserve(text.size() + 2);
    result += '\'';
    result += text;
    result += '\'';
    return result;
}

// "route 'login'", or just "route" when the name is not known.
inline std::string named(std::string_view what, std::string_view name) {
    std::string result(what);
    if (!name.empty()) result.append(" ").append(quoted(name));
    return result;
}

}  // namespace sluice::config
