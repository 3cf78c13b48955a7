"""What the benchmark scripts share; each script in benchmarks/ is one experiment and imports
only from here (and infinipipe), never from another script."""
