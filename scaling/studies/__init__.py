"""Studies built on the core library: the d_k sweep, the claims of the notes, the coordinate check, transfer, training."""
