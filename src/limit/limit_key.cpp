#include "limit/limit_key.hpp"

#include <algorithm>
#include <tuple>

namespace sluice::limit {
namespace {

using config::KeyPart;

bool same_part(const KeyPart& a, const KeyPart& b) {
    return a.kind == b.kind && (a.kind != KeyPart::Kind::header || a.header_name == b.header_name);
}

bool canonical_before(const KeyPart& a, const KeyPart& b) {
    return std::tie(a.kind, a.header_name) < std::tie(b.kind, b.header_name);
}

std::vector<KeyPart> canonical(const std::vector<KeyPart>& parts) {
    std::vector<KeyPart> sorted = parts;
    std::stable_sort(sorted.begin(), sorted.end(), canonical_before);
    return sorted;
}

// The key parts every limit of the route has, in canonical order.
std::vector<KeyPart> shared_parts(std::span<const config::LimitConfig> limits) {
    if (limits.empty()) return {};
    std::vector<KeyPart> shared;
    for (const auto& part : canonical(limits.front().key)) {
        const bool everywhere = std::all_of(limits.begin() + 1, limits.end(), [&](const auto& limit) {
            return std::any_of(limit.key.begin(), limit.key.end(),
                               [&](const KeyPart& other) { return same_part(part, other); });
        });
        const bool seen = std::any_of(shared.begin(), shared.end(),
                                      [&](const KeyPart& other) { return same_part(part, other); });
        if (everywhere && !seen) shared.push_back(part);
    }
    return shared;
}

void append_escaped(std::string& out, std::string_view text, bool keep_colons) {
    static constexpr char hex[] = "0123456789ABCDEF";
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        const bool escape = c == '%' || c == '{' || c == '}' || (c == ':' && !keep_colons) || byte <= 0x20 ||
                            byte == 0x7f;
        if (!escape) {
            out.push_back(c);
            continue;
        }
        out.push_back('%');
        out.push_back(hex[byte >> 4]);
        out.push_back(hex[byte & 0xf]);
    }
}

std::optional<std::string_view> value_of(const KeyPart& part, const RequestKeyValues& request) {
    switch (part.kind) {
    case KeyPart::Kind::client_ip: return request.client_ip;
    case KeyPart::Kind::method: return request.method;
    case KeyPart::Kind::path: return request.path;
    case KeyPart::Kind::header:
        if (!request.header) return std::nullopt;
        return request.header(part.header_name);
    }
    return std::nullopt;
}

// ":<value>" for each part, or nullopt if a header is absent.
bool append_values(std::string& out, const std::vector<KeyPart>& parts, const RequestKeyValues& request) {
    for (const auto& part : parts) {
        const auto value = value_of(part, request);
        if (!value) return false;
        out.push_back(':');
        append_escaped(out, *value, false);
    }
    return true;
}

}  // namespace

std::vector<std::optional<std::string>> build_limit_keys(std::string_view key_prefix,
                                                         const RouteLimits& route,
                                                         const RequestKeyValues& request) {
    std::vector<std::optional<std::string>> keys(route.limits.size());
    const auto shared = shared_parts(route.limits);

    // "<prefix>:{<route>:<shared values>}:"; a shared header that is absent means no limit applies.
    std::string head;
    append_escaped(head, key_prefix, true);
    head += ":{";
    append_escaped(head, route.route, false);
    if (!append_values(head, shared, request)) return keys;
    head += "}:";

    for (std::size_t i = 0; i < route.limits.size(); ++i) {
        const auto& limit = route.limits[i];
        std::vector<KeyPart> own;
        for (const auto& part : canonical(limit.key)) {
            const bool in_tag = std::any_of(shared.begin(), shared.end(),
                                            [&](const KeyPart& other) { return same_part(part, other); });
            if (!in_tag) own.push_back(part);
        }
        std::string key = head;
        append_escaped(key, limit.name, false);
        if (append_values(key, own, request)) keys[i] = std::move(key);
    }
    return keys;
}

}  // namespace sluice::limit
