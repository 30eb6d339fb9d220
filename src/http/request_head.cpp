#include "http/request_head.hpp"

#include <string>
#include <string_view>

#include "http/head_scan.hpp"
#include "http/header_rules.hpp"

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;


// The request line's method and target for the access line, from a head Beast did not parse.
void describe_raw_request(std::string_view head, observe::AccessRecord& rec) {
    auto line = head.substr(0, head.find('\r'));
    auto printable = [](std::string_view s) {
        std::string out;
        for (char c : s.substr(0, 200)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
        return out;
    };
    auto sp1 = line.find(' ');
    rec.method = printable(line.substr(0, sp1));
    if (sp1 == std::string_view::npos) {
        rec.target.clear();
    } else {
        auto rest = line.substr(sp1 + 1);
        rec.target = printable(rest.substr(0, rest.find(' ')));
    }
    // (assign(1, '-'), not = "-": GCC 12 warns falsely of an overlapping copy, PR 105329.)
    if (rec.method.empty()) rec.method.assign(1, '-');
    if (rec.target.empty()) rec.target.assign(1, '-');
}

}  // namespace

RequestHead read_request_head(std::span<char> bytes, const config::ServerConfig& server, ClientRequest& req,
                              observe::AccessRecord& rec) {
    RequestHead out;
    const std::string_view raw(bytes.data(), bytes.size());
    auto refuse = [&out](unsigned status, std::string_view problem) {
        out.refusal = local_problem(status, problem);
        return std::move(out);
    };
    // HTTP/1.2 and up are read as HTTP/1.1: the minor digit is rewritten in place.
    const auto at = request_version_offset(raw);
    const bool other_major = at != std::string_view::npos && raw[at] != '1';
    if (at != std::string_view::npos && !other_major && raw[at + 2] > '1') bytes[at + 2] = '1';
    // (A session reads no more than max_header_bytes of head; an HTTP/2 request's head is
    // made by sluice from its header list.)
    const bool too_large = raw.size() > server.max_header_bytes + 4;
    std::string_view problem;
    if (!other_major && !too_large) problem = parse_request_head(raw, req);
    if (other_major || too_large || !problem.empty() || req.fields().size() > max_field_lines) {
        // Refused: the first problem in the order of the checks, our byte rules (request
        // smuggling) first. A head the parse accepts passes them all, so they are looked
        // for only here.
        describe_raw_request(raw, rec);
        if (const auto bytes_problem = check_request_head(raw); !bytes_problem.empty()) return refuse(400, bytes_problem);
        if (count_field_lines(raw) > max_field_lines) return refuse(431, "too many header fields");
        if (other_major) {
            rec.version = 11;
            return refuse(505, "only HTTP/1.x is supported");
        }
        if (too_large) return refuse(431, "request head larger than max_header_bytes");
        return refuse(400, problem);
    }
    out.parsed = true;
    rec.method = std::string(req.method_string());
    rec.target = std::string(req.target());
    rec.version = req.version();

    const auto framing = check_request_framing(req.fields(), req.version());
    if (!framing.ok()) return refuse(framing.status, framing.problem);
    BodyLimits limits;
    limits.max_body = server.max_body_bytes;
    limits.max_chunk_line = max_chunk_line;
    limits.max_trailer_bytes = server.max_header_bytes;
    limits.max_trailer_fields = max_field_lines;
    using Body = Framing::Body;
    out.body = framing.body == Body::length    ? BodyReader::length(framing.length, limits)
               : framing.body == Body::chunked ? BodyReader::chunked(limits)
                                               : BodyReader();
    out.length = framing.length;
    out.expects = req.find(bhttp::field::expect).has_value();
    if (out.body.state() == BodyReader::State::too_large) return refuse(413, "request body larger than max_body_bytes");

    // One reading of the target for routing, `path` keys and forwarding: the normalised path
    // (and the query as it came) is what the upstream gets. An absolute-form authority,
    // validated, replaces Host (RFC 9112 3.2.2); a Host field must be valid.
    out.target = parse_request_target(req.method_string(), req.target());
    if (!out.target.ok()) return refuse(400, out.target.problem);
    if (!out.target.authority.empty()) {
        replace_field(req.fields(), bhttp::field::host, out.target.authority);
        rec.host = std::string(out.target.authority);
    } else if (const auto host = req.find(bhttp::field::host)) {
        if (const auto problem = host_problem(*host); !problem.empty()) return refuse(400, problem);
        rec.host = std::string(*host);
    }
    req.target(out.target.origin_form());
    return out;
}

}  // namespace sluice::http
