#include "http/problem.hpp"

#include <boost/beast/http/status.hpp>

#include "observe/json_text.hpp"

namespace sluice::http {

std::string problem_json(unsigned status, std::string_view detail,
                         const std::vector<std::pair<std::string_view, std::string_view>>& extra) {
    auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    std::string out;
    out.reserve(96 + detail.size());
    out += "{\"type\":\"about:blank\",\"title\":";
    observe::append_json_string(out, {reason.data(), reason.size()});
    out += ",\"status\":";
    out += std::to_string(status);
    out += ",\"detail\":";
    observe::append_json_string(out, detail);
    for (const auto& [name, value] : extra) {
        out += ',';
        observe::append_json_string(out, name);
        out += ':';
        observe::append_json_string(out, value);
    }
    out += "}\n";
    return out;
}

std::string serialize(const ProblemResponse& response) {
    auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(response.status));
    std::size_t size = 160 + response.body.size();
    if (response.headers)
        for (const auto& [name, value] : *response.headers) size += name.size() + value.size() + 4;
    std::string out;
    out.reserve(size);
    out += response.version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    out += std::to_string(response.status);
    out += ' ';
    out.append(reason.data(), reason.size());
    out += "\r\nServer: sluice\r\n";
    if (!response.body.empty()) out += "Content-Type: application/problem+json\r\n";
    if (response.headers)
        for (const auto& [name, value] : *response.headers) {
            out += name;
            out += ": ";
            out += value;
            out += "\r\n";
        }
    if (response.version == 10 && response.keep_alive) out += "Connection: keep-alive\r\n";
    if (response.version != 10 && !response.keep_alive) out += "Connection: close\r\n";
    out += "Content-Length: ";
    out += std::to_string(response.body.size());
    out += "\r\n\r\n";
    if (!response.head) out += response.body;
    return out;
}

}  // namespace sluice::http
