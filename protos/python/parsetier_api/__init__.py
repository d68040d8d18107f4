"""Generated from protos/ by `make proto` (protos/python/generate.py). Do not edit."""
