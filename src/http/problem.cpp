#include "http/problem.hpp"

#include <boost/beast/http/status.hpp>

#include "observe/json_text.hpp"

namespace sluice::http {

std::string problem_json(unsigned status, std::string_view detail,
                         const std::vector<std::pair<std::string_view, std::string_view>>& extra) {
    auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    std::string out = "{\"type\":\"about:blank\",\"title\":";
    out += observe::json_string({reason.data(), reason.size()});
    out += ",\"status\":";
    out += std::to_string(status);
    out += ",\"detail\":";
    out += observe::json_string(detail);
    for (const auto& [name, value] : extra) {
        out += ',';
        out += observe::json_string(name);
        out += ':';
        out += observe::json_string(value);
    }
    out += "}\n";
    return out;
}

}  // namespace sluice::http
