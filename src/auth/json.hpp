// A small, strict JSON reader for what sluice reads of JSON: a JWT's header and claims, and
// a JWKS file. RFC 8259 only (no comments, no trailing commas, no leading zeros, no lone
// surrogates); bounded depth and size; numbers kept as the text they were written as.
// Pure, no allocation beyond the values; fuzzed (tests/fuzz/json_fuzz.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::auth {

struct JsonMember;

struct Json {
    enum class Kind { null, boolean, number, string, array, object };
    Kind kind = Kind::null;
    bool boolean = false;
    std::string text;  // string: its value (UTF-8); number: as written
    std::vector<Json> items;                      // array
    std::vector<JsonMember> members;  // object, in order (a repeated name is an error)

    const Json* member(std::string_view name) const;
    // A string member's value, or nullopt.
    std::optional<std::string_view> string_member(std::string_view name) const;
};

// (A struct of its own, not a std::pair: a pair needs Json complete where Json is declared.)
struct JsonMember {
    std::string first;  // the name
    Json second;        // the value
};

inline constexpr std::size_t max_json_depth = 32;
inline constexpr std::size_t max_json_items = 256;  // per array or object

// The value `text` holds (and nothing else but whitespace), or nullopt and `error`.
std::optional<Json> parse_json(std::string_view text, std::string& error);

}  // namespace sluice::auth
