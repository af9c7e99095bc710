"""Neural-network layers and DGNN models."""
