// libFuzzer target for memcomm-view's live mode past the wire format: the bytes of up to three
// connections go through prof::ConnectionDecoder (what StreamReceiver runs per socket) into a
// LiveSession, which is published into one Timeline as the viewer does at 20 Hz (Note [Live
// rebuild]), with the indexes kept up to date the way the app keeps them; the model is walked at the
// end. The decoder alone has its own target (profiler_stream_decoder_fuzz); this one covers what the
// session does with whatever the decoder lets through: ranks claimed twice, reconnects, events for
// strings never defined, blocks that do not add up.
//
// Input: data[0] = the piece size (bits 0-4: 1-32 bytes), the number of connections (bits 5-6:
// 1-3) and whether connections after the first keep the first one's stream id (bit 7: a reconnect)
// or get another (another run claiming the rank). The rest is one stream that every connection
// sends; connection k starts once connection k-1 has sent half of it, so each later connection
// meets the one before it still open. A connection that fails is closed at once; the others close
// at their stream's end. Seeds: the stream decoder's (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <memcomm/profiler/stream_connection.hpp>
#include <memcomm/view/allocator_state.hpp>
#include <memcomm/view/analysis.hpp>
#include <memcomm/view/live.hpp>

#include "viewer_model_walk.hpp"

namespace {
using memcomm::prof::ConnectionDecoder;
using memcomm::prof::LiveMessage;

struct Sender {
  std::unique_ptr<ConnectionDecoder> decoder;
  std::vector<std::uint8_t> stream;
  std::size_t sent = 0;
  bool open = true;
};

// What the app does with each publish (AppState::appended): allocator timelines per rank slot,
// updated from where the append changed them, and the step table from the first changed time.
struct Shown {
  memcomm::view::Timeline tl;
  std::vector<std::unique_ptr<memcomm::view::AllocatorTimeline>> alloc;
  std::vector<memcomm::view::StepRow> steps;

  void publish(memcomm::view::LiveSession& session) {
    const memcomm::view::AppendResult r = session.publish(tl);
    if (r.ranks_added || alloc.size() != tl.ranks.size()) {
      alloc.clear();
      for (const auto& rd : tl.ranks) alloc.push_back(std::make_unique<memcomm::view::AllocatorTimeline>(&rd.alloc_events));
    } else {
      for (std::size_t s = 0; s < r.alloc_from.size() && s < alloc.size(); ++s)
        if (r.alloc_from[s] != memcomm::view::AppendResult::npos) alloc[s]->update(r.alloc_from[s]);
    }
    steps = r.ranks_added ? memcomm::view::step_table(tl) : memcomm::view::step_table(tl, steps, r.first_time);
    for (auto& a : alloc) (void)a->seek(tl.end).largest_free();
  }
};

// The stream id sits at a fixed offset of the 128-byte hello at the stream's start.
void other_stream_id(std::vector<std::uint8_t>& stream, std::uint8_t k) {
  const std::size_t at = offsetof(memcomm::prof::StreamHello, stream_id);
  if (stream.size() >= sizeof(memcomm::prof::StreamHello)) stream[at] ^= static_cast<std::uint8_t>(k);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t piece = 1 + (data[0] & 31u);
  const int connections = 1 + ((data[0] >> 5) & 3) % 3;
  const bool same_sender = (data[0] & 0x80) != 0;

  std::vector<Sender> senders(static_cast<std::size_t>(connections));
  for (int k = 0; k < connections; ++k) {
    Sender& s = senders[static_cast<std::size_t>(k)];
    s.decoder = std::make_unique<ConnectionDecoder>(k + 1, 1u << 20, nullptr);
    s.stream.assign(data + 1, data + size);
    if (k > 0 && !same_sender) other_stream_id(s.stream, static_cast<std::uint8_t>(k));
  }

  memcomm::view::LiveSession session;
  Shown shown;
  std::vector<LiveMessage> arrived;
  std::vector<std::string> said;
  double now_s = 0;
  for (bool any = true; any;) {
    any = false;
    for (std::size_t k = 0; k < senders.size(); ++k) {
      Sender& s = senders[k];
      const bool started = k == 0 || senders[k - 1].sent * 2 >= senders[k - 1].stream.size();
      if (!s.open || !started) continue;
      any = true;
      const std::size_t n = std::min(piece, s.stream.size() - s.sent);
      const bool ok = s.decoder->feed(s.stream.data() + s.sent, n, arrived);
      s.sent += n;
      if (!ok || s.sent == s.stream.size()) {
        s.decoder->close(ok ? s.decoder->reason_at_eof() : s.decoder->error(), arrived);
        s.open = false;
      }
    }
    now_s += 0.02;  // a frame of the viewer's redraw: every other one may publish
    if (session.take(arrived, said, now_s)) shown.publish(session);
  }
  session.take(arrived, said, now_s + 1);
  shown.publish(session);
  memcomm_fuzz::walk(shown.tl);
  return 0;
}
