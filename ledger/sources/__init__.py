"""Source adapters: one module per agent format, raw records in, observations out."""
