"""Helpers shared by the unit and end-to-end tests (model builders, clients, fakes)."""
