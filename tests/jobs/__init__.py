"""Tests of the batch scripts in jobs/."""
