"""The admin pages of rows a running process caches."""
