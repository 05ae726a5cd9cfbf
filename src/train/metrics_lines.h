// A resumed run's --metrics file: the lines it keeps of the interrupted run.
#pragma once
#include <cstdint>
#include <string>

namespace oomb {

// The lines of a --metrics file (JSON lines) to keep when a run resumes at `step`: each whole line
// (ended by '\n') that is a JSON object whose "step" is an integer below `step`, in order; the
// rest (later steps, a torn last line, anything else) dropped.
std::string metrics_before(const std::string& text, int64_t step);

// The first whole line (1-based) that is not a --metrics line (a JSON object with a "step"), blank
// lines aside; 0 when there is none. A file holding one is not a run's metrics: a run refuses to
// truncate it.
int64_t first_foreign_line(const std::string& text);

}  // namespace oomb
