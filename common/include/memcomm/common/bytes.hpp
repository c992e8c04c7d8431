// Byte sizes for people: one way to print them and one way to read them, in every tool.
#pragma once

#include <cstdint>
#include <string>

namespace memcomm {

// "512 B", "1.5 KiB", "20.0 MiB", "1.50 GiB": binary units, `decimals` digits after the point below
// a GiB and at least two from a GiB up (a GiB is too coarse to round to a tenth).
std::string format_bytes(std::uint64_t bytes, int decimals = 1);
// "20.0": MiB with one decimal and no unit, for tables whose column says MiB and for log lines that
// keep one unit from step to step (format_bytes would change unit as a figure grows).
std::string format_mib(std::uint64_t bytes);
// A byte count measured as a double (the viewer's counter values, their min/max): rounded to whole
// bytes for format_bytes(); 0 when negative or not a number.
std::uint64_t whole_bytes(double bytes);

// A size as people write it: "4096", "512KiB", "1.5GiB", "2GB", "64 m", "2e9". The number may have a
// fraction and a decimal exponent; units are case-insensitive: B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) and
// KB, MB, GB, TB (powers of 1000). Throws std::invalid_argument that quotes the text and says what
// is wrong (no number, an unknown unit, zero or out of range, a fraction of a byte). With
// `allow_zero`, a zero size ("0", "0B", "0 MiB") is 0 instead of an error. At most 2^62 bytes (4 EiB,
// past any memory): sizes are rounded up to pages and added to other sizes, and near 2^64 that
// overflowed (memcomm-replay --capacity 9223372036854775807 failed inside the allocator as a
// "size 0" reservation).
std::uint64_t parse_size(const std::string& text, bool allow_zero = false);

}  // namespace memcomm
