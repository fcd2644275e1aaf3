"""Model code that tests serve (copied into model folders) and read for their helpers."""
