// What an upstream's response reports as its request's cost (`cost: {response_header: NAME}`
// or `{response_trailer: NAME}`): a whole number in a header field of the head or a field of
// the chunked body's trailer section. Pure: no sockets; fuzzed by
// tests/fuzz/reported_cost_fuzz.cpp.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::http {

class FieldList;

struct ReportedCost {
    enum class Kind {
        absent,   // the response does not have the field: it settles at the reservation
        units,    // `units`
        invalid,  // the field is there but not one whole number: settled at the reservation (and logged)
    };
    Kind kind = Kind::absent;
    std::uint64_t units = 0;
    std::string_view problem;  // invalid: why (static text)
};

// The field's values, in the order the response gave them. A value is a whole number in
// decimal digits (optional spaces or tabs around it); more than 18 digits reads as the largest
// number (the limit then bounds it, limit::settled_units). The field given more than once with
// the same number is that number; with different ones, or any value that is not a number, it
// is invalid: what it cost is anyone's guess, so nothing is settled on it.
class CostReport {
public:
    void add(std::string_view value);
    const ReportedCost& result() const { return result_; }

private:
    ReportedCost result_;
};

// The cost the head's fields report in `name` (lower-case; names compare case-insensitively).
ReportedCost cost_in_fields(const FieldList& fields, std::string_view name);
// The same in a trailer section as BodyReader::trailers() keeps it ("Name: value\r\n" lines).
ReportedCost cost_in_trailers(std::string_view section, std::string_view name);

}  // namespace sluice::http
