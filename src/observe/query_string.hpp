// The query of an admin request ("route=api&client=2001%3Adb8%3A%3A1"): name/value pairs,
// percent-decoded, '+' read as a space. Pure. Hostile input: a malformed escape, a control
// byte in a name, an empty name, too many pairs or too long a part is an error, never a
// guess. A value may hold any byte (the key values it names can: sluice escapes them where
// it writes them, in keys, JSON and logs).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::observe {

struct QueryParam {
    std::string name;
    std::string value;
};

inline constexpr std::size_t max_query_params = 64;
inline constexpr std::size_t max_query_part = 4096;  // bytes of one name or value, decoded

// The pairs in order (a name may repeat). nullopt with `error` set when the query is malformed.
std::optional<std::vector<QueryParam>> parse_query(std::string_view query, std::string& error);

}  // namespace sluice::observe
