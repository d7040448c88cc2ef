"""Quill's benchmark suite: ``python -m bench.run [--quick|--full]`` (docs/benchmarks.md)."""
