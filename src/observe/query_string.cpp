#include "observe/query_string.hpp"

namespace sluice::observe {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// `controls`: a decoded control byte is kept (a value: the key values it names may hold one: a
// tab in a header, any byte in a query parameter or cookie); else refused (a name).
bool decode(std::string_view in, std::string& out, std::string& error, bool controls) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        char c = in[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            const int high = in.size() - i >= 3 ? hex_value(in[i + 1]) : -1;
            const int low = in.size() - i >= 3 ? hex_value(in[i + 2]) : -1;
            if (high < 0 || low < 0) {
                error = "malformed percent-escape in the query";
                return false;
            }
            c = static_cast<char>(high * 16 + low);
            i += 2;
        }
        const auto byte = static_cast<unsigned char>(c);
        if (!controls && (byte < 0x20 || byte == 0x7f)) {
            error = "control character in a query parameter's name";
            return false;
        }
        if (out.size() >= max_query_part) {
            error = "query part longer than " + std::to_string(max_query_part) + " bytes";
            return false;
        }
        out.push_back(c);
    }
    return true;
}

}  // namespace

std::optional<std::vector<QueryParam>> parse_query(std::string_view query, std::string& error) {
    std::vector<QueryParam> params;
    std::size_t start = 0;
    while (start <= query.size()) {
        const auto end = std::min(query.find('&', start), query.size());
        const auto part = query.substr(start, end - start);
        start = end + 1;
        if (part.empty()) {
            if (end == query.size()) break;
            continue;  // "a=1&&b=2": an empty pair is skipped, as browsers and servers do
        }
        if (params.size() >= max_query_params) {
            error = "more than " + std::to_string(max_query_params) + " query parameters";
            return std::nullopt;
        }
        const auto equals = part.find('=');
        QueryParam param;
        if (!decode(part.substr(0, equals), param.name, error, false)) return std::nullopt;
        if (equals != std::string_view::npos && !decode(part.substr(equals + 1), param.value, error, true))
            return std::nullopt;
        if (param.name.empty()) {
            error = "query parameter without a name";
            return std::nullopt;
        }
        params.push_back(std::move(param));
    }
    return params;
}

}  // namespace sluice::observe
