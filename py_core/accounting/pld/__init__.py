"""Privacy-loss distributions: exact n-fold k-RR and the composition of k-RR groups."""
