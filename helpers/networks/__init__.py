"""Networks as torch modules: the study's four of Figure 2, three CNNs to train, and their data."""
