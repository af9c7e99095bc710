"""The README's own-data commands and the launcher it shows (hpcdgnn-mpirun)."""
