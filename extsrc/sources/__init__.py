"""Where samples come from: the datasets extsrc reads and how their bytes are fetched."""
