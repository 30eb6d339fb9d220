#include "time/time_zone.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "time/civil.hpp"

namespace sluice::time {
namespace {

constexpr std::size_t max_file_bytes = 1 << 20;  // real files are < 4 KiB
constexpr int last_rule_year = 2200;

// ---- POSIX TZ rules (the TZif footer) ----------------------------------------------------

struct RuleDate {
    enum class Kind { julian_no_leap, zero_based, month_week_day } kind = Kind::month_week_day;
    int n = 0;        // Jn: 1..365; n: 0..365
    int month = 0;    // Mm.w.d
    int week = 0;     // 1..5 (5: the last)
    int weekday = 0;  // 0 = Sunday
    std::int32_t time = 7200;  // seconds after local midnight, -167h..167h; default 02:00
};

struct PosixRule {
    std::int32_t std_offset = 0;  // east of UTC
    bool has_dst = false;
    std::int32_t dst_offset = 0;
    RuleDate start, end;
};

class RuleParser {
public:
    explicit RuleParser(std::string_view text) : s_(text) {}

    std::optional<PosixRule> parse(std::string& error) {
        PosixRule rule;
        if (!name()) return fail(error, "a zone abbreviation (3 or more letters, or <...>)");
        std::int32_t west = 0;
        if (!clock(west, 24)) return fail(error, "a UTC offset");
        rule.std_offset = -west;
        if (done()) return rule;
        if (!name()) return fail(error, "a daylight-saving abbreviation");
        rule.has_dst = true;
        rule.dst_offset = rule.std_offset + 3600;
        if (!done() && peek() != ',') {
            if (!clock(west, 24)) return fail(error, "a daylight-saving offset");
            rule.dst_offset = -west;
        }
        // Without a rule POSIX leaves the dates to the implementation: refused, not guessed.
        if (!eat(',') || !date(rule.start) || !eat(',') || !date(rule.end))
            return fail(error, "the daylight-saving dates (,start[/time],end[/time])");
        if (!done()) return fail(error, "the end of the rule");
        return rule;
    }

private:
    std::optional<PosixRule> fail(std::string& error, std::string_view expected) const {
        error = "POSIX TZ rule \"" + std::string(s_.substr(0, 80)) + "\": expected " + std::string(expected) +
                " at offset " + std::to_string(pos_);
        return std::nullopt;
    }
    bool done() const { return pos_ == s_.size(); }
    char peek() const { return done() ? '\0' : s_[pos_]; }
    bool eat(char c) {
        if (peek() != c) return false;
        ++pos_;
        return true;
    }
    static bool alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
    static bool digit(char c) { return c >= '0' && c <= '9'; }

    bool name() {
        std::size_t length = 0;
        if (eat('<')) {
            while (!done() && (alpha(peek()) || digit(peek()) || peek() == '+' || peek() == '-')) ++pos_, ++length;
            return eat('>') && length >= 3;
        }
        while (alpha(peek())) ++pos_, ++length;
        return length >= 3;
    }
    // Up to `digits` digits, at most `most`.
    bool number(int& out, int digits, int most) {
        int value = 0, count = 0;
        while (count < digits && digit(peek())) value = value * 10 + (s_[pos_++] - '0'), ++count;
        if (count == 0 || value > most) return false;
        out = value;
        return true;
    }
    // [+-]hh[:mm[:ss]], hours at most `hours`; seconds, signed as written.
    bool clock(std::int32_t& out, int hours) {
        int sign = 1;
        if (eat('-')) sign = -1;
        else eat('+');
        int h = 0, m = 0, sec = 0;
        if (!number(h, 3, hours)) return false;
        if (eat(':')) {
            if (!number(m, 2, 59)) return false;
            if (eat(':') && !number(sec, 2, 59)) return false;
        }
        out = sign * (h * 3600 + m * 60 + sec);
        return true;
    }
    bool date(RuleDate& d) {
        if (eat('J')) {
            d.kind = RuleDate::Kind::julian_no_leap;
            if (!number(d.n, 3, 365) || d.n < 1) return false;
        } else if (eat('M')) {
            d.kind = RuleDate::Kind::month_week_day;
            if (!number(d.month, 2, 12) || d.month < 1 || !eat('.') || !number(d.week, 1, 5) || d.week < 1 ||
                !eat('.') || !number(d.weekday, 1, 6))
                return false;
        } else {
            d.kind = RuleDate::Kind::zero_based;
            if (!number(d.n, 3, 365)) return false;
        }
        if (eat('/')) return clock(d.time, 167);  // RFC 8536 allows -167..167 hours
        return true;
    }

