"""The service benchmark (``bench/service_bench.py``) in parts: the servers it starts, the loads it
sends and the report it writes."""
