// The values rate-limit key parts read from a request (query:NAME, cookie:NAME,
// path_segment:N, client_ip/N). Pure: no sockets; fuzzed by tests/fuzz/key_values_fuzz.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice::limit {

// A query parameter's value, decoded (%XX and '+'); nullopt when absent. `ambiguous` is set
// when it is given more than once with different values: which one a backend reads is
// anyone's guess, so such a request is refused rather than counted under one of them.
std::optional<std::string> query_value(std::string_view query, std::string_view name, bool& ambiguous);
// A cookie's value (quotes around it removed, %XX decoded) from Cookie values; nullopt when
// absent; `ambiguous` as above.
std::optional<std::string> cookie_value(std::string_view cookies, std::string_view name, bool& ambiguous);
// %XX decoded (either case); a '%' not followed by two hex digits stays as it is.
std::string percent_decoded(std::string_view text);
// The Nth (1-based) non-empty segment of a path, as it is (the key decodes it); nullopt past
// the last.
std::optional<std::string_view> path_segment(std::string_view path, unsigned n);
// The client's network of `v4_prefix` / `v6_prefix` bits as "203.0.113.0/24",
// "2001:db8:1:2::/64"; nullopt when `client_ip` is not an address.
std::optional<std::string> client_network(std::string_view client_ip, unsigned v4_prefix, unsigned v6_prefix);

}  // namespace sluice::limit
