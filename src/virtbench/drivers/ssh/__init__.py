"""The ssh driver: bare remote hosts of an inventory group, over OpenSSH."""
