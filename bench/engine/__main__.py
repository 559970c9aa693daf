"""The in-process engine bench: TTFP, RTF, throughput and memory per concurrency level, full-size
random weights (`bench/engine/levels.py`)."""

from bench.engine.levels import main

raise SystemExit(main())
