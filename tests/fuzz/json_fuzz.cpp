// libFuzzer target: the strict JSON reader (JWT headers and claims, JWKS files).
// Sources: src/auth/json.cpp.
//
// What must hold: a refusal says why; an accepted document's depth stays within
// max_json_depth and no array or object exceeds max_json_items; strings are valid UTF-8
// without surrogates; an object never repeats a name; reading the same text twice gives
// the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "auth/json.hpp"

using sluice::auth::Json;

namespace {

bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const std::size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (std::size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        if (n == 3 && b == 0xed && (static_cast<unsigned char>(s[i + 1]) & 0x20)) return false;  // a surrogate
        i += n;
    }
    return true;
}

void check(const Json& v, std::size_t depth) {
    if (depth > sluice::auth::max_json_depth + 1) std::abort();
    if (v.items.size() > sluice::auth::max_json_items || v.members.size() > sluice::auth::max_json_items) std::abort();
    if (v.kind == Json::Kind::string && !valid_utf8(v.text)) std::abort();
    for (const auto& item : v.items) check(item, depth + 1);
    for (std::size_t i = 0; i < v.members.size(); ++i) {
        if (!valid_utf8(v.members[i].first)) std::abort();
        for (std::size_t k = 0; k < i; ++k)
            if (v.members[k].first == v.members[i].first) std::abort();
        check(v.members[i].second, depth + 1);
    }
}

bool same(const Json& a, const Json& b) {
    if (a.kind != b.kind || a.boolean != b.boolean || a.text != b.text || a.items.size() != b.items.size() ||
        a.members.size() != b.members.size())
        return false;
    for (std::size_t i = 0; i < a.items.size(); ++i)
        if (!same(a.items[i], b.items[i])) return false;
    for (std::size_t i = 0; i < a.members.size(); ++i)
        if (a.members[i].first != b.members[i].first || !same(a.members[i].second, b.members[i].second)) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    std::string error;
    const auto v = sluice::auth::parse_json(text, error);
    if (!v) {
        if (error.empty()) std::abort();
        return 0;
    }
    check(*v, 0);
    std::string again_error;
    const auto again = sluice::auth::parse_json(text, again_error);
    if (!again || !same(*v, *again)) std::abort();
    return 0;
}
