#include "limit/decide_script.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdint>
#include <iterator>

#include <lua_scripts.hpp>

#include "limit/limit_params.hpp"

namespace sluice::limit {

redis::ScriptCode decide_code(bool cluster) {
    std::string code;
    for (auto part : {lua::token_bucket, lua::sliding_window, lua::fixed_window, lua::concurrency, lua::decide,
                      cluster ? lua::cluster_keys : lua::standalone_keys})
        code.append(part).append("\n");
    // FNV-1a over the code: a name per version of it.
    std::uint64_t hash = 14695981039346656037ull;
    for (unsigned char c : code) hash = (hash ^ c) * 1099511628211ull;
    if (cluster) hash = (hash ^ 'c') * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));

    redis::ScriptCode out;
    out.function = std::string("sluice_decide_") + hex;
    // Redis reads the flags only from the very first line.
    if (cluster) out.script.append("#!lua flags=allow-cross-slot-keys\n");
    out.script.append(code);
    out.script.append(
        "if redis.replicate_commands then redis.replicate_commands() end\n"
        "local keys, args, cluster = inputs(KEYS, ARGV)\n"
        "if not keys then return args end\n"
        "return decide(keys, args, cluster)\n");
    out.library = std::string("#!lua name=sluice_") + hex + "\n" + code;
    out.library.append("redis.register_function{function_name = '" + out.function +
                       "', callback = function(keys, args)\n"
                       "  local k, a, cluster = inputs(keys, args)\n"
                       "  if not k then return a end\n"
                       "  return decide(k, a, cluster)\n"
                       "end");
    out.library.append(cluster ? ", flags = { 'allow-cross-slot-keys' }}\n" : "}\n");
    return out;
}

std::string decide_script_source(bool cluster) { return decide_code(cluster).script; }

std::string release_script_source(bool cluster) {
    // (Redis reads the flags only from the very first line.)
    return (cluster ? std::string("#!lua flags=allow-cross-slot-keys\n") : std::string()) + std::string(lua::release);
}

bool decide_args_vary(const config::LimitConfig& limit) {
    // (A settle after the response has a cost of its own per request.)
    return !limit.cost_header.empty() || limit.calendar.has_value() || (limit.charges && limit.reports_cost());
}

CalendarArg calendar_arg(const config::LimitConfig& limit, std::int64_t now_us) {
    const WindowBounds current = fixed_window_at(limit, now_us);
    const WindowBounds before = fixed_window_at(limit, current.start_us - 1);
    const WindowBounds after = fixed_window_at(limit, current.end_us);
    CalendarArg arg;
    arg.valid_from_us = current.start_us;
    arg.valid_until_us = current.end_us;
    arg.text = std::to_string(before.start_us) + "," + std::to_string(current.start_us) + "," +
               std::to_string(current.end_us) + "," + std::to_string(after.end_us);
    return arg;
}

