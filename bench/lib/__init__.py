"""What the benches share, and what the tests use to drive and measure the same things.

Modules: args (the shared data as defaults), models (random full-size models, prompts, voices),
machine (what ran it, the load, the commit), record (the JSON record), streams (timed concurrent
`stream()` calls), drive (a runner driven directly), app (`python app.py` run and watched from
outside), reliability_clients / reliability_attacks (the reliability scenarios' clients and hostile
clients), playback (a listener's playback simulated), player_stream (the player's stream read as the
player reads it), audio_measures, fidelity (precision against fp32), trace (the engine traced), aoti
(AOTInductor units' greedy run). Tests import these modules; nothing here imports the tests.
"""
