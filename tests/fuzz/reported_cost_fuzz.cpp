// libFuzzer target: a cost the response reports (src/http/reported_cost.cpp), read from a
// chunked body's trailer section as BodyReader keeps it, and from head fields.
// Sources: src/http/reported_cost.cpp src/http/body_reader.cpp src/http/field_list.cpp
//
// The first input byte picks the field name looked for, the rest is a chunked body. Checked:
// - the kept trailer section is within its limit and made of whole "name: value\r\n" lines
//   once the body is done (nothing kept when it fails part way through a line is read);
// - the cost read from it equals the cost read from the same fields given as head fields;
// - a value read as units is digits alone (spaces or tabs around), and the units are its
//   number (or the largest number past 18 significant digits); a value that is not is never
//   units;
// - the same field given twice with different numbers is never units.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "http/body_reader.hpp"
#include "http/field_list.hpp"
#include "http/reported_cost.hpp"

using namespace sluice::http;

namespace {

// An independent reading of one value: nullopt when it is not a whole number.
bool reference(std::string_view v, std::uint64_t& units) {
    std::size_t a = 0, b = v.size();
    while (a < b && (v[a] == ' ' || v[a] == '\t')) ++a;
    while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t')) --b;
    if (a == b) return false;
    units = 0;
    for (std::size_t i = a; i < b; ++i) {
        if (v[i] < '0' || v[i] > '9') return false;
    }
    while (b - a > 1 && v[a] == '0') ++a;  // (leading zeros count for nothing)
    if (b - a > 18) {
        units = std::numeric_limits<std::uint64_t>::max();
        return true;
    }
    for (std::size_t i = a; i < b; ++i) units = units * 10 + static_cast<std::uint64_t>(v[i] - '0');
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    static const char* const names[] = {"x-tokens-used", "x-usage", "a"};
    const std::string_view name = names[data[0] % 3];
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

    BodyLimits limits;
    limits.max_trailer_bytes = 512;
    limits.max_trailer_fields = 8;
    BodyReader reader = BodyReader::chunked(limits);
    reader.keep_trailers();
    std::vector<char> out(256);
    std::size_t offset = 0;
    while (reader.state() == BodyReader::State::reading && offset < in.size()) {
        const auto step = reader.decode(in.substr(offset), out);
        offset += step.consumed;
        if (step.consumed == 0 && step.produced == 0) break;
    }
    const std::string_view section = reader.trailers();
    if (section.size() > limits.max_trailer_bytes) __builtin_trap();
    if (!reader.done()) return 0;
    if (!section.empty() && !section.ends_with("\r\n")) __builtin_trap();

    // The same fields as head fields, and each value read on its own.
    FieldList fields;
    CostReport by_hand;
    bool any = false, all_numbers = true;
    std::uint64_t first = 0;
    bool differ = false;
    std::string_view rest = section;
    while (!rest.empty()) {
        const auto end = rest.find("\r\n");
        if (end == std::string_view::npos) __builtin_trap();
        const std::string_view line = rest.substr(0, end);
        rest.remove_prefix(end + 2);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) __builtin_trap();
        const std::string_view field_name = line.substr(0, colon), value = line.substr(colon + 1);
        fields.insert(field_name, value);
        std::string lower(field_name);
        for (auto& c : lower)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        if (lower != name) continue;
        by_hand.add(value);
        std::uint64_t units = 0;
        if (!reference(value, units)) {
            all_numbers = false;
        } else {
            if (any && units != first) differ = true;
            if (!any) first = units;
        }
        any = true;
    }
    const ReportedCost from_trailers = cost_in_trailers(section, name);
    const ReportedCost from_fields = cost_in_fields(fields, name);
    if (from_trailers.kind != from_fields.kind || from_trailers.units != from_fields.units) __builtin_trap();
    if (from_trailers.kind != by_hand.result().kind) __builtin_trap();
    using Kind = ReportedCost::Kind;
    if (!any && from_trailers.kind != Kind::absent) __builtin_trap();
    if (any && (!all_numbers || differ) && from_trailers.kind != Kind::invalid) __builtin_trap();
    if (any && all_numbers && !differ && (from_trailers.kind != Kind::units || from_trailers.units != first))
        __builtin_trap();
    return 0;
}
