#include "limit/limit_key.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <tuple>

#include "limit/decide_script.hpp"
#include "limit/key_values.hpp"

namespace sluice::limit {
namespace {

using config::KeyPart;

bool same_part(const KeyPart& a, const KeyPart& b) { return a == b; }

bool canonical_before(const KeyPart& a, const KeyPart& b) {
    return std::tie(a.kind, a.header_name, a.v4_prefix, a.v6_prefix, a.segment) <
           std::tie(b.kind, b.header_name, b.v4_prefix, b.v6_prefix, b.segment);
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

// Bytes a key part writes as %XX: the key's own punctuation, spaces and control bytes (a
// colon only where the part's colons are not kept).
constexpr std::array<bool, 256> escaped_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0; c <= 0x20; ++c) t[static_cast<std::size_t>(c)] = true;
    for (char c : std::string_view("%{}:")) t[static_cast<unsigned char>(c)] = true;
    t[0x7f] = true;
    return t;
}();

// Runs of bytes that stay as they are are appended whole (most values have no byte to escape).
void append_escaped(std::string& out, std::string_view text, bool keep_colons) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::size_t run = 0;  // where the bytes not yet appended start
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (!escaped_bytes[byte] || (byte == ':' && keep_colons)) continue;
        out.append(text.data() + run, i - run);
        const char escape[3] = {'%', hex[byte >> 4], hex[byte & 0xf]};
        out.append(escape, 3);
        run = i + 1;
    }
    out.append(text.data() + run, text.size() - run);
}

// The value of `part` (in `owned` where it had to be made); nullopt when the request lacks it.
std::optional<std::string_view> value_of(const KeyPart& part, const RequestKeyValues& request,
                                         std::optional<std::string>& owned) {
    std::optional<std::string_view> value;
    bool ambiguous = false;
    switch (part.kind) {
    case KeyPart::Kind::client_ip: value = request.client_ip; break;
    case KeyPart::Kind::method: value = request.method; break;
    case KeyPart::Kind::path: value = request.path; break;
    case KeyPart::Kind::header:
        if (request.header) value = request.header(part.header_name);
        break;
    case KeyPart::Kind::client_net:
        owned = client_network(request.client_ip, part.v4_prefix, part.v6_prefix);
        break;
    case KeyPart::Kind::query: owned = query_value(request.query, part.header_name, ambiguous); break;
    case KeyPart::Kind::cookie: owned = cookie_value(request.cookies, part.header_name, ambiguous); break;
    case KeyPart::Kind::path_segment:
        // Decoded: the normalised path keeps escapes of reserved characters (`%21`), which a
        // backend reads as the character itself (`!`).
        if (const auto segment = path_segment(request.path, part.segment)) owned = percent_decoded(*segment);
        break;
    case KeyPart::Kind::jwt:
        if (request.claim) value = request.claim(part.header_name);
        break;
    }
    if (owned) value = *owned;
    if (ambiguous) return std::nullopt;
    return value;
}

// Appends ":<value>" of `part` (escaped); false when the request lacks it.
bool append_value(std::string& out, const KeyPart& part, const RequestKeyValues& request) {
    std::optional<std::string> owned;
    const auto value = value_of(part, request, owned);
    if (!value) return false;
    out.push_back(':');
    append_escaped(out, *value, false);
    return true;
}

// ":<value>" for each part; false if the request lacks one.
bool append_values(std::string& out, const std::vector<KeyPart>& parts, const RequestKeyValues& request) {
    for (const auto& part : parts)
        if (!append_value(out, part, request)) return false;
    return true;
}

}  // namespace

std::optional<std::string> ambiguous_key_value(std::span<const config::LimitConfig> limits,
                                               const RequestKeyValues& request) {
    for (const auto& limit : limits)
        for (const auto& part : limit.key) {
            bool ambiguous = false;
            if (part.kind == KeyPart::Kind::query) query_value(request.query, part.header_name, ambiguous);
            if (part.kind == KeyPart::Kind::cookie) cookie_value(request.cookies, part.header_name, ambiguous);
            if (ambiguous)
                return (part.kind == KeyPart::Kind::query ? "query parameter '" : "cookie '") + part.header_name +
                       "' is given more than once with different values; limit '" + limit.name +
                       "' is keyed on it, so which one counts would be a guess";
        }
    return std::nullopt;
}

bool has_key_value(const config::KeyPart& part, const RequestKeyValues& request) {
    using Kind = KeyPart::Kind;
    if (part.kind == Kind::client_ip || part.kind == Kind::method || part.kind == Kind::path) return true;
    if (part.kind == Kind::header) return request.header && request.header(part.header_name).has_value();
    std::string ignored;
    return append_value(ignored, part, request);
}

std::optional<std::string> key_value(const config::KeyPart& part, const RequestKeyValues& request) {
    std::optional<std::string> owned;
    const auto value = value_of(part, request, owned);
    if (!value) return std::nullopt;
    if (owned) return owned;
    return std::string(*value);
}

KeyPlan make_key_plan(std::string_view route, std::span<const config::LimitConfig> limits) {
    return make_key_plan(route, limits, limits);
}

KeyPlan make_key_plan(std::string_view route, std::span<const config::LimitConfig> limits,
                      std::span<const config::LimitConfig> tag_from) {
    KeyPlan plan;
    append_escaped(plan.route, route, false);
    plan.shared = shared_parts(tag_from);
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
        static std::atomic<std::uint64_t> made{0};
        entry.id = ++made;
        plan.longest_name = std::max(plan.longest_name, entry.name.size());
        plan.limits.push_back(std::move(entry));
    }
    return plan;
}

KeyPrefix::KeyPrefix(std::string_view key_prefix) { append_escaped(escaped, key_prefix, true); }

LimitKeys build_limit_keys(std::string_view key_prefix, const RouteLimits& route, const RequestKeyValues& request) {
    return build_limit_keys(KeyPrefix(key_prefix), route, request);
}

LimitKeys build_limit_keys(const KeyPrefix& prefix, const RouteLimits& route, const RequestKeyValues& request) {
    if (!route.plan) {
        const auto plan = make_key_plan(route.route, route.limits);
        return build_limit_keys(prefix, RouteLimits{route.route, route.limits, &plan}, request);
    }
    const auto& plan = *route.plan;
    LimitKeys keys(plan.limits.size());

    // "<prefix>:{<route>:<shared values>}:"; a shared header that is absent means no limit applies.
    // Room for a limit's name and values too: the last limit's key is the head itself, grown.
    std::string head;
    head.reserve(prefix.escaped.size() + plan.route.size() + plan.longest_name + 80);
    head.append(prefix.escaped).append(":{", 2).append(plan.route);
    if (!append_values(head, plan.shared, request)) return keys;
    head.append("}:", 2);

    for (std::size_t i = 0; i < plan.limits.size(); ++i) {
        const auto& limit = plan.limits[i];
        std::string key = i + 1 == plan.limits.size() ? std::move(head) : head;
        key += limit.name;
        if (append_values(key, limit.own, request)) keys[i] = std::move(key);
    }
    return keys;
}

}  // namespace sluice::limit
