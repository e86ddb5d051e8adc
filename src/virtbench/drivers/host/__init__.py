"""The host driver: the bare machine, commands as local processes."""
