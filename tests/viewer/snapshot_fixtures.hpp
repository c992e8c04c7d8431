// Snapshots the allocation tests write themselves: one device, four events, no usable frames
// (issue 18's bad input: a snapshot with frames missing, empty or malformed still opens).
#pragma once

#include <fstream>
#include <string>

#include "memcomm_test.hpp"

namespace snapshot_fixture {

// pickle.dumps(d, protocol=2) of
//   {'segments': [], 'device_traces': [[
//     {'action': 'alloc', 'addr': 4096, 'size': 1024, 'stream': 0, 'time_us': 1},                      # no frames
//     {'action': 'alloc', 'addr': 8192, 'size': 2048, 'stream': 0, 'time_us': 2, 'frames': []},        # empty
//     {'action': 'alloc', 'addr': 16384, 'size': 512, 'stream': 0, 'time_us': 3,
//      'frames': [{'filename': 7, 'line': 'x'}]},                                                     # malformed
//     {'action': 'free_requested', 'addr': 4096, 'size': 1024, 'stream': 0, 'time_us': 4}]]}
inline constexpr const char* kNoFramesHex =
    "80027d71002858080000007365676d656e747371015d7102580d0000006465766963655f74726163657371035d71045d7105287d7106"
    "285806000000616374696f6e71075805000000616c6c6f63710858040000006164647271094d0010580400000073697a65710a4d0004"
    "580600000073747265616d710b4b00580700000074696d655f7573710c4b01757d710d286807680868094d0020680a4d0008680b4b00"
    "680c4b0258060000006672616d6573710e5d710f757d7110286807680868094d0040680a4d0002680b4b00680c4b03680e5d71117d71"
    "1228580800000066696c656e616d6571134b0758040000006c696e65711458010000007871157561757d7116286807580e000000667265"
    "655f726571756573746564711768094d0010680a4d0004680b4b00680c4b04756561752e";

// Writes the snapshot above to a temporary file and returns its path.
inline std::string write_no_frames_snapshot() {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", "no_frames.pickle");
  std::ofstream f(path, std::ios::binary);
  const std::string hex = kNoFramesHex;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) f.put(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return path;
}

}  // namespace snapshot_fixture
