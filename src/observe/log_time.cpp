#include "observe/log_time.hpp"

#include <cstdio>
#include <ctime>

namespace sluice::observe {

void append_log_time(std::string& out, std::chrono::system_clock::time_point at, bool local) {
    using namespace std::chrono;
    const auto ms = duration_cast<milliseconds>(at.time_since_epoch()).count();
    std::time_t seconds = static_cast<std::time_t>(ms / 1000);
    int millis = static_cast<int>(ms % 1000);
    if (millis < 0) {
        millis += 1000;
        --seconds;
    }
    // The date, time and offset change once a second: each thread keeps its last one.
    struct Cached {
        std::time_t seconds = -1;
        bool local = false;
        char date_time[24] = {};  // "2026-11-25T19:40:01"
        char offset[8] = {};      // "Z" or "+01:00"
    };
    thread_local Cached cached;
    if (cached.seconds != seconds || cached.local != local) {
        std::tm tm{};
        if (local) {
            localtime_r(&seconds, &tm);
            const long off = tm.tm_gmtoff / 60;
            const long magnitude = off < 0 ? -off : off;
            std::snprintf(cached.offset, sizeof cached.offset, "%c%02ld:%02ld", off < 0 ? '-' : '+', magnitude / 60,
                          magnitude % 60);
        } else {
            gmtime_r(&seconds, &tm);
            cached.offset[0] = 'Z';
            cached.offset[1] = '\0';
        }
        std::snprintf(cached.date_time, sizeof cached.date_time, "%04d-%02d-%02dT%02d:%02d:%02d",
                      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        cached.seconds = seconds;
        cached.local = local;
    }
    char frac[5] = {'.', static_cast<char>('0' + millis / 100), static_cast<char>('0' + millis / 10 % 10),
                    static_cast<char>('0' + millis % 10), '\0'};
    out += cached.date_time;
    out += frac;
    out += cached.offset;
}

std::string log_time(std::chrono::system_clock::time_point at, bool local) {
    std::string out;
    append_log_time(out, at, local);
    return out;
}

}  // namespace sluice::observe
