"""Generated from protos/ by `make proto` (client/python/generate.py). Do not edit."""
