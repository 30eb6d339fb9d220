// What an access line says (logging.access_format): the fields an operator can name, and the
// two ways of naming them: a list of fields, or an nginx-like format string with $variables.
// Rendering is observe/access_log's; this is what the loader checks a config against.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::config {

enum class AccessField {
    client,       // the resolved client (X-Forwarded-For from a trusted peer), as the limits saw it
    peer,         // the TCP peer
    request,      // "METHOD URI HTTP/x.y"
    method,
    uri,
    protocol,     // "HTTP/1.1"
    status,
    bytes,        // response body bytes sent
    route,
    limit,        // the limit closest to refusing (or the one that refused)
    decision,
    remaining,
    upstream_ms,
    total_ms,
    wait_ms,      // a leaky bucket's hold
    request_id,
    host,
    upstream,     // the upstream server ("host:port") the request went to
    user_agent,
    tunnel_up,    // a WebSocket tunnel's bytes client to upstream
    tunnel_down,
    tunnel_ms,
    skipped,      // limits of the route that did not apply: keyed on a header the request lacks
    plan,         // the client's plan, on a route with plans
};

// Every field's name, in the order of AccessField.
std::span<const std::string_view> access_field_names();
std::string_view access_field_name(AccessField field);
std::optional<AccessField> access_field_named(std::string_view name);

struct AccessFormat {
    enum class Kind {
        classic,  // no access_format: the line of INTERFACE.md, with the fields added since
        fields,   // a list: text "name=value ...", json the same keys
        pattern,  // a string: text as written with each $variable replaced, json its variables
    };
    Kind kind = Kind::classic;
    struct Piece {
        std::string literal;               // text before the field (pattern)
        std::optional<AccessField> field;  // none: trailing text
    };
    std::vector<Piece> pieces;        // pattern: the text, piece by piece
    std::vector<AccessField> fields;  // fields and pattern: the fields named, in order
};

struct AccessPatternError {
    std::size_t offset = 0;  // in the pattern
    std::string message;
    std::string unknown;     // the name of an unknown $field (empty: another problem)
};

// Reads an nginx-like pattern: literal text with $name or ${name}; "$$" is a "$".
std::variant<AccessFormat, AccessPatternError> parse_access_pattern(std::string_view pattern);

}  // namespace sluice::config