    std::string_view s_;
    std::size_t pos_ = 0;
};

// Days since the epoch of the local date `d` names in `year`.
std::int64_t rule_day(const RuleDate& d, std::int64_t year) {
    const std::int64_t jan1 = days_from_civil(year, 1, 1);
    switch (d.kind) {
    case RuleDate::Kind::julian_no_leap:  // Feb 29 is never counted
        return jan1 + d.n - 1 + (is_leap_year(year) && d.n >= 60 ? 1 : 0);
    case RuleDate::Kind::zero_based:
        return jan1 + d.n;
    case RuleDate::Kind::month_week_day: {
        const std::int64_t first = days_from_civil(year, d.month, 1);
        const int first_weekday = weekday_of(first);  // 0 = Sunday
        std::int64_t day = (d.weekday - first_weekday + 7) % 7 + 7 * (d.week - 1);
        const int length = days_in_month(year, d.month);
        while (day >= length) day -= 7;  // week 5: the last such weekday
        return first + day;
    }
    }
    return jan1;
}

// Transitions the rule makes after `after`, up to the end of last_rule_year.
void expand_rule(const PosixRule& rule, std::int64_t after, std::vector<TimeZone::Transition>& out) {
    if (!rule.has_dst) return;
    std::int64_t first_year = 1900;
    if (after > std::numeric_limits<std::int64_t>::min()) {
        const auto [y, m, d] = civil_from_days(floor_div(after, 86400));
        (void)m, (void)d;
        first_year = std::max<std::int64_t>(y - 1, 1900);
    }
    std::vector<TimeZone::Transition> made;
    for (std::int64_t year = first_year; year <= last_rule_year; ++year) {
        // Each date's time is local time as the clock shows it before the change.
        const std::int64_t start = rule_day(rule.start, year) * 86400 + rule.start.time - rule.std_offset;
        const std::int64_t end = rule_day(rule.end, year) * 86400 + rule.end.time - rule.dst_offset;
        if (start <= end) {
            made.push_back({start, rule.dst_offset});
            made.push_back({end, rule.std_offset});
        } else {  // southern hemisphere: summer spans the new year
            made.push_back({end, rule.std_offset});
            made.push_back({start, rule.dst_offset});
        }
    }
    std::stable_sort(made.begin(), made.end(), [](const auto& a, const auto& b) { return a.at < b.at; });
    for (const auto& t : made) {
        if (t.at <= after) continue;
        // At one instant the later change wins (a rule with daylight time all year ends one
        // year's summer exactly when it starts the next).
        if (!out.empty() && out.back().at == t.at) out.pop_back();
        out.push_back(t);
    }
}

// Keeps only the transitions that change the offset.
std::vector<TimeZone::Transition> changes_only(std::int32_t initial, const std::vector<TimeZone::Transition>& all) {
    std::vector<TimeZone::Transition> kept;
    std::int32_t current = initial;
    for (const auto& t : all) {
        if (!kept.empty() && kept.back().at == t.at) {  // (expand_rule already merged these)
            kept.pop_back();
            current = kept.empty() ? initial : kept.back().offset;
        }
        if (t.offset == current) continue;
        kept.push_back(t);
        current = t.offset;
    }
    return kept;
}

// ---- TZif -----------------------------------------------------------------------------

class Bytes {
public:
    explicit Bytes(std::string_view s) : s_(s) {}
    std::size_t left() const { return s_.size() - pos_; }
    bool skip(std::uint64_t n) {
        if (n > left()) return false;
        pos_ += n;
        return true;
    }
    std::string_view take(std::size_t n) {
        const auto part = s_.substr(pos_, n);
        pos_ += part.size();
        return part;
    }
    std::uint32_t u32() {
        std::uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s_[pos_++]);
        return v;
    }
    std::int64_t i64() {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(s_[pos_++]);
        return static_cast<std::int64_t>(v);
    }
    unsigned char byte() { return static_cast<unsigned char>(s_[pos_++]); }
    std::string_view rest() const { return s_.substr(pos_); }

private:
    std::string_view s_;
    std::size_t pos_ = 0;
};

struct Header {
    char version = 0;
    std::uint32_t isutcnt = 0, isstdcnt = 0, leapcnt = 0, timecnt = 0, typecnt = 0, charcnt = 0;

