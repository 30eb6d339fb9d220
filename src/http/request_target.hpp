// The request target and Host, read one way only: the path routes match, `path` keys use and
// the upstream receives is the normalised one, so no spelling of a path reaches a route while
// avoiding its limits. Pure functions, no sockets.
#pragma once

#include <string>
#include <string_view>

namespace sluice::http {

struct RequestTarget {
    std::string path;        // normalised; "*" for OPTIONS *
    std::string query;       // without '?'
    bool has_query = false;
    std::string authority;   // from an absolute-form target, validated (lowercase host[:port])
    std::string_view problem;  // non-empty: the target is invalid (400)
    bool ok() const { return problem.empty(); }
    // What goes upstream: the normalised path and the query as it came.
    std::string origin_form() const { return has_query ? path + '?' + query : path; }
};

// A method sluice forwards: upper-case letters, '-' and '_' (as nginx accepts), 1 to 32 of
// them. Methods are case-sensitive (RFC 9110 9.1), yet many servers upper-case what they get:
// `post` would miss a route that matches POST, and a `method` key would count it apart from
// POST, while the upstream reads it as POST.
inline bool is_request_method(std::string_view method) {
    if (method.empty() || method.size() > 32) return false;
    for (const char c : method)
        if ((c < 'A' || c > 'Z') && c != '-' && c != '_') return false;
    return true;
}

// Reads an origin-form (`/path?query`), absolute-form (`http://host/path`, `https://`, any
// case) or asterisk-form (`*`, OPTIONS only) target for `method`. Authority-form (CONNECT) is
// refused, and a method that is not is_request_method.
RequestTarget parse_request_target(std::string_view method, std::string_view target);

// Normalises an origin-form path, as nginx does before matching locations: escapes of
// unreserved characters are decoded, other escapes get uppercase hex (`%2F` stays encoded),
// bytes a path may not hold as they are (not ASCII, `"<>[]^`{|}`) are escaped (nginx
// decodes every escape instead; one spelling either way), dot-segments are removed (`%2e` counts as `.`) and repeated slashes merged. Refused, with
// `problem` set: invalid escapes, bytes that may not appear in a path (controls, space, DEL,
// `#`, backslash), and `..` above the root (nginx answers 400 too; an upstream must never be
// asked for a path the proxy read differently).
std::string normalize_path(std::string_view raw, std::string_view& problem);
// Only the bytes' part of it (escapes, bytes held escaped, the same refusals): no segment is
// removed. For a path prefix, whose last segment may be cut short (`/.` is the start of
// `/.git`, not a dot-segment).
std::string canonical_path_bytes(std::string_view raw, std::string_view& problem);

// A Host value (RFC 9110 7.2 / RFC 3986 3.2.2): a reg-name of letters, digits, `-`, `.`, `_`
// and `~` (no empty label run `..`), an IPv4 address, or an IPv6 literal in brackets;
// optionally `:port` with a port of at most 65535. Returns the value with the host
// lowercased, or an empty string (and `problem`) when invalid.
std::string validate_host(std::string_view host, std::string_view& problem);
// The same check without the lowercased copy: the problem, or an empty view when valid.
std::string_view host_problem(std::string_view host);

}  // namespace sluice::http
