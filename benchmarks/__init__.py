"""The benchmarks (docs/benchmarks.md). Run each from the repository root as a module,
`python -m benchmarks.NAME`; they import each other as `benchmarks.x`. Not installed by
`pip install .`: they measure a checkout.
"""
