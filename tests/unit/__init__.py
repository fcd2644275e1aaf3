"""Fast in-process tests."""
