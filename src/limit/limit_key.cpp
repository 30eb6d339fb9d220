#include "limit/limit_key.hpp"

#include <algorithm>
#include <tuple>

#include "limit/decide_script.hpp"

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

KeyPlan make_key_plan(std::string_view route, std::span<const config::LimitConfig> limits) {
    KeyPlan plan;
    append_escaped(plan.route, route, false);
    plan.shared = shared_parts(limits);
    plan.limits.reserve(limits.size());
    for (const auto& limit : limits) {
        KeyPlan::Limit entry;
        append_escaped(entry.name, limit.name, false);
        for (const auto& part : canonical(limit.key)) {
            const bool in_tag = std::any_of(plan.shared.begin(), plan.shared.end(),
                                            [&](const KeyPart& other) { return same_part(part, other); });
            if (!in_tag) entry.own.push_back(part);
        }
        append_decide_args(limit, entry.args);
        plan.limits.push_back(std::move(entry));
    }
    return plan;
}

std::vector<std::optional<std::string>> build_limit_keys(std::string_view key_prefix,
                                                         const RouteLimits& route,
                                                         const RequestKeyValues& request) {
    if (!route.plan) {
        const auto plan = make_key_plan(route.route, route.limits);
        return build_limit_keys(key_prefix, RouteLimits{route.route, route.limits, &plan}, request);
    }
    const auto& plan = *route.plan;
    std::vector<std::optional<std::string>> keys(plan.limits.size());

    // "<prefix>:{<route>:<shared values>}:"; a shared header that is absent means no limit applies.
    std::string head;
    head.reserve(key_prefix.size() + plan.route.size() + 48);
    append_escaped(head, key_prefix, true);
    head += ":{";
    head += plan.route;
    if (!append_values(head, plan.shared, request)) return keys;
    head += "}:";

    for (std::size_t i = 0; i < plan.limits.size(); ++i) {
        const auto& limit = plan.limits[i];
        std::string key;
        key.reserve(head.size() + limit.name.size() + 32);
        key += head;
        key += limit.name;
        if (append_values(key, limit.own, request)) keys[i] = std::move(key);
    }
    return keys;
}

}  // namespace sluice::limit
