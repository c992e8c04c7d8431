// Closing a run when the process is told to end: SIGTERM, the signal torchrun and torch's spawn send
// the ranks left after one fails, Slurm sends at a job's time limit or on preemption, and `kill` sends.
//
// Note [Closing on SIGTERM]
// SIGTERM's default action ends a process at once: no destructor, no finally, no atexit handler. A
// profiled run then loses what its recorder had not flushed yet (up to a flush interval of events),
// its --snapshot, and the line saying where its trace is. watch_termination() puts a handler of its
// own in place of that default, and only of that default: a handler the program (or a library of it)
// set is its choice, and stays. The handler does what a signal handler may: it writes the signal's
// number to a pipe. A thread of its own, waiting on that pipe, runs the close callback (stopping the
// recorder and writing what the run writes at its end) and then ends the process by the same signal,
// its default action restored, so whoever waits for it sees what it would have seen without memcomm:
// killed by SIGTERM. Whatever the callback waits on (a lock the interrupted code holds, an interpreter
// lock a long call keeps), the process ends by `deadline` after the signal; a second SIGTERM ends it at
// once. The callback runs on the watch's thread while the program goes on running, so it must only use
// what is safe to use beside the program's threads (the recorder's stop() is).
// A process forked from the watching one (a DataLoader worker) inherits the handler but not the
// thread: there the handler restores the default and ends the process by the signal, as before.
// SIGHUP (a closed terminal, a dropped ssh session), where it has its default action, is watched the
// same way: a run ended so lost its last steps (a short one, every step).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace memcomm {

// Runs `close` once on the watch's thread at the first SIGTERM, then ends the process by SIGTERM
// (Note [Closing on SIGTERM]); `late_note` goes to stderr when the deadline ends it before `close`
// returned. False, and nothing changed, when SIGTERM's disposition is not the default (ignored, or a
// handler the program set). Calling it again replaces the callback, the deadline and the note.
bool watch_termination(std::function<void()> close, std::chrono::milliseconds deadline, std::string late_note = {});

// Puts SIGTERM's default action back if the watch's handler is still the one in place (a program may
// have set its own since), so a later SIGTERM ends the process at once; the callback is dropped.
void unwatch_termination();

}  // namespace memcomm
