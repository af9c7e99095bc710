"""The quick subset's definition (tests/quick.txt)."""
