"""The client benchmark's one-run table (``client_bench.py --table``)."""