void append_decide_args(const config::LimitConfig& limit, std::uint64_t cost, std::string_view window,
                        std::vector<std::string>& args, bool may_wait) {
    // The limit's flags (lua/decide.lua): 1 shadow, 2 checked only (charged after the
    // response), 3 both; 4 the charge after the response, 5 a give-back ("t" and the
    // reservation's time); "d": a token bucket whose response cost may leave a debt.
    std::string flags = limit.refund_at_us > 0 ? "5t" + std::to_string(limit.refund_at_us)
                        : limit.charges       ? "4"
                        : limit.counted()     ? (limit.shadow ? "3" : "2")
                        : limit.shadow        ? "1"
                                              : "0";
    if (limit.reports_cost() && !limit.charges && limit.algorithm == config::Algorithm::token_bucket) flags += "d";
    // A ban (not of a charge): "b" and its length in microseconds; "B" where that is the whole
    // ban, not the limit's retry time when later (a limit whose response reports its cost: its
    // room comes back as the requests reserving it settle, sooner than a refusal can tell).
    if (limit.ban && !limit.charges)
        flags += (limit.reports_cost() ? "B" : "b") +
                 std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(*limit.ban).count());
    const std::string name(config::algorithm_name(limit.algorithm));  // decide.lua knows them by these names
    switch (limit.algorithm) {
    case config::Algorithm::token_bucket: {
        const auto params = token_bucket_params(limit);
        args.insert(args.end(), {name, flags, std::to_string(cost), std::to_string(params.interval_us),
                                 std::to_string(params.burst) + (limit.keeps_used ? ",kept" : "")});
        break;
    }
    case config::Algorithm::sliding_window: {
        const auto params = sliding_window_params(limit);
        args.insert(args.end(), {name, flags, std::to_string(cost), std::to_string(params.limit),
                                 // (",w": short enough for the string's own buffer)
                                 std::to_string(params.window_us) + (limit.weighted() ? ",w" : "")});
        break;
    }
    case config::Algorithm::fixed_window:
        args.insert(args.end(), {name, flags, std::to_string(cost), std::to_string(limit.limit),
                                 window.empty() ? std::to_string(fixed_window_us(limit)) : std::string(window)});
        break;
    case config::Algorithm::concurrency:
        args.insert(args.end(), {name, flags, std::to_string(cost), std::to_string(limit.limit),
                                 std::to_string(lease_us(limit))});
        break;
    case config::Algorithm::leaky_bucket: {
        const auto params = leaky_bucket_params(limit, may_wait);
        args.insert(args.end(), {name, flags, std::to_string(cost), std::to_string(params.interval_us),
                                 std::to_string(params.burst) + "," + std::to_string(params.delay_us) + "," +
                                     std::to_string(params.max_wait_us) + (limit.keeps_used ? ",kept" : "")});
        break;
    }
    }
}

void append_decide_args(const config::LimitConfig& limit, std::vector<std::string>& args) {
    append_decide_args(limit, limit.cost_header.empty() ? limit.cost : limit.default_cost, {}, args);
}


namespace {

// Plans kept between batches at most (a route's set of limits each, per plan of a route
// with plans): beyond it, none is kept.
constexpr std::size_t max_kept_plans = 32;

// A call of one plan without owner tokens leaves out its requests' plan numbers
// (lua/decide.lua): an argument less per request for Redis to read.
bool numbers_left_out(std::size_t plans, bool tokened) { return plans == 1 && !tokened; }

}  // namespace

void DecideArgs::end_request() {
    // Few plans are known (one per route and set of applying limits): a linear search over
    // them is cheaper than building a key to look them up by.
    std::size_t found = plans_.size();
    // Mostly the request's limits are its route's, known by their ids: the same ids as a
    // plan's are that plan.
    const bool known_by_ids = !current_ids_.empty() && current_ids_.size() == current_.size();
    if (known_by_ids)
        for (std::size_t p = 0; p < plans_.size() && found == plans_.size(); ++p)
            if (plans_[p].ids == current_ids_) found = p;
    for (std::size_t p = 0; p < plans_.size() && found == plans_.size(); ++p) {
        const auto& known = plans_[p].args;
        if (known.size() != decide_args_per_limit * current_.size()) continue;
        bool same = true;
        for (std::size_t i = 0; i < current_.size() && same; ++i) {
            const auto& args = *current_[i];
            for (std::size_t f = 0; f < decide_args_per_limit && same; ++f)
                same = known[decide_args_per_limit * i + f] == args[f];
        }
        if (same) found = p;
    }
    if (found == plans_.size()) {
        auto& plan = plans_.emplace_back();
        for (const auto* args : current_) {
            plan.args.insert(plan.args.end(), args->begin(), args->end());
            if (!plan.text.empty()) plan.text.push_back(';');
            for (std::size_t f = 0; f < decide_args_per_limit; ++f) {
                if (f > 0) plan.text.push_back(' ');
                plan.text.append((*args)[f]);
            }
        }
        if (known_by_ids) plan.ids = current_ids_;
        number_.push_back(0);
    }
    if (number_[found] == 0) {
        // A plan with the same text as one this batch sends already (two routes with the
        // same limits) goes by that one's number: each text is sent once.
        std::uint32_t number = 0;
        for (const auto other : sent_)
            if (plans_[other].text == plans_[found].text) {
                number = number_[other];
                break;
            }
        if (number == 0) {
            sent_.push_back(static_cast<std::uint32_t>(found));
            number = static_cast<std::uint32_t>(sent_.size());
        }
        number_[found] = number;
    }
    plan_of_.push_back(number_[found] - 1);
    tokens_.emplace_back();
    current_.clear();
    current_ids_.clear();
    owned_.clear();
}

