#include "config/diagnostic.hpp"

#include <algorithm>

namespace sluice::config {

std::string Diagnostic::str() const {
    if (line == 0) return file + ": " + message;
    std::string text = file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
    if (warning) text += "warning: ";
    return text + message;
}

void DiagnosticList::error(Position at, std::string message) {
    diagnostics_.push_back(Diagnostic{file_, at.line, at.column, std::move(message), false});
    ++errors_;
}

void DiagnosticList::warning(Position at, std::string message) {
    diagnostics_.push_back(Diagnostic{file_, at.line, at.column, std::move(message), true});
}

std::vector<Diagnostic> DiagnosticList::sorted() const {
    std::vector<Diagnostic> result = diagnostics_;
    std::stable_sort(result.begin(), result.end(), [](const Diagnostic& a, const Diagnostic& b) {
        return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    return result;
}

}  // namespace sluice::config
