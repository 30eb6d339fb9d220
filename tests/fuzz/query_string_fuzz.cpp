// libFuzzer target: the admin port's query strings (/limits?...).
// Sources: src/observe/query_string.cpp.
//
// Whatever parses must hold what the parser promises: at most 64 pairs, names never empty,
// no part over 4096 bytes, no control byte in a name; and a query made again from the pairs, escaped,
// parses to the same pairs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "observe/query_string.hpp"

using sluice::observe::parse_query;

namespace {

std::string escaped(const std::string& text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : text) {
        out += '%';
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view query(reinterpret_cast<const char*>(data), size);
    std::string error;
    const auto params = parse_query(query, error);
    if (!params) {
        if (error.empty()) std::abort();
        return 0;
    }
    if (params->size() > sluice::observe::max_query_params) std::abort();
    std::string again;
    for (const auto& p : *params) {
        if (p.name.empty()) std::abort();
        if (p.name.size() > sluice::observe::max_query_part || p.value.size() > sluice::observe::max_query_part)
            std::abort();
        for (const unsigned char c : p.name)
            if (c < 0x20 || c == 0x7f) std::abort();
        again += (again.empty() ? "" : "&") + escaped(p.name) + "=" + escaped(p.value);
    }
    const auto reparsed = parse_query(again, error);
    if (!reparsed || reparsed->size() != params->size()) std::abort();
    for (std::size_t i = 0; i < params->size(); ++i)
        if ((*reparsed)[i].name != (*params)[i].name || (*reparsed)[i].value != (*params)[i].value) std::abort();
    return 0;
}