    std::uint64_t data_bytes(unsigned time_size) const {
        return std::uint64_t{timecnt} * time_size + timecnt + std::uint64_t{typecnt} * 6 + charcnt +
               std::uint64_t{leapcnt} * (time_size + 4) + isstdcnt + isutcnt;
    }
};

bool read_header(Bytes& in, Header& h, std::string& error) {
    if (in.left() < 44 || in.take(4) != "TZif") {
        error = "not a TZif file";
        return false;
    }
    h.version = static_cast<char>(in.byte());
    if (h.version != '\0' && (h.version < '2' || h.version > '9')) {
        error = "unknown TZif version";
        return false;
    }
    in.skip(15);
    h.isutcnt = in.u32();
    h.isstdcnt = in.u32();
    h.leapcnt = in.u32();
    h.timecnt = in.u32();
    h.typecnt = in.u32();
    h.charcnt = in.u32();
    if (h.typecnt == 0 || h.charcnt == 0 || (h.isutcnt != 0 && h.isutcnt != h.typecnt) ||
        (h.isstdcnt != 0 && h.isstdcnt != h.typecnt)) {
        error = "inconsistent TZif counts";
        return false;
    }
    return true;
}

struct Data {
    std::vector<std::int64_t> times;
    std::vector<unsigned char> type_of;
    std::vector<std::int32_t> offsets;  // per type
};

bool read_data(Bytes& in, const Header& h, unsigned time_size, Data& data, std::string& error) {
    if (h.data_bytes(time_size) > in.left()) {
        error = "truncated TZif data";
        return false;
    }
    if (h.leapcnt != 0) {
        error = "zones with leap seconds (right/...) are not supported";
        return false;
    }
    data.times.reserve(h.timecnt);
    for (std::uint32_t i = 0; i < h.timecnt; ++i) {
        const std::int64_t t = time_size == 8 ? in.i64() : static_cast<std::int32_t>(in.u32());
        if (!data.times.empty() && t <= data.times.back()) {
            error = "TZif transition times are not ascending";
            return false;
        }
        data.times.push_back(t);
    }
    data.type_of.reserve(h.timecnt);
    for (std::uint32_t i = 0; i < h.timecnt; ++i) {
        const unsigned char type = in.byte();
        if (type >= h.typecnt) {
            error = "TZif transition names a missing local time type";
            return false;
        }
        data.type_of.push_back(type);
    }
    for (std::uint32_t i = 0; i < h.typecnt; ++i) {
        const auto offset = static_cast<std::int32_t>(in.u32());
        const unsigned char isdst = in.byte();
        const unsigned char abbreviation = in.byte();
        if (offset < -TimeZone::max_offset || offset > TimeZone::max_offset || isdst > 1 || abbreviation >= h.charcnt) {
            error = "TZif local time type out of range";
            return false;
        }
        data.offsets.push_back(offset);
    }
    in.skip(h.charcnt);
    in.skip(std::uint64_t{h.isstdcnt} + h.isutcnt);
    return true;
}

std::string read_file(const std::filesystem::path& path, std::string& error) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
        error = "no such time zone file " + path.string();
        return {};
    }
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size > max_file_bytes) {
        error = "time zone file " + path.string() + " is not a TZif file (too large or unreadable)";
        return {};
    }
    std::ifstream file(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << file.rdbuf();
    if (!file) {
        error = "cannot read " + path.string();
        return {};
    }
    return bytes.str();
}

}  // namespace

bool is_zone_name(std::string_view name) {
    if (name.empty() || name.size() > 255) return false;
    std::size_t start = 0;
    while (start <= name.size()) {
        const auto slash = std::min(name.find('/', start), name.size());
        const auto part = name.substr(start, slash - start);
        if (part.empty() || part == "." || part == "..") return false;
        for (const char c : part)
            if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '-' || c == '+'))
                return false;
        start = slash + 1;
    }
    return true;
}

std::optional<TimeZone> TimeZone::load(std::string_view name, std::string& error) {
    if (!is_zone_name(name)) {
        error = "\"" + std::string(name.substr(0, 80)) + "\" is not a time zone name (like Europe/Berlin or UTC)";
        return std::nullopt;
    }
    if (name == "UTC" || name == "Etc/UTC") {
        TimeZone zone;
        zone.name_ = std::string(name);
        return zone;
    }
    const char* dir = std::getenv("TZDIR");
    const std::filesystem::path path =
        std::filesystem::path(dir && *dir ? dir : "/usr/share/zoneinfo") / std::string(name);
    std::string read_error;
    const std::string bytes = read_file(path, read_error);
    if (!read_error.empty()) {
        error = "unknown time zone " + std::string(name) + " (" + read_error + ")";
        return std::nullopt;
    }
    std::string parse_error;
    auto zone = from_tzif(bytes, name, parse_error);
    if (!zone) error = "time zone " + std::string(name) + ": " + path.string() + ": " + parse_error;
    return zone;
}

