"""Fixtures for the PANNs tests (the references live in tests/panns_reference.py)."""

from __future__ import annotations

from panns_reference import panns_inference_models  # noqa: F401  (session fixture)
