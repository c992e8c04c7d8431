// Snapshots the allocation tests write themselves: one device, four events, no usable frames
// (issue 18's bad input: a snapshot with frames missing, empty or malformed still opens); one
// whose only event completes a free requested before the trace.
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

// pickle.dumps(d, protocol=2) of a ring buffer cut between a free's request and its completion:
//   {'segments': [{'device': 0, 'address': 16 MiB, 'total_size': 2 MiB, 'stream': 0, 'segment_type': 'small',
//                  'blocks': [{'address': 16 MiB, 'size': 1024, 'requested_size': 1000, 'state': 'active_allocated'},
//                             {'address': 16 MiB + 1024, 'size': 2 MiB - 1024, 'requested_size': 0, 'state': 'inactive'}]}],
//    'device_traces': [[{'action': 'free_completed', 'addr': 16 MiB + 1024, 'size': 3000, 'stream': 0, 'time_us': 10}]]}
inline constexpr const char* kPendingAtStartHex =
    "80027d71002858080000007365676d656e747371015d71027d710328580600000064657669636571044b005807000000616464726573"
    "7371054a00000001580a000000746f74616c5f73697a6571064a00002000580600000073747265616d71074b00580c0000007365676d"
    "656e745f7479706571085805000000736d616c6c71095806000000626c6f636b73710a5d710b287d710c2868054a0000000158040000"
    "0073697a65710d4d0004580e0000007265717565737465645f73697a65710e4de80358050000007374617465710f5810000000616374"
    "6976655f616c6c6f63617465647110757d71112868054a00040001680d4a00fc1f00680e4b00680f5808000000696e61637469766571"
    "1275657561580d0000006465766963655f74726163657371135d71145d71157d7116285806000000616374696f6e7117580e00000066"
    "7265655f636f6d706c65746564711858040000006164647271194a00040001680d4db80b68074b00580700000074696d655f7573711a"
    "4b0a756161752e";

// Writes a snapshot given in hex to a temporary file and returns its path.
inline std::string write_hex_snapshot(const char* name, const std::string& hex) {
  const std::string path = memcomm::test::temp_path("memcomm_viewer_tests", name);
  std::ofstream f(path, std::ios::binary);
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) f.put(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return path;
}

inline std::string write_no_frames_snapshot() { return write_hex_snapshot("no_frames.pickle", kNoFramesHex); }
inline std::string write_pending_at_start_snapshot() { return write_hex_snapshot("pending_at_start.pickle", kPendingAtStartHex); }

}  // namespace snapshot_fixture
