"""The parts of memcomm.profiler (the public module), one job each: which profiler runs (running),
the trace's codes (codes), the phase hooks (hooks), the process groups' indices (comms), the clock
offsets over the group (clock), and what the script wraps its loop in (wrappers, collectives)."""
