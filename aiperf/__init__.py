"""AIPerf: an AutoML benchmark for AI-HPC clusters.

The library (`aiperf`) is pure: architecture graph, FLOP counting, morphism,
search and scoring are functions of their inputs. I/O lives in `master/` and
`worker/`. TensorFlow is imported lazily, only by the modules that train.
"""

__version__ = "0.1.0"
