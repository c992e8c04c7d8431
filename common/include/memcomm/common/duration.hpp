// Durations for people, in milliseconds or rounded to their scale: one way to print them in every
// tool's text.
#pragma once

#include <cstdint>
#include <string>

namespace memcomm {

// Nanoseconds as milliseconds with `decimals` digits after the point and `unit` after the number:
// format_ms(12'345'678) == "12.3 ms"; tables whose column name carries the unit pass unit = ""
// (format_ms(12'345'678, 3, "") == "12.346").
std::string format_ms(std::int64_t ns, int decimals = 1, const char* unit = " ms");

// How long something will take, rounded to its scale: "40 s", "12 min", "3.5 h".
std::string format_rough_duration(double seconds);

}  // namespace memcomm
