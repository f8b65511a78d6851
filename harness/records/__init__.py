"""The library's records beyond the schema: the library record and seed layout, content fingerprints and versions,
scenario JSON and lines, files kept inside a library."""