void DecideArgs::end_request(std::string token) {
    end_request();
    if (!token.empty()) ++tokened_;
    tokens_.back() = std::move(token);
}

std::string_view DecideArgs::number_text(std::size_t n) {
    while (numbers_.size() <= n) numbers_.push_back(std::to_string(numbers_.size()));
    return numbers_[n];
}

const std::vector<std::string_view>& DecideArgs::argv() {
    argv_.clear();
    argv_.reserve(1 + sent_.size() + 2 * plan_of_.size());
    argv_.push_back(number_text(sent_.size()));
    for (const auto p : sent_) argv_.push_back(plans_[p].text);
    if (numbers_left_out(sent_.size(), tokened_ > 0)) return argv_;
    for (std::size_t r = 0; r < plan_of_.size(); ++r) {
        argv_.push_back(number_text(plan_of_[r] + 1));
        if (!tokens_[r].empty()) argv_.push_back(tokens_[r]);
    }
    return argv_;
}

std::vector<std::string> DecideArgs::take() {
    const auto& views = argv();
    std::vector<std::string> out(views.begin(), views.end());
    clear();
    return out;
}

DecideParts DecideArgs::take_parts() {
    DecideParts parts;
    parts.plans.reserve(sent_.size());
    for (const auto p : sent_) parts.plans.push_back(plans_[p].text);
    parts.plan_of = std::move(plan_of_);
    parts.tokens = std::move(tokens_);
    clear();
    return parts;
}

void DecideArgs::clear() {
    // Plans made of arguments without ids were this batch's alone (a cost, a calendar window):
    // not kept. Nor any, past max_kept_plans (a configuration reloaded many times).
    std::erase_if(plans_, [](const Plan& plan) { return plan.ids.empty(); });
    if (plans_.size() > max_kept_plans) plans_.clear();
    number_.assign(plans_.size(), 0);
    sent_.clear();
    plan_of_.clear();
    tokens_.clear();
    tokened_ = 0;
    current_.clear();
    current_ids_.clear();
    owned_.clear();
    argv_.clear();
}

namespace {

// A plan's number as the script reads it: "1" to P.
void append_plan_number(std::size_t index, std::vector<std::string>& argv) {
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, index + 1);
    argv.emplace_back(digits, end);
}

}  // namespace

std::vector<std::string> decide_argv(const std::vector<DecideParts*>& parts) {
    std::size_t requests = 0;
    for (const auto* part : parts) requests += part->requests();
    std::vector<std::string> argv;
    argv.reserve(1 + 2 * requests);
    argv.emplace_back();  // the number of plans, once known
    // The plans, each text once: few per part (one per route and set of limits), and the
    // parts mostly hold the same routes', so a linear search over those sent finds them.
    // `number` holds each part's plans' numbers in the call, one part after the other.
    std::vector<std::uint32_t> number;
    for (auto* part : parts)
        for (auto& text : part->plans) {
            std::size_t p = 1;
            while (p < argv.size() && argv[p] != text) ++p;
            if (p == argv.size()) argv.push_back(std::move(text));
            number.push_back(static_cast<std::uint32_t>(p - 1));
        }
    argv.front() = std::to_string(argv.size() - 1);
    const bool tokened = std::any_of(parts.begin(), parts.end(), [](const DecideParts* part) {
        return std::any_of(part->tokens.begin(), part->tokens.end(), [](const std::string& t) { return !t.empty(); });
    });
    if (numbers_left_out(argv.size() - 1, tokened)) return argv;
    std::size_t first_plan = 0;
    for (auto* part : parts) {
        for (std::size_t r = 0; r < part->plan_of.size(); ++r) {
            append_plan_number(number[first_plan + part->plan_of[r]], argv);
            if (!part->tokens[r].empty()) argv.push_back(std::move(part->tokens[r]));
        }
        first_plan += part->plans.size();
    }
    return argv;
}

}  // namespace sluice::limit
