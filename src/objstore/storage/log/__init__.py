"""One log's mechanics: its entries, segment files and their indexes, witness, checkpoint, and the log-level fsck."""
