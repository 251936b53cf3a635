"""Test utilities shared across test modules (import as ``tests.helpers.*``)."""
