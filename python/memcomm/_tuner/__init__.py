"""The parts of memcomm.tuner (the public module, tune()), one job each: argument checks (options),
agreement over the ranks (agreement), the memory limit (memory), the state copies (state), the
gradient buckets (buckets), the user's steps (runner), the probes (prober) and tune()'s setup (setup)."""
