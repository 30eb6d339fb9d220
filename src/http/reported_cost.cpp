#include "http/reported_cost.hpp"

#include <limits>

#include "http/field_list.hpp"
#include "http/field_text.hpp"

namespace sluice::http {

void CostReport::add(std::string_view value) {
    using Kind = ReportedCost::Kind;
    if (result_.kind == Kind::invalid) return;
    const std::string_view digits = trim_ows(value);
    if (digits.empty()) {
        result_ = {Kind::invalid, 0, "empty value"};
        return;
    }
    std::uint64_t units = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') {
            result_ = {Kind::invalid, 0, "not a whole number"};
            return;
        }
    }
    std::string_view significant = digits;
    while (significant.size() > 1 && significant.front() == '0') significant.remove_prefix(1);
    if (significant.size() > 18) {
        units = std::numeric_limits<std::uint64_t>::max();
    } else {
        for (const char c : significant) units = units * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (result_.kind == Kind::units && result_.units != units) {
        result_ = {Kind::invalid, 0, "given more than once with different values"};
        return;
    }
    result_ = {Kind::units, units, {}};
}

ReportedCost cost_in_fields(const FieldList& fields, std::string_view name) {
    CostReport report;
    for (const auto& field : fields)
        if (iequals_ascii(field.name_string(), name)) report.add(field.value());
    return report.result();
}

ReportedCost cost_in_trailers(std::string_view section, std::string_view name) {
    CostReport report;
    while (!section.empty()) {
        const auto end = section.find("\r\n");
        const std::string_view line = section.substr(0, end);
        section.remove_prefix(end == std::string_view::npos ? section.size() : end + 2);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        if (iequals_ascii(line.substr(0, colon), name)) report.add(line.substr(colon + 1));
    }
    return report.result();
}

}  // namespace sluice::http