std::optional<TimeZone> TimeZone::from_tzif(std::string_view bytes, std::string_view name, std::string& error) {
    Bytes in(bytes);
    Header header;
    if (!read_header(in, header, error)) return std::nullopt;
    Data data;
    std::string footer;
    if (header.version == '\0') {
        if (!read_data(in, header, 4, data, error)) return std::nullopt;
    } else {
        // Version 2 and later: skip the 32-bit block, read the 64-bit one and the footer.
        if (!in.skip(header.data_bytes(4))) {
            error = "truncated TZif data";
            return std::nullopt;
        }
        Header second;
        if (!read_header(in, second, error)) return std::nullopt;
        if (!read_data(in, second, 8, data, error)) return std::nullopt;
        const std::string_view rest = in.rest();
        const auto end = rest.size() > 1 && rest[0] == '\n' ? rest.find('\n', 1) : std::string_view::npos;
        if (end == std::string_view::npos) {
            error = "TZif footer missing";
            return std::nullopt;
        }
        footer = std::string(rest.substr(1, end - 1));
    }

    TimeZone zone;
    zone.name_ = std::string(name);
    std::vector<Transition> all;
    for (std::size_t i = 0; i < data.times.size(); ++i) all.push_back({data.times[i], data.offsets[data.type_of[i]]});
    zone.initial_ = data.offsets[0];
    if (!footer.empty()) {
        RuleParser parser(footer);
        const auto rule = parser.parse(error);
        if (!rule) return std::nullopt;
        if (std::abs(rule->std_offset) > max_offset || std::abs(rule->dst_offset) > max_offset) {
            error = "TZif footer offset out of range";
            return std::nullopt;
        }
        if (!rule->has_dst) {
            if (all.empty()) zone.initial_ = rule->std_offset;
            else if (all.back().offset != rule->std_offset && all.back().at < std::numeric_limits<std::int64_t>::max())
                all.push_back({all.back().at + 1, rule->std_offset});
        } else {
            if (all.empty()) zone.initial_ = rule->std_offset;
            expand_rule(*rule, all.empty() ? std::numeric_limits<std::int64_t>::min() : all.back().at, all);
        }
    }
    zone.transitions_ = changes_only(zone.initial_, all);
    return zone;
}

std::optional<TimeZone> TimeZone::from_posix_rule(std::string_view text, std::string& error) {
    RuleParser parser(text);
    const auto rule = parser.parse(error);
    if (!rule) return std::nullopt;
    if (std::abs(rule->std_offset) > max_offset || std::abs(rule->dst_offset) > max_offset) {
        error = "POSIX TZ rule offset out of range";
        return std::nullopt;
    }
    TimeZone zone;
    zone.name_ = std::string(text);
    zone.initial_ = rule->std_offset;
    std::vector<Transition> all;
    expand_rule(*rule, std::numeric_limits<std::int64_t>::min(), all);
    zone.transitions_ = changes_only(zone.initial_, all);
    return zone;
}

std::int32_t TimeZone::offset_at(std::int64_t utc) const {
    const auto after = std::upper_bound(transitions_.begin(), transitions_.end(), utc,
                                        [](std::int64_t t, const Transition& tr) { return t < tr.at; });
    return after == transitions_.begin() ? initial_ : std::prev(after)->offset;
}

std::int64_t TimeZone::first_reaching(std::int64_t local) const {
    // Before `from` the clock shows less than `local` whatever the offset; walk the stretches
    // of constant offset from the one holding `from` until one reaches `local`.
    const std::int64_t from = local - max_offset;
    std::size_t i = std::upper_bound(transitions_.begin(), transitions_.end(), from,
                                     [](std::int64_t t, const Transition& tr) { return t < tr.at; }) -
                    transitions_.begin();
    for (;; ++i) {
        const std::int32_t offset = i == 0 ? initial_ : transitions_[i - 1].offset;
        const std::int64_t begin = i == 0 ? std::numeric_limits<std::int64_t>::min() : transitions_[i - 1].at;
        const std::int64_t candidate = std::max(begin, local - offset);
        if (i == transitions_.size() || candidate < transitions_[i].at) return candidate;
    }
}

}  // namespace sluice::time
