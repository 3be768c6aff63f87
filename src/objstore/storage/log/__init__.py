"""One log's mechanics (format 3): its entries, segments and their indexes, head witness, checkpoint, engines."""
