"""hpcdgnn: distributed training of dynamic graph neural networks on HPC clusters (SPMD, MPI)."""
