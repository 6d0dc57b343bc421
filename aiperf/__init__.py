"""AIPerf: an AutoML benchmark for AI-HPC clusters.

The library (`aiperf`) is pure: architecture graph, FLOP counting, morphism,
search and scoring are functions of their inputs. The one exception is
`aiperf.api`, the gRPC client package, which talks to the master over the
network and runs threads. Everything else that does I/O lives outside the
library: `master/`, `worker/` and the command line.
TensorFlow is imported lazily, only by the modules that train.
"""

__version__ = "0.1.0"
