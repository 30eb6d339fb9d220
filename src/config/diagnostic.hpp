// Problems found in a configuration file, with their position.
#pragma once

#include <string>
#include <vector>

namespace sluice::config {

struct Diagnostic {
    std::string file;
    int line = 0;    // 1-based; 0 when the problem is the file itself (unreadable)
    int column = 0;  // 1-based
    std::string message;
    bool warning = false;
    // "FILE:LINE:COL: message", "FILE:LINE:COL: warning: message", or "FILE: message" (line 0).
    std::string str() const;
};

// A place in the file, 1-based; {0, 0} when unknown.
struct Position {
    int line = 0;
    int column = 0;
};

// Collects the diagnostics of one file.
class DiagnosticList {
public:
    explicit DiagnosticList(std::string file) : file_(std::move(file)) {}

    void error(Position at, std::string message);
    void warning(Position at, std::string message);
    bool has_errors() const { return errors_ > 0; }
    std::size_t error_count() const { return errors_; }
    // In file order (by line, then column); equal positions keep the order they were found in.
    std::vector<Diagnostic> sorted() const;

private:
    std::string file_;
    std::vector<Diagnostic> diagnostics_;
    std::size_t errors_ = 0;
};

}  // namespace sluice::config
