"""Binds every Gherkin feature under tests/features to its steps."""

from pytest_bdd import scenarios

scenarios(".")
